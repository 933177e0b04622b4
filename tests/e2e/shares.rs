//! Shared bounds, as a tenant floods them (docs/SECURITY.md): the writer's pending writes are shared
//! fairly by namespace, so a flood over several namespaces costs those namespaces, and the
//! controller never stops reading its watch to wait for the writer.

use crate::OPERATOR;
use anyhow::{Result, bail, ensure};
use event_series_test_support::cluster::{Dedicated, apply_on, client_for};
use event_series_test_support::node::metric_sum;
use event_series_test_support::raw::{create_all, kubelet_backoff};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Event as CoreEvent, Namespace};
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ListParams, PostParams};
use std::time::{Duration, Instant};

const FLOODS: usize = 5;
const PER_FLOOD: usize = 300;

/// Five namespaces each start 300 series at once against `--qps 2` and a bound of 100 pending
/// writes (40 per namespace): far more than the writer can take. A quiet namespace's loop that
/// starts afterwards still gets its series object at once (it is served in turn with the floods),
/// its heartbeats (every 20 s) keep coming, `/readyz` stays 200 and the watch never stalls. Before,
/// three flooding namespaces filled the bound, the writer stopped taking intents, and the quiet
/// namespace's create waited behind every flood write (minutes at 2 a second).
#[tokio::test]
async fn five_flooding_namespaces_cannot_hold_up_a_quiet_ones_writes() -> Result<()> {
    let cluster = Dedicated::start("shares", &[])?;
    let kc = cluster.kubeconfig.as_path();
    let admin = client_for(kc).await?;
    apply_on(
        kc,
        "apiVersion: eventseries.dev/v1alpha1\nkind: EventSeriesPolicy\nmetadata:\n  name: quiet\n\
         spec:\n  namespaceSelector:\n    matchLabels: {kubernetes.io/metadata.name: quiet}\n  \
         heartbeatInterval: 20s\n  firstRefresh: \"0\"\n  finishAfter: 5m\n  seriesWindow: 5m\n",
        &[],
    )?;
    let names: Vec<String> = (0..FLOODS)
        .map(|i| format!("flood-{i}"))
        .chain(["quiet".to_owned()])
        .collect();
    let namespaces: Api<Namespace> = Api::all(admin.clone());
    for name in &names {
        let ns: Namespace =
            serde_json::from_value(serde_json::json!({"metadata": {"name": name}}))?;
        namespaces.create(&PostParams::default(), &ns).await?;
    }
    let op = OPERATOR.launch(
        kc,
        "shares",
        &[
            "--qps",
            "2",
            "--burst",
            "2",
            "--max-pending-writes",
            "100",
            "--max-pending-writes-per-namespace",
            "40",
        ],
    )?;
    let ready = |op: &event_series_test_support::process::Operator| {
        op.get("/readyz").map(|r| r.0) == Some(200)
    };
    let started = Instant::now();
    while !ready(&op) {
        ensure!(started.elapsed() < Duration::from_secs(60), "never Ready");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    futures::stream::iter(0..FLOODS)
        .map(|n| {
            let api: Api<CoreEvent> = Api::namespaced(admin.clone(), &format!("flood-{n}"));
            async move {
                let ns = format!("flood-{n}");
                let raws = (0..PER_FLOOD)
                    .map(|i| kubelet_backoff(&ns, &format!("p{i}.raw"), &format!("p{i}"), 2));
                create_all(&api, raws, 8).await
            }
        })
        .buffer_unordered(FLOODS)
        .try_collect::<Vec<_>>()
        .await?;
    // The floods' intents are on their way; the quiet namespace's loop starts now.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let quiet_raw: Api<CoreEvent> = Api::namespaced(admin.clone(), "quiet");
    create_all(&quiet_raw, [kubelet_backoff("quiet", "q.raw", "q", 2)], 1).await?;
    let asked = Instant::now();
    let quiet: Api<Event> = Api::namespaced(admin.clone(), "quiet");
    let mut writes: Vec<(Duration, String)> = Vec::new();
    let mut not_ready = 0;
    while asked.elapsed() < Duration::from_secs(90) {
        not_ready += usize::from(!ready(&op));
        let ours: Vec<_> = quiet
            .list(&ListParams::default().labels("app.kubernetes.io/managed-by=event-series"))
            .await?
            .items
            .into_iter()
            .filter_map(|e| e.metadata.resource_version)
            .collect();
        if let Some(rv) = ours.first()
            && writes.last().is_none_or(|(_, last)| last != rv)
        {
            writes.push((asked.elapsed(), rv.clone()));
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    println!(
        "quiet namespace's series object written at {:?} after its loop started",
        writes.iter().map(|(t, _)| *t).collect::<Vec<_>>()
    );
    let Some((created, _)) = writes.first() else {
        bail!("the quiet namespace's loop never got its series object in 90 s");
    };
    assert!(
        *created <= Duration::from_secs(30),
        "the quiet namespace's create landed {created:?} after its loop started"
    );
    let gaps: Vec<Duration> = writes.windows(2).map(|w| w[1].0 - w[0].0).collect();
    assert!(
        writes.len() >= 3 && gaps.iter().all(|g| *g <= Duration::from_secs(35)),
        "the quiet series' heartbeats (every 20 s) fell behind: writes at {writes:?}"
    );
    assert_eq!(
        not_ready, 0,
        "/readyz failed {not_ready} times during the flood"
    );
    assert_eq!(op.metric("event_series_watch_stalls_total"), 0.0);
    let (_, scrape) = op.get("/metrics").unwrap_or_default();
    let shed = metric_sum(&scrape, "event_series_writes_shed_total", &[]);
    println!("writes shed: {shed}");
    ensure!(shed > 0.0, "the floods' excess writes are shed and counted");
    drop(op);
    drop(cluster);
    Ok(())
}
