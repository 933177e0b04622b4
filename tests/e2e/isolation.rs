//! Untrusted tenants on the real apiserver, each acting through a ServiceAccount token whose Role
//! allows events in its own namespace only (and `view` on one other): forged series objects read
//! back at a restart, a flood beside a quiet namespace under `maxActiveSeries`, emitters whose
//! clocks are minutes off, and `includeNote` switched live with a restart in between.

use crate::OPERATOR;
use crate::operator::{count, state, wait_for, wait_for_within};
use anyhow::{Context, Result, ensure};
use event_series_test_support::cluster::{
    Dedicated, TestNamespace, apply_on, client, client_for, kubeconfig, kubectl, series,
    tenant_client,
};
use event_series_test_support::raw::{
    Occurrences, app_container, at_every_limit, create_all, kubelet, kubelet_backoff,
};
use k8s_openapi::api::core::v1::Event as CoreEvent;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{Api, Patch, PatchParams, PostParams};
use std::time::Duration;

/// One more occurrence of raw event `name` about Pod `pod`, as a legacy recorder writes it, timed
/// by the emitter's clock (`skew` off the real one): created at count 1, then patched.
async fn occur(
    api: &Api<CoreEvent>,
    ns: &str,
    name: &str,
    pod: &str,
    n: i32,
    skew: SignedDuration,
) -> Result<()> {
    let at = Timestamp::now()
        .checked_add(skew)
        .context("timestamp out of range")?;
    if n == 1 {
        let regarding = app_container(ns, pod, format!("uid-{pod}"));
        let seen = Occurrences::at(1, at);
        let ev = kubelet(ns, name, regarding, "BackOff", "Back-off".into(), seen);
        api.create(&PostParams::default(), &ev).await?;
    } else {
        let patch = serde_json::json!({"count": n, "lastTimestamp": Time(at)});
        api.patch(name, &PatchParams::default(), &Patch::Merge(patch))
            .await?;
    }
    Ok(())
}

/// Occurrence `n` of each of `count` loops (Pods `loop-<i>`), on time.
async fn loops(api: &Api<CoreEvent>, ns: &str, count: usize, n: i32) -> Result<()> {
    for q in 0..count {
        let pod = format!("loop-{q}");
        let raw = format!("{pod}.raw");
        occur(api, ns, &raw, &pod, n, SignedDuration::ZERO).await?;
    }
    Ok(())
}

/// A cluster of its own with a quiet namespace and a flooding one, each with its tenant (Events in
/// its own namespace, `view` on the other).
struct QuietAndFlood {
    cluster: Dedicated,
    admin: kube::Client,
    quiet: TestNamespace,
    flood: TestNamespace,
    victim: kube::Client,
    flooder: kube::Client,
}

impl QuietAndFlood {
    /// The cluster `name`, its namespaces `<prefix>quiet` and `<prefix>flood`.
    async fn start(name: &str, prefix: &str) -> Result<QuietAndFlood> {
        let cluster = Dedicated::start(name, &[])?;
        let kc = cluster.kubeconfig.as_path();
        let admin = client_for(kc).await?;
        let quiet = TestNamespace::new(&admin, &format!("{prefix}quiet")).await?;
        let flood = TestNamespace::new(&admin, &format!("{prefix}flood")).await?;
        let victim = tenant_client(&admin, kc, &quiet.name, &flood.name).await?;
        let flooder = tenant_client(&admin, kc, &flood.name, &quiet.name).await?;
        Ok(QuietAndFlood {
            cluster,
            admin,
            quiet,
            flood,
            victim,
            flooder,
        })
    }

    fn kubeconfig(&self) -> &std::path::Path {
        &self.cluster.kubeconfig
    }

    async fn end(self) -> Result<()> {
        self.quiet.cleanup().await?;
        self.flood.cleanup().await?;
        drop(self.cluster);
        Ok(())
    }
}

/// Emitters whose clocks are 7 minutes behind and 5 minutes ahead of the operator's: each loop gets
/// one series with every occurrence.
#[tokio::test]
async fn emitters_with_clocks_minutes_off_get_one_series_each_with_exact_counts() -> Result<()> {
    let admin = client().await?;
    let ns = TestNamespace::new(&admin, "skewed_clocks").await?;
    let other = TestNamespace::new(&admin, "skewed_clocks_other").await?;
    let tenant = tenant_client(&admin, kubeconfig(), &ns.name, &other.name).await?;
    let op = OPERATOR.launch(
        kubeconfig(),
        &ns.name,
        &[
            "--namespace",
            &ns.name,
            "--finish-after",
            "8s",
            "--series-window",
            "8s",
        ],
    )?;
    let api: Api<CoreEvent> = Api::namespaced(tenant, &ns.name);
    let (behind, ahead) = (SignedDuration::from_mins(-7), SignedDuration::from_mins(5));
    for n in 1..=12 {
        occur(&api, &ns.name, "behind.raw", "behind", n, behind).await?;
        occur(&api, &ns.name, "ahead.raw", "ahead", n, ahead).await?;
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let objs = wait_for(&admin, &ns.name, "two Finished series of 12", |objs| {
        objs.len() == 2
            && objs
                .iter()
                .all(|e| state(e) == "Finished" && count(e) == 12)
    })
    .await?;
    ensure!(op.metric("event_series_dropped_total{reason=\"stale\"}") == 0.0);
    drop((objs, op));
    other.cleanup().await?;
    ns.cleanup().await
}

/// An emitter 7 minutes behind (within the 10-minute tolerance), the operator killed and started
/// again between its first and second occurrence: the restart's list sees the first when the API
/// server wrote it (its managedFields time, seconds ago), as the watch did, not 7 minutes old, and
/// the two make one series of 2. (Timed by the emitter's clock, the listed occurrence was stale:
/// dropped, and no series.)
#[tokio::test]
async fn a_restart_between_two_occurrences_of_an_emitter_minutes_behind_keeps_their_series()
-> Result<()> {
    let admin = client().await?;
    let ns = TestNamespace::new(&admin, "skewed_restart").await?;
    let other = TestNamespace::new(&admin, "skewed_restart_other").await?;
    let tenant = tenant_client(&admin, kubeconfig(), &ns.name, &other.name).await?;
    let args = [
        "--namespace",
        ns.name.as_str(),
        "--finish-after",
        "20s",
        "--series-window",
        "20s",
    ];
    let mut op = OPERATOR.launch(kubeconfig(), &ns.name, &args)?;
    let api: Api<CoreEvent> = Api::namespaced(tenant, &ns.name);
    let behind = SignedDuration::from_mins(-7);
    occur(&api, &ns.name, "behind.raw", "behind", 1, behind).await?;
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while op.metric("event_series_occurrences_total") < 1.0 {
        ensure!(
            std::time::Instant::now() < deadline,
            "the occurrence was never seen"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    op.kill9()?;
    op = OPERATOR.launch(kubeconfig(), &ns.name, &args)?;
    while op.metric("event_series_occurrences_total") < 1.0 {
        ensure!(
            std::time::Instant::now() < deadline,
            "the restart never listed it"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    occur(&api, &ns.name, "behind.raw", "behind", 2, behind).await?;
    let objs = wait_for(&admin, &ns.name, "one Finished series of 2", |objs| {
        objs.len() == 1 && state(&objs[0]) == "Finished" && count(&objs[0]) == 2
    })
    .await?;
    ensure!(op.metric("event_series_dropped_total{reason=\"stale\"}") == 0.0);
    drop((objs, op));
    other.cleanup().await?;
    ns.cleanup().await
}

fn policy(name: &str, ns: &str, include_note: bool) -> String {
    format!(
        "apiVersion: eventseries.dev/v1alpha1\nkind: EventSeriesPolicy\nmetadata:\n  name: {name}\n\
         spec:\n  finishAfter: 10s\n  seriesWindow: 10s\n  isomorphism:\n    includeNote: \
         {include_note}\n  namespaceSelector:\n    matchLabels:\n      \
         kubernetes.io/metadata.name: {ns}\n"
    )
}

/// `includeNote` switched on live, the operator killed and started again, occurrences all along:
/// the series objects of the loop hold every occurrence once.
#[tokio::test]
async fn include_note_switched_live_with_a_restart_in_between_counts_exactly() -> Result<()> {
    let admin = client().await?;
    let ns = TestNamespace::new(&admin, "include_note_restart").await?;
    let other = TestNamespace::new(&admin, "include_note_restart_other").await?;
    let tenant = tenant_client(&admin, kubeconfig(), &ns.name, &other.name).await?;
    let name = format!("e2e-{}", ns.name);
    apply_on(kubeconfig(), &policy(&name, &ns.name, false), &[])?;
    let args = ["--namespace", ns.name.as_str()];
    let mut op = OPERATOR.launch(kubeconfig(), &ns.name, &args)?;
    let api: Api<CoreEvent> = Api::namespaced(tenant, &ns.name);
    let zero = SignedDuration::ZERO;
    let mut n = 0;
    for _ in 0..5 {
        n += 1;
        occur(&api, &ns.name, "web.raw", "web", n, zero).await?;
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    wait_for(&admin, &ns.name, "an Ongoing series", |objs| {
        objs.len() == 1
    })
    .await?;
    apply_on(kubeconfig(), &policy(&name, &ns.name, true), &[])?;
    // The policy watch hands the change to the engine within moments (an operator watching one
    // namespace writes no policy status to wait for).
    tokio::time::sleep(Duration::from_secs(3)).await;
    for round in 0..2 {
        for _ in 0..5 {
            n += 1;
            occur(&api, &ns.name, "web.raw", "web", n, zero).await?;
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        if round == 0 {
            op.kill9()?;
            op = OPERATOR.launch(kubeconfig(), &ns.name, &args)?;
        }
    }
    let total = n as u64;
    let objs = wait_for_within(
        &admin,
        &ns.name,
        Duration::from_secs(120),
        "every series Finished, holding every occurrence once",
        |objs| {
            objs.iter().all(|e| state(e) == "Finished")
                && objs.iter().map(count).sum::<u64>() == total
        },
    )
    .await?;
    ensure!(
        objs.len() >= 2,
        "includeNote made a new key: {}",
        objs.len()
    );
    drop(op);
    kubectl(&["delete", "esp", &name])?;
    other.cleanup().await?;
    ns.cleanup().await
}

/// Strips what the apiserver sets, so that an object read back can be created again elsewhere.
fn copied(ev: &Event, ns: &str) -> Event {
    let mut copy = ev.clone();
    copy.metadata = ObjectMeta {
        name: ev.metadata.name.clone(),
        namespace: Some(ns.to_owned()),
        labels: ev.metadata.labels.clone(),
        annotations: ev.metadata.annotations.clone(),
        ..Default::default()
    };
    copy
}

/// On a cluster of its own, one operator for every namespace and no admission policy (as if it
/// were removed): a flood of 100 keys beside a quiet namespace's three loops under
/// `maxActiveSeries: 20` gives up only the flood's series; a tenant's copies of the quiet (victim)
/// namespace's series objects, one with a far-future lastObservedTime, are refused at the restart,
/// counted, and nothing is written for them.
#[tokio::test]
async fn a_flood_and_forged_copies_leave_a_quiet_namespace_its_series() -> Result<()> {
    let pair = QuietAndFlood::start("isolation", "").await?;
    let (kc, admin, quiet, flood) = (
        pair.kubeconfig(),
        pair.admin.clone(),
        &pair.quiet,
        &pair.flood,
    );
    let (victims, flooder) = (pair.victim.clone(), pair.flooder.clone());
    let policy = "apiVersion: eventseries.dev/v1alpha1\nkind: EventSeriesPolicy\nmetadata:\n  \
                  name: bounded\nspec:\n  finishAfter: 40s\n  seriesWindow: 40s\n  \
                  maxActiveSeries: 20\n";
    apply_on(kc, policy, &[])?;
    let args = ["--finish-after", "40s", "--series-window", "40s"];
    let mut op = OPERATOR.launch(kc, "isolation", &args)?;
    let quiet_api: Api<CoreEvent> = Api::namespaced(victims, &quiet.name);
    let flood_api: Api<CoreEvent> = Api::namespaced(flooder.clone(), &flood.name);
    let zero = SignedDuration::ZERO;
    let mut fed = 0;
    for round in 0..6 {
        fed += 1;
        loops(&quiet_api, &quiet.name, 3, fed).await?;
        // Between two occurrences of the quiet loops, 20 new keys of the flood, each a series.
        for k in 0..20 {
            let pod = format!("flood-{round}-{k}");
            let raw = format!("{pod}.raw");
            occur(&flood_api, &flood.name, &raw, &pod, 1, zero).await?;
            occur(&flood_api, &flood.name, &raw, &pod, 2, zero).await?;
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    let ongoing = wait_for(&admin, &quiet.name, "three Ongoing quiet series", |objs| {
        objs.len() == 3 && objs.iter().all(|e| state(e) == "Ongoing")
    })
    .await?;
    ensure!(op.metric("event_series_series_evicted_total{reason=\"max_active_series\"}") >= 80.0);

    // The flood's tenant copies a quiet series object into its own namespace, and another with a
    // far-future lastObservedTime: with no admission policy, the apiserver takes both.
    let forged_api: Api<Event> = Api::namespaced(flooder, &flood.name);
    let copy = copied(&ongoing[0], &flood.name);
    forged_api.create(&PostParams::default(), &copy).await?;
    let mut future = copied(&ongoing[1], &flood.name);
    if let Some(s) = future.series.as_mut() {
        s.last_observed_time.0 = Timestamp::now()
            .checked_add(SignedDuration::from_hours(24 * 3650))
            .context("far future")?;
    }
    forged_api.create(&PostParams::default(), &future).await?;
    let forged_before: Vec<Event> = series(&admin, &flood.name)
        .await?
        .into_iter()
        .filter(|e| {
            e.metadata.name == copy.metadata.name || e.metadata.name == future.metadata.name
        })
        .collect();
    ensure!(forged_before.len() == 2, "the forged objects exist");

    op.kill9()?;
    op = OPERATOR.launch(kc, "isolation-restarted", &args)?;
    let rejected = op.metric("event_series_recovery_rejected_total{reason=\"key_mismatch\"}");
    ensure!(rejected == 2.0, "key_mismatch rejections: {rejected}");
    // The quiet loops go on after the restart, then stop: one object each, every occurrence.
    for _ in 0..2 {
        fed += 1;
        loops(&quiet_api, &quiet.name, 3, fed).await?;
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    let total = fed as u64;
    wait_for_within(
        &admin,
        &quiet.name,
        Duration::from_secs(150),
        "three Finished quiet series with every occurrence",
        |objs| {
            objs.len() == 3
                && objs
                    .iter()
                    .all(|e| state(e) == "Finished" && count(e) == total)
        },
    )
    .await?;
    // Nothing was written for the forged objects: both unchanged, no object of their names in
    // the quiet namespace beside the genuine ones.
    let after = series(&admin, &flood.name).await?;
    for f in &forged_before {
        let now = after
            .iter()
            .find(|e| e.metadata.name == f.metadata.name)
            .context("a forged object vanished")?;
        ensure!(
            now.metadata.resource_version == f.metadata.resource_version,
            "{:?} was written",
            f.metadata.name
        );
    }
    drop(op);
    pair.end().await
}

/// A namespace that starts series far faster than the writer may write (`--qps 2`), beside a quiet
/// one: past its share of the pending writes (20 of 50) the flood's new writes are shed and
/// counted, and the quiet namespace's create goes through in seconds, where before it waited until
/// the flood's backlog had drained from the intake (minutes at this rate).
#[tokio::test]
async fn a_flood_past_its_pending_share_does_not_hold_up_a_quiet_namespaces_create() -> Result<()> {
    const FLOOD: usize = 1_500;
    let pair = QuietAndFlood::start("pending-share", "share_").await?;
    let (kc, admin, quiet, flood) = (
        pair.kubeconfig(),
        pair.admin.clone(),
        &pair.quiet,
        &pair.flood,
    );
    let args = [
        "--qps",
        "2",
        "--burst",
        "2",
        "--max-pending-writes",
        "50",
        "--max-pending-writes-per-namespace",
        "20",
    ];
    let op = OPERATOR.launch(kc, "pending-share", &args)?;
    // Each raw event counts two occurrences: a series, and a create, at once.
    let flood_api: Api<CoreEvent> = Api::namespaced(admin.clone(), &flood.name);
    let raws =
        (0..FLOOD).map(|i| kubelet_backoff(&flood.name, &format!("f{i}.raw"), &format!("f{i}"), 2));
    create_all(&flood_api, raws, 16).await?;
    let quiet_api: Api<CoreEvent> = Api::namespaced(admin.clone(), &quiet.name);
    let raw = kubelet_backoff(&quiet.name, "web.raw", "web", 2);
    quiet_api.create(&PostParams::default(), &raw).await?;
    wait_for_within(
        &admin,
        &quiet.name,
        Duration::from_secs(30),
        "the quiet namespace's series written beside the flood",
        |objs| objs.len() == 1 && count(&objs[0]) == 2,
    )
    .await?;
    let shed = op.metric("event_series_writes_shed_total{kind=\"create\"}");
    ensure!(
        shed >= (FLOOD - 50) as f64,
        "the flood's creates past its share were not shed: {shed}"
    );
    let pending = op.metric("event_series_writes_pending");
    ensure!(pending <= 21.0, "pending writes past the share: {pending}");
    drop(op);
    pair.end().await
}

/// A tenant whose Events fill every field to its limit beside a quiet namespace's loop, with the
/// key store's byte budget scaled down to 1 MiB (the default, 64 MiB, scaled like the load): the
/// flood's candidates and series are given up (counted), the quiet loop keeps one series with
/// every occurrence.
#[tokio::test]
async fn keys_at_every_limit_stay_within_the_byte_budget_beside_a_quiet_loop() -> Result<()> {
    const FLOOD: usize = 1_200;
    let pair = QuietAndFlood::start("key-bytes", "bytes_").await?;
    let (kc, admin, quiet, flood) = (
        pair.kubeconfig(),
        pair.admin.clone(),
        &pair.quiet,
        &pair.flood,
    );
    let flooder = pair.flooder.clone();
    let args = [
        "--max-key-bytes",
        "1Mi",
        "--finish-after",
        "40s",
        "--series-window",
        "40s",
    ];
    let op = OPERATOR.launch(kc, "key-bytes", &args)?;
    let quiet_api: Api<CoreEvent> = Api::namespaced(admin.clone(), &quiet.name);
    let flood_api: Api<CoreEvent> = Api::namespaced(flooder, &flood.name);
    let mut fed = 0;
    for round in 0..4 {
        fed += 1;
        loops(&quiet_api, &quiet.name, 1, fed).await?;
        // Every other raw event counts two occurrences: a series; the rest are candidates.
        let raws = (round * FLOOD / 4..(round + 1) * FLOOD / 4).map(|i| {
            at_every_limit(
                &flood.name,
                &format!("f{i}.raw"),
                &format!("f{i}"),
                1 + (i % 2) as i32,
            )
        });
        create_all(&flood_api, raws, 8).await?;
    }
    fed += 1;
    loops(&quiet_api, &quiet.name, 1, fed).await?;
    let total = fed as u64;
    wait_for_within(
        &admin,
        &quiet.name,
        Duration::from_secs(120),
        "the quiet loop's one Finished series with every occurrence",
        |objs| objs.len() == 1 && state(&objs[0]) == "Finished" && count(&objs[0]) == total,
    )
    .await?;
    let evicted = op.metric("event_series_series_evicted_total{reason=\"key_bytes\"}");
    let lone = op.metric("event_series_dropped_total{reason=\"lone\"}");
    ensure!(
        evicted > 0.0 && lone > 0.0,
        "nothing given up for the byte budget: {evicted} series evicted, {lone} lone"
    );
    drop(op);
    pair.end().await
}

/// A tenant whose Events carry every field at its limit and count two at once (each a series at
/// once, never a candidate) fills a 1 MiB key budget with 250 series and adds two more after each
/// occurrence of another namespace's loop (5 occurrences, 20 s apart): the tenant's own series are
/// given up (counted), and the loop gets its one series with every occurrence. (Before: the
/// budget gave up the namespace holding the most candidates, the loop's, each time; its namespace
/// never got a series object.)
#[tokio::test]
async fn series_at_every_limit_fill_the_key_budget_at_their_own_cost() -> Result<()> {
    const FLOOD: usize = 250;
    let pair = QuietAndFlood::start("key-series", "kseries_").await?;
    let (kc, admin, quiet, flood) = (
        pair.kubeconfig(),
        pair.admin.clone(),
        &pair.quiet,
        &pair.flood,
    );
    let args = [
        "--max-key-bytes",
        "1Mi",
        "--finish-after",
        "40s",
        "--series-window",
        "40s",
    ];
    let op = OPERATOR.launch(kc, "key-series", &args)?;
    let evicted = || op.metric("event_series_series_evicted_total{reason=\"key_bytes\"}");
    let quiet_api: Api<CoreEvent> = Api::namespaced(pair.victim.clone(), &quiet.name);
    let flood_api: Api<CoreEvent> = Api::namespaced(pair.flooder.clone(), &flood.name);
    let at_limit =
        |i: usize| at_every_limit(&flood.name, &format!("f{i}.raw"), &format!("f{i}"), 2);
    create_all(&flood_api, (0..FLOOD).map(at_limit), 8).await?;
    // The budget is full (it holds about 240 such series) before the loop starts.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while evicted() == 0.0 {
        ensure!(
            std::time::Instant::now() < deadline,
            "the flood never filled the budget"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    for n in 1..=5 {
        if n > 1 {
            tokio::time::sleep(Duration::from_secs(20)).await;
        }
        loops(&quiet_api, &quiet.name, 1, n).await?;
        let more = FLOOD + 2 * (n as usize - 1)..FLOOD + 2 * n as usize;
        create_all(&flood_api, more.map(at_limit), 2).await?;
    }
    wait_for_within(
        &admin,
        &quiet.name,
        Duration::from_secs(120),
        "the loop's one Finished series of 5",
        |objs| objs.len() == 1 && state(&objs[0]) == "Finished" && count(&objs[0]) == 5,
    )
    .await?;
    ensure!(evicted() > 0.0, "nothing given up for the byte budget");
    drop(op);
    pair.end().await
}

/// A tenant with update rights on Events (and no admission policy installed) strips the operator's
/// labels and annotations off an Ongoing series object through core/v1, the loop goes on, and the
/// operator restarts in the middle: the stripped object is never counted as a raw event (the
/// loop of 10 once ended as one series of 16), and the loop still ends as one series object
/// with the emitters' exact count.
#[tokio::test]
async fn a_series_object_stripped_of_its_labels_is_neither_counted_nor_lost() -> Result<()> {
    let admin = client().await?;
    let ns = TestNamespace::new(&admin, "stripped").await?;
    let other = TestNamespace::new(&admin, "stripped_other").await?;
    let tenant = tenant_client(&admin, kubeconfig(), &ns.name, &other.name).await?;
    let raw_api: Api<CoreEvent> = Api::namespaced(tenant.clone(), &ns.name);
    let args = [
        "--namespace",
        &ns.name,
        "--finish-after",
        "30s",
        "--series-window",
        "30s",
        "--first-refresh",
        "0",
    ];
    let op = OPERATOR.launch(kubeconfig(), &ns.name, &args)?;
    let zero = SignedDuration::ZERO;
    for n in 1..=4 {
        occur(&raw_api, &ns.name, "web.raw", "web", n, zero).await?;
    }
    // Written at its second occurrence; no refresh before the finish (`--first-refresh 0`).
    let objs = wait_for(&admin, &ns.name, "the series Ongoing", |objs| {
        objs.len() == 1 && state(&objs[0]) == "Ongoing"
    })
    .await?;
    let name = objs[0].metadata.name.clone().context("the series' name")?;
    let meta = &objs[0].metadata;
    let nulls = |m: Option<&std::collections::BTreeMap<String, String>>| {
        m.map(|m| {
            m.keys()
                .map(|k| (k.clone(), serde_json::Value::Null))
                .collect::<serde_json::Map<_, _>>()
        })
    };
    let strip = serde_json::json!({"metadata": {
        "labels": nulls(meta.labels.as_ref()),
        "annotations": nulls(meta.annotations.as_ref()),
    }});
    raw_api
        .patch(&name, &PatchParams::default(), &Patch::Merge(strip))
        .await
        .context("without the admission policy the tenant's strip is taken")?;
    for n in 5..=7 {
        occur(&raw_api, &ns.name, "web.raw", "web", n, zero).await?;
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    op.kill9()?;
    let op = OPERATOR.launch(kubeconfig(), &format!("{}-restarted", ns.name), &args)?;
    for n in 8..=10 {
        occur(&raw_api, &ns.name, "web.raw", "web", n, zero).await?;
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    wait_for_within(
        &admin,
        &ns.name,
        Duration::from_secs(90),
        "one Finished series object of 10",
        |objs| objs.len() == 1 && state(&objs[0]) == "Finished" && count(&objs[0]) == 10,
    )
    .await?;
    // The restart could not find the stripped object (its list selects by label) and, finding it
    // at the series' name without the marks of its own, left it alone: the series moved on to its
    // next name, `<name>-1`.
    let objs = series(&admin, &ns.name).await?;
    let moved = format!("{name}-1");
    ensure!(
        objs[0].metadata.name.as_deref() == Some(moved.as_str()),
        "the series object: {:?}",
        objs[0].metadata.name
    );
    drop(op);
    other.cleanup().await?;
    ns.cleanup().await
}

/// A namespace member who creates an Event at a series' name before the operator does (the name is
/// derived from the key and the start, so it can be predicted): the operator never writes into
/// it; the series takes its next deterministic name, keeps it across a restart, and ends there with
/// every occurrence.
#[tokio::test]
async fn a_name_taken_by_a_tenants_event_is_left_alone_and_the_series_takes_the_next() -> Result<()>
{
    let admin = client().await?;
    let ns = TestNamespace::new(&admin, "taken_name").await?;
    let other = TestNamespace::new(&admin, "taken_name_other").await?;
    let tenant = tenant_client(&admin, kubeconfig(), &ns.name, &other.name).await?;
    let raw_api: Api<CoreEvent> = Api::namespaced(tenant, &ns.name);
    // The loop's first two occurrences, whole seconds apart, as the kubelet writes them.
    let start = Timestamp::from_second(Timestamp::now().as_second())?;
    let regarding = app_container(&ns.name, "web", "uid-web".into());
    let first = kubelet(
        &ns.name,
        "web.raw",
        regarding.clone(),
        "BackOff",
        "Back-off".into(),
        Occurrences::at(1, start),
    );
    let second = kubelet(
        &ns.name,
        "web.raw",
        regarding,
        "BackOff",
        "Back-off".into(),
        Occurrences {
            count: 2,
            first: start,
            last: start + Duration::from_secs(1),
        },
    );
    // The tenant computes the series' name as the operator will (the same engine, in process).
    let name = predicted_name(&[&first, &second])?;
    let squatter = CoreEvent {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            namespace: Some(ns.name.clone()),
            annotations: Some([("owner".to_owned(), "tenant".to_owned())].into()),
            ..Default::default()
        },
        involved_object: app_container(&ns.name, "decoy", "uid-decoy".into()),
        reason: Some("Squatting".into()),
        message: Some("created before the series".into()),
        type_: Some("Normal".into()),
        ..Default::default()
    };
    let squatter = raw_api.create(&PostParams::default(), &squatter).await?;

    let args = [
        "--namespace",
        &ns.name,
        "--finish-after",
        "10s",
        "--series-window",
        "10s",
    ];
    let op = OPERATOR.launch(kubeconfig(), &ns.name, &args)?;
    raw_api.create(&PostParams::default(), &first).await?;
    let patch =
        serde_json::json!({"count": 2, "lastTimestamp": Time(start + Duration::from_secs(1))});
    raw_api
        .patch("web.raw", &PatchParams::default(), &Patch::Merge(patch))
        .await?;
    let renamed = format!("{name}-1");
    wait_for(
        &admin,
        &ns.name,
        "the series under its second name",
        |objs| {
            objs.iter()
                .any(|e| e.metadata.name.as_deref() == Some(renamed.as_str()))
        },
    )
    .await?;
    let taken = op.metric("event_series_names_taken_total");
    ensure!(taken == 1.0, "names found taken: {taken}");
    let verified = op.metric("event_series_api_requests_total{verb=\"get\",code=\"200\"}");
    ensure!(
        verified >= 1.0,
        "the object at the name was not read: {verified}"
    );
    // A restart in the middle of the loop: the series is restored from its renamed object.
    op.kill9()?;
    let op = OPERATOR.launch(kubeconfig(), &format!("{}-restarted", ns.name), &args)?;
    for n in 3..=6 {
        let at = Time(Timestamp::now());
        let patch = serde_json::json!({"count": n, "lastTimestamp": at});
        raw_api
            .patch("web.raw", &PatchParams::default(), &Patch::Merge(patch))
            .await?;
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let objs = wait_for(
        &admin,
        &ns.name,
        "one Finished series of 6 under its second name",
        |objs| {
            objs.len() == 1
                && objs[0].metadata.name.as_deref() == Some(renamed.as_str())
                && state(&objs[0]) == "Finished"
                && count(&objs[0]) == 6
        },
    )
    .await?;
    // The tenant's object was never written.
    let core: Api<CoreEvent> = Api::namespaced(admin.clone(), &ns.name);
    let now = core.get(&name).await?;
    ensure!(
        now.metadata.resource_version == squatter.metadata.resource_version,
        "the tenant's Event at the series' first name was written: {now:?}"
    );
    drop((objs, op));
    other.cleanup().await?;
    ns.cleanup().await
}

/// The name the operator's engine gives the series these raw event states make.
pub(crate) fn predicted_name(states: &[&CoreEvent]) -> Result<String> {
    use event_series_core::engine::Engine;
    let mut engine = Engine::with_settings(event_series_core::settings::Settings::default());
    let now = chrono::Utc::now();
    for ev in states {
        engine.observe(now, &event_series_core::key::normalise(ev)?);
    }
    let intent = engine
        .take_intents()
        .into_iter()
        .next()
        .context("no series")?;
    Ok(event_series::object::name_of(&intent.series))
}
