//! Tests that need an apiserver of their own: write economy counted from the apiserver's own
//! `/metrics`, and a watch that the apiserver keeps expiring.

use crate::fixture::{Dedicated, TestNamespace, client_for, kubectl_on};
use crate::operator::{Operator, count, state, wait_for};
use anyhow::Result;
use k8s_openapi::api::core::v1::{Event as CoreEvent, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::api::{Api, Patch, PatchParams, PostParams};
use std::path::Path;
use std::time::Instant;

/// Writes (POST, PUT, PATCH, DELETE) to events.k8s.io the apiserver has served, from its `/metrics`.
fn events_k8s_io_writes(kubeconfig: &Path) -> Result<u64> {
    let text = kubectl_on(kubeconfig, &["get", "--raw", "/metrics"])?;
    Ok(text
        .lines()
        .filter(|l| l.starts_with("apiserver_request_total{"))
        .filter(|l| l.contains("group=\"events.k8s.io\"") && l.contains("resource=\"events\""))
        .filter(|l| {
            ["POST", "PUT", "PATCH", "DELETE"]
                .iter()
                .any(|v| l.contains(&format!("verb=\"{v}\"")))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64)
}

/// A legacy-recorder-style raw event: created once, then its `count` patched once per occurrence.
async fn legacy_loop(api: &Api<CoreEvent>, ns: &str, name: &str, occurrences: i32) -> Result<()> {
    let now = || Time(k8s_openapi::jiff::Timestamp::now());
    let ev = CoreEvent {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(ns.into()),
            ..Default::default()
        },
        involved_object: ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Pod".into()),
            namespace: Some(ns.into()),
            name: Some(format!("pod-{name}")),
            uid: Some(format!("uid-{name}")),
            ..Default::default()
        },
        reason: Some("BackOff".into()),
        message: Some("Back-off restarting failed container".into()),
        type_: Some("Warning".into()),
        source: Some(EventSource {
            component: Some("kubelet".into()),
            host: Some("node-1".into()),
        }),
        count: Some(1),
        first_timestamp: Some(now()),
        last_timestamp: Some(now()),
        ..Default::default()
    };
    api.create(&PostParams::default(), &ev).await?;
    for c in 2..=occurrences {
        let patch = serde_json::json!({"count": c, "lastTimestamp": now()});
        api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
    }
    Ok(())
}

/// SPEC "Writes per series": 1 create + one per heartbeat + 1 finish, whatever the number of
/// occurrences, counted by the apiserver itself.
#[tokio::test]
async fn writes_per_series_are_independent_of_occurrences() -> Result<()> {
    let cluster = Dedicated::start("economy", &[])?;
    let client = client_for(&cluster.kubeconfig).await?;
    let ns = TestNamespace::new(&client, "economy").await?;
    let heartbeat_secs = 4;
    let op = Operator::start_on(
        &cluster.kubeconfig,
        &ns.name,
        &[
            "--finish-after",
            "6s",
            "--series-window",
            "6s",
            "--heartbeat-interval",
            "4s",
        ],
    )?;
    let before = events_k8s_io_writes(&cluster.kubeconfig)?;
    let started = Instant::now();
    let api: Api<CoreEvent> = Api::namespaced(client.clone(), &ns.name);
    legacy_loop(&api, &ns.name, "loop", 1000).await?;
    let done = wait_for(
        &client,
        &ns.name,
        "the loop Finished with 1,000 occurrences",
        |objs| objs.len() == 1 && state(&objs[0]) == "Finished" && count(&objs[0]) == 1000,
    )
    .await?;
    let elapsed = started.elapsed().as_secs();
    let writes = events_k8s_io_writes(&cluster.kubeconfig)? - before;
    let heartbeats_at_most = elapsed / heartbeat_secs + 1;
    println!("1,000 occurrences in {elapsed}s: {writes} writes to events.k8s.io by the operator");
    assert!(
        writes >= 2 && writes <= 2 + heartbeats_at_most,
        "{writes} writes for one series over {elapsed}s (at most 2 + {heartbeats_at_most})"
    );
    let own: f64 = ["create", "update"]
        .iter()
        .map(|v| {
            op.metric(&format!(
                "event_series_api_requests_total{{verb=\"{v}\",code=\"20{}\"}}",
                if *v == "create" { 1 } else { 0 }
            ))
        })
        .sum();
    assert_eq!(
        own as u64, writes,
        "the operator's count of its writes matches the apiserver's"
    );
    assert_eq!(done[0].metadata.labels.as_ref().map(|l| l.len()), Some(3));
    ns.cleanup().await
}

/// SPEC Input: watches that end every 2 seconds are re-established from the last resourceVersion,
/// never by relisting, and counts stay exact. (kube-rs always sends `timeoutSeconds`, so the short
/// apiserver `--min-request-timeout` alone would not end them; `--watch-timeout` does.)
#[tokio::test]
async fn expiring_watches_resume_without_relisting() -> Result<()> {
    let cluster = Dedicated::start(
        "watch-expiry",
        &[("APISERVER_EXTRA_ARGS", "--min-request-timeout=2")],
    )?;
    let client = client_for(&cluster.kubeconfig).await?;
    let ns = TestNamespace::new(&client, "expiry").await?;
    let op = Operator::start_on(
        &cluster.kubeconfig,
        &ns.name,
        &[
            "--finish-after",
            "20s",
            "--series-window",
            "20s",
            "--heartbeat-interval",
            "1h",
            "--watch-timeout",
            "2s",
        ],
    )?;
    let api: Api<CoreEvent> = Api::namespaced(client.clone(), &ns.name);
    let now = || Time(k8s_openapi::jiff::Timestamp::now());
    legacy_loop(&api, &ns.name, "slow", 1).await?;
    // Occurrences spread over several watch lifetimes (the apiserver picks each timeout between
    // min-request-timeout and twice it).
    for c in 2..=12 {
        tokio::time::sleep(std::time::Duration::from_millis(700)).await;
        let patch = serde_json::json!({"count": c, "lastTimestamp": now()});
        api.patch("slow", &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
    }
    let done = wait_for(
        &client,
        &ns.name,
        "the loop Finished with 12 occurrences",
        |objs| objs.len() == 1 && state(&objs[0]) == "Finished" && count(&objs[0]) == 12,
    )
    .await?;
    assert_eq!(done.len(), 1);
    let restarts = op.metric("event_series_watch_restarts_total");
    assert!(
        restarts >= 3.0,
        "the watch was re-established {restarts} times"
    );
    assert_eq!(op.metric("event_series_watch_relists_total"), 0.0);
    ns.cleanup().await
}
