//! Tests that need an apiserver of their own: write economy counted from the apiserver's own
//! `/metrics`, and a watch that the apiserver keeps expiring.

use crate::operator::{count, start_on, state, wait_for};
use anyhow::Result;
use event_series_test_support::cluster::{
    Dedicated, TestNamespace, client_for, kubectl_on, operator_cluster_rules, operator_rules,
    service_account_kubeconfig,
};
use event_series_test_support::raw::{kubelet_backoff, occurrence_patch};
use event_series_test_support::writes::{WriteStats, until_accepted};
use k8s_openapi::api::core::v1::Event as CoreEvent;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, Patch, PatchParams, PostParams};
use std::path::Path;
use std::time::{Duration, Instant};

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
async fn legacy_loop(
    api: &Api<CoreEvent>,
    ns: &str,
    name: &str,
    pod: &str,
    occurrences: i32,
) -> Result<()> {
    let ev = kubelet_backoff(ns, name, pod, 1);
    api.create(&PostParams::default(), &ev).await?;
    for c in 2..=occurrences {
        api.patch(name, &PatchParams::default(), &occurrence_patch(c))
            .await?;
    }
    Ok(())
}

/// "Writes per series": 1 create + one per heartbeat + 1 finish, whatever the number of
/// occurrences, counted by the apiserver itself.
#[tokio::test]
async fn writes_per_series_are_independent_of_occurrences() -> Result<()> {
    let cluster = Dedicated::start("economy", &[])?;
    let client = client_for(&cluster.kubeconfig).await?;
    let ns = TestNamespace::new(&client, "economy").await?;
    let heartbeat_secs = 4;
    let op = start_on(
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
    legacy_loop(&api, &ns.name, "loop", "web-0", 1000).await?;
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
    let own: f64 = ["create", "patch"]
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
    // Every landed write ends one wait in write_latency_seconds: the create, then each patch.
    let latency = |kind: &str| {
        op.metric(&format!(
            "event_series_write_latency_seconds_count{{kind=\"{kind}\"}}"
        ))
    };
    let creates = op.metric("event_series_api_requests_total{verb=\"create\",code=\"201\"}");
    let patches = op.metric("event_series_api_requests_total{verb=\"patch\",code=\"200\"}");
    println!(
        "write_latency_seconds counts: create {}, heartbeat {}, finish {}; creates {creates}, patches {patches}",
        latency("create"),
        latency("heartbeat"),
        latency("finish")
    );
    assert_eq!(latency("create"), creates);
    assert_eq!(latency("finish"), 1.0);
    // A heartbeat coalesced into the create or the finish ends both waits with one write.
    assert!(latency("heartbeat") + latency("finish") >= patches);
    assert!(latency("heartbeat") + latency("finish") <= patches + 2.0);
    assert_eq!(done[0].metadata.labels.as_ref().map(|l| l.len()), Some(3));
    ns.cleanup().await
}

/// Input: watches that end every 2 seconds are re-established from the last resourceVersion,
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
    let op = start_on(
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
    legacy_loop(&api, &ns.name, "slow", "web-0", 1).await?;
    // Occurrences spread over several watch lifetimes (the apiserver picks each timeout between
    // min-request-timeout and twice it).
    for c in 2..=12 {
        tokio::time::sleep(std::time::Duration::from_millis(700)).await;
        api.patch("slow", &PatchParams::default(), &occurrence_patch(c))
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

/// Heartbeat: the stored object changes every `heartbeatInterval` while the loop lasts, so an
/// Ongoing series outlives an `--event-ttl` shorter than the loop, while the raw events expire.
#[tokio::test]
async fn heartbeats_keep_a_series_alive_past_the_event_ttl() -> Result<()> {
    let cluster = Dedicated::start(
        "ttl",
        &[
            ("EVENT_TTL", "5s"),
            ("APISERVER_EXTRA_ARGS", "--lease-reuse-duration-seconds=1"),
        ],
    )?;
    let client = client_for(&cluster.kubeconfig).await?;
    let ns = TestNamespace::new(&client, "ttl").await?;
    let _op = start_on(
        &cluster.kubeconfig,
        &ns.name,
        &[
            "--finish-after",
            "6s",
            "--series-window",
            "6s",
            "--heartbeat-interval",
            "2s",
        ],
    )?;
    let raw: Api<CoreEvent> = Api::namespaced(client.clone(), &ns.name);
    let series: Api<k8s_openapi::api::events::v1::Event> =
        Api::namespaced(client.clone(), &ns.name);
    // A controller-style loop: one new raw event per second for 16 s, each expiring 5 s later.
    let mut versions = std::collections::BTreeSet::new();
    let mut name = None;
    for i in 0..16 {
        legacy_loop(&raw, &ns.name, &format!("occurrence-{i}"), "web-0", 1).await?;
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
        let objs = crate::operator::series(&client, &ns.name).await?;
        if let Some(o) = objs.first() {
            name = o.metadata.name.clone();
            versions.extend(o.metadata.resource_version.clone());
        }
    }
    let alive_raw = raw.list(&Default::default()).await?.items.len();
    assert!(
        alive_raw < 16,
        "raw events expire with the TTL ({alive_raw} of 16 left)"
    );
    let name = name.expect("a series object was created");
    let current = series.get(&name).await?;
    assert_eq!(state(&current), "Ongoing", "the series outlived the 5s TTL");
    assert!(
        versions.len() >= 5,
        "heartbeats changed the object {} times",
        versions.len()
    );
    // Each raw event here is a separate object with the same key, so the count keeps up with all 16.
    wait_for(
        &client,
        &ns.name,
        "all 16 occurrences in the series",
        |objs| objs.iter().any(|e| count(e) == 16),
    )
    .await?;
    ns.cleanup().await
}

/// Writes: under 429s (max-inflight limits far below the storm, priority and fairness off so the
/// apiserver rejects instead of queueing) the operator backs off and the final counts are still exact.
///
/// The emitters write as the admin, whom the inflight limits exempt: a throttled emitter can be starved
/// for minutes, and an occurrence minutes after the one before it is, correctly, a new series or a lone
/// occurrence, which would make the ground truth depend on the apiserver's unfairness. The pressure
/// comes instead from a third, non-admin client that keeps the one mutating slot busy for the whole
/// storm. Counts are still checked per loop (the sum over its objects), so that a split, should one
/// happen, is counted right rather than flaky.
#[tokio::test]
async fn throttled_writes_back_off_and_lose_nothing() -> Result<()> {
    let cluster = Dedicated::start(
        "throttled",
        &[(
            "APISERVER_EXTRA_ARGS",
            "--enable-priority-and-fairness=false --max-requests-inflight=1 \
             --max-mutating-requests-inflight=1",
        )],
    )?;
    let client = client_for(&cluster.kubeconfig).await?;
    let ns = TestNamespace::new(&client, "throttled").await?;
    // As a ServiceAccount: the admin (system:masters) is exempt from inflight limits.
    let as_sa = service_account_kubeconfig(
        &client,
        &cluster.kubeconfig,
        &ns.name,
        "event-series",
        operator_rules(),
        operator_cluster_rules(),
    )
    .await?;
    let op = start_on(
        &as_sa,
        &ns.name,
        // A window and a quiet time far longer than a throttled write of the operator waits; a
        // heartbeat every second so that the operator writes a lot.
        &[
            "--finish-after",
            "30s",
            "--series-window",
            "300s",
            "--heartbeat-interval",
            "1s",
        ],
    )?;
    // A non-admin that patches ConfigMaps as fast as it can, so that the operator's writes meet 429s.
    let noise = service_account_kubeconfig(
        &client,
        &cluster.kubeconfig,
        &ns.name,
        "noise",
        vec![k8s_openapi::api::rbac::v1::PolicyRule {
            api_groups: Some(vec![String::new()]),
            resources: Some(vec!["configmaps".into()]),
            verbs: vec!["create".into(), "patch".into()],
            ..Default::default()
        }],
        Vec::new(),
    )
    .await?;
    let noise = client_for(&noise).await?;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut noisy = tokio::task::JoinSet::new();
    for i in 0..6 {
        let api: Api<k8s_openapi::api::core::v1::ConfigMap> =
            Api::namespaced(noise.clone(), &ns.name);
        let stop = stop.clone();
        noisy.spawn(async move {
            let name = format!("noise-{i}");
            let cm = serde_json::json!({
                "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}
            });
            let apply = PatchParams::apply("noise").force();
            let mut n = 0u64;
            let mut rejected = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                n += 1;
                let mut cm = cm.clone();
                cm["data"] = serde_json::json!({ "n": n.to_string() });
                match api.patch(&name, &apply, &Patch::Apply(cm)).await {
                    Err(kube::Error::Api(s)) if s.code == 429 => rejected += 1,
                    other => {
                        other?;
                    }
                }
            }
            anyhow::Ok(rejected)
        });
    }
    // 24 legacy-style loops written concurrently, one occurrence every 300 ms, by the admin.
    const LOOPS: usize = 24;
    const OCCURRENCES: i32 = 30;
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..LOOPS {
        let api: Api<CoreEvent> = Api::namespaced(client.clone(), &ns.name);
        let ns = ns.name.clone();
        tasks.spawn(async move {
            let name = format!("loop-{i}");
            let (pp, patch_params) = (PostParams::default(), PatchParams::default());
            // The storm's own writes must get through the throttled apiserver.
            let stats = WriteStats::default();
            let deadline = Instant::now() + Duration::from_secs(600);
            let ev = kubelet_backoff(&ns, &name, &format!("pod-{i}"), 1);
            until_accepted(&stats, deadline, false, || api.create(&pp, &ev)).await?;
            for c in 2..=OCCURRENCES {
                tokio::time::sleep(std::time::Duration::from_millis(300)).await;
                let patch = occurrence_patch(c);
                until_accepted(&stats, deadline, false, || {
                    api.patch(&name, &patch_params, &patch)
                })
                .await?;
            }
            anyhow::Ok(())
        });
    }
    while let Some(done) = tasks.join_next().await {
        done??;
    }
    // A few more heartbeats under pressure, then quiet so that the series can finish.
    tokio::time::sleep(std::time::Duration::from_secs(5)).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut noise_rejected = 0;
    while let Some(done) = noisy.join_next().await {
        noise_rejected += done??;
    }
    println!("noise writes answered 429: {noise_rejected}");
    let total = (LOOPS as u64) * OCCURRENCES as u64;
    let per_loop = |objs: &[Event]| {
        let mut sums = std::collections::BTreeMap::<String, u64>::new();
        for e in objs {
            let pod = e.regarding.as_ref().and_then(|r| r.name.clone());
            *sums.entry(pod.unwrap_or_default()).or_default() += count(e);
        }
        sums
    };
    let done = wait_for(
        &client,
        &ns.name,
        "every loop Finished with its count",
        |objs| {
            let sums = per_loop(objs);
            sums.len() == LOOPS
                && sums.values().all(|c| *c == OCCURRENCES as u64)
                && objs.iter().all(|e| state(e) == "Finished")
        },
    )
    .await;
    let done = match done {
        Ok(done) => done,
        Err(e) => {
            // What the raw events hold and what the operator counted, to tell a lost watch event from
            // an engine decision.
            let raw: Api<CoreEvent> = Api::namespaced(client.clone(), &ns.name);
            for ev in raw.list(&Default::default()).await?.items {
                eprintln!(
                    "raw {:?} count={:?} rv={:?}",
                    ev.metadata.name, ev.count, ev.metadata.resource_version
                );
            }
            for name in [
                "event_series_occurrences_total",
                "event_series_series_started_total",
                "event_series_watch_restarts_total",
                "event_series_watch_relists_total",
                "event_series_dropped_total{reason=\"lone\"}",
                "event_series_dropped_total{reason=\"stale\"}",
            ] {
                eprintln!("{name} {}", op.metric(name));
            }
            return Err(e);
        }
    };
    assert_eq!(done.iter().map(count).sum::<u64>(), total);
    let split = done.len() - LOOPS;
    if split > 0 {
        println!("{split} loop(s) starved past finishAfter became two series, as specified");
    }
    assert_eq!(op.metric("event_series_occurrences_total"), total as f64);
    for reason in ["lone", "stale"] {
        let dropped = op.metric(&format!(
            "event_series_dropped_total{{reason=\"{reason}\"}}"
        ));
        assert_eq!(dropped, 0.0, "{reason}");
    }
    let throttled = op.metric("event_series_api_requests_total{verb=\"create\",code=\"429\"}")
        + op.metric("event_series_api_requests_total{verb=\"patch\",code=\"429\"}");
    println!("{LOOPS} loops, {total} occurrences; operator writes answered 429: {throttled}");
    assert!(
        throttled > 0.0,
        "the storm was meant to throttle the operator's writes"
    );
    assert_eq!(
        op.metric("event_series_dropped_total{reason=\"rejected\"}"),
        0.0
    );
    ns.cleanup().await
}
