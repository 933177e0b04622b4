//! `event-series run` against the real apiserver, fed by client-go's own legacy recorder.

use crate::OPERATOR;
use anyhow::{Context, Result, bail};
use event_series_test_support::cluster::{TestNamespace, client, kubeconfig, kubectl};
pub use event_series_test_support::cluster::{count, series, state};
use event_series_test_support::emitter::{Truth, emit_on};
use event_series_test_support::process::Operator;
use event_series_test_support::raw::kubelet_backoff;
use k8s_openapi::api::events::v1::Event;
use kube::api::Api;
use std::time::{Duration, Instant};

/// Runs the client-go emitter against the shared cluster and returns its ground truth.
pub fn emit(ns: &str, args: &[&str]) -> Result<Vec<Truth>> {
    emit_on(kubeconfig(), ns, args)
}

/// A crash-loop storm from client-go's legacy recorder: `pods` pods, `rate` occurrences per second
/// each, `count` in all per pod; its ground truth.
pub fn crashloop(ns: &str, pods: u32, rate: &str, count: u32) -> Result<Vec<Truth>> {
    let (pods, count) = (pods.to_string(), count.to_string());
    emit(
        ns,
        &[
            "--recorder",
            "legacy",
            "--scenario",
            "crashloop",
            "--pods",
            &pods,
            "--rate",
            rate,
            "--count",
            &count,
        ],
    )
}

/// An operator on the shared cluster, watching namespace `ns`.
pub fn start(ns: &str, extra: &[&str]) -> Result<Operator> {
    start_on(kubeconfig(), ns, extra)
}

/// An operator on the cluster behind `kubeconfig`, watching namespace `ns`.
pub fn start_on(kubeconfig: &std::path::Path, ns: &str, extra: &[&str]) -> Result<Operator> {
    let mut args = vec!["--namespace", ns];
    args.extend_from_slice(extra);
    OPERATOR.launch(kubeconfig, ns, &args)
}

/// Polls until `check` holds for the namespace's series objects (for at most 90 s).
pub async fn wait_for<F>(
    client: &kube::Client,
    ns: &str,
    what: &str,
    check: F,
) -> Result<Vec<Event>>
where
    F: Fn(&[Event]) -> bool,
{
    wait_for_within(client, ns, Duration::from_secs(90), what, check).await
}

/// Polls until `check` holds for the namespace's series objects, for at most `within`.
pub async fn wait_for_within<F>(
    client: &kube::Client,
    ns: &str,
    within: Duration,
    what: &str,
    check: F,
) -> Result<Vec<Event>>
where
    F: Fn(&[Event]) -> bool,
{
    let deadline = Instant::now() + within;
    loop {
        // A poll rides out a failed request (a pooled connection the API server closed under load).
        let objects = match series(client, ns).await {
            Ok(objects) => objects,
            Err(e) if Instant::now() < deadline => {
                eprintln!("listing the series objects of {ns} failed, retrying: {e:#}");
                tokio::time::sleep(Duration::from_millis(500)).await;
                continue;
            }
            Err(e) => return Err(e),
        };
        if check(&objects) {
            return Ok(objects);
        }
        if Instant::now() > deadline {
            bail!(
                "timed out waiting for {what}; series objects: {:?}",
                objects
                    .iter()
                    .map(|e| (e.metadata.name.clone(), state(e).to_owned(), count(e)))
                    .collect::<Vec<_>>()
            );
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Output: a legacy storm becomes one Ongoing series per loop; its next heartbeat writes the count
/// the API holds (occurrences between writes cost nothing); after `finishAfter` of quiet it is Finished
/// with the final count; a new burst makes a new object.
#[tokio::test]
async fn legacy_storm_becomes_one_series_per_loop_then_finishes() -> Result<()> {
    let client = client().await?;
    let ns = TestNamespace::new(&client, "legacy_storm").await?;
    let op = start(
        &ns.name,
        &[
            "--finish-after",
            "15s",
            "--series-window",
            "15s",
            "--heartbeat-interval",
            "3s",
        ],
    )?;
    let truth = emit(
        &ns.name,
        &[
            "--recorder",
            "legacy",
            "--scenario",
            "crashloop",
            "--pods",
            "2",
            "--rate",
            "5",
            "--count",
            "20",
        ],
    )?;
    assert_eq!(truth.len(), 2);
    let total: u64 = truth.iter().map(|t| t.api_count).sum();
    assert!(truth.iter().all(|t| t.api_count >= 2), "{truth:?}");

    let ongoing = wait_for(
        &client,
        &ns.name,
        "one Ongoing series per pod with the API's count",
        |objs| {
            objs.len() == 2
                && objs.iter().all(|e| state(e) == "Ongoing")
                && objs.iter().map(count).sum::<u64>() == total
        },
    )
    .await?;
    for t in &truth {
        let obj = ongoing
            .iter()
            .find(|e| {
                e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(&t.regarding.name)
            })
            .context("a series object for each pod")?;
        assert_eq!(count(obj), t.api_count, "{t:?}");
        assert_eq!(obj.reason.as_deref(), Some(t.reason.as_str()));
    }
    let table = kubectl(&[
        "get",
        "events",
        "-n",
        &ns.name,
        "-o",
        "wide",
        "-l",
        "eventseries.dev/state=Ongoing",
    ])?;
    for t in &truth {
        let row = table
            .lines()
            .find(|l| l.contains(&t.regarding.name))
            .with_context(|| format!("no row for {} in\n{table}", t.regarding.name))?;
        assert!(
            row.split_whitespace().any(|c| c == t.api_count.to_string()),
            "COUNT {} not in row {row:?}",
            t.api_count
        );
    }

    let finished = wait_for(&client, &ns.name, "both series Finished", |objs| {
        objs.len() == 2 && objs.iter().all(|e| state(e) == "Finished")
    })
    .await?;
    assert_eq!(
        finished.iter().map(count).sum::<u64>(),
        total,
        "final counts"
    );

    // The same loop again: a new object beside the finished one.
    let again = emit(
        &ns.name,
        &[
            "--recorder",
            "legacy",
            "--scenario",
            "crashloop",
            "--pods",
            "2",
            "--rate",
            "5",
            "--count",
            "3",
        ],
    )?;
    let added: u64 = again.iter().map(|t| t.api_count).sum();
    assert!(added >= 2, "{again:?}");
    wait_for(
        &client,
        &ns.name,
        "new Ongoing objects beside the Finished ones",
        |objs| {
            objs.iter().filter(|e| state(e) == "Finished").count() == 2
                && objs.iter().any(|e| state(e) == "Ongoing")
        },
    )
    .await?;
    assert!(op.metric("event_series_series_started_total") >= 3.0);
    let status = op.terminate()?;
    assert!(status.success(), "SIGTERM exits 0, got {status}");
    ns.cleanup().await
}

/// Restart: kill -9 the operator mid-loop, keep emitting, start it again: still one object for the
/// series, with the exact count.
#[tokio::test]
async fn kill_9_mid_loop_keeps_one_object_and_the_exact_count() -> Result<()> {
    let client = client().await?;
    let ns = TestNamespace::new(&client, "kill9").await?;
    let flags = [
        "--finish-after",
        "20s",
        "--series-window",
        "20s",
        "--heartbeat-interval",
        "2s",
    ];
    let emitter = [
        "--recorder",
        "legacy",
        "--scenario",
        "crashloop",
        "--pods",
        "1",
        "--rate",
        "5",
        "--count",
        "15",
    ];
    let first_op = start(&ns.name, &flags)?;
    let first = emit(&ns.name, &emitter)?;
    let objects = wait_for(
        &client,
        &ns.name,
        "the series written at least once",
        |objs| objs.len() == 1 && count(&objs[0]) >= 2,
    )
    .await?;
    let name = objects[0].metadata.name.clone();
    first_op.kill9()?;

    // The loop goes on while no operator runs (a new recorder process: a new raw object, same key).
    let second = emit(&ns.name, &emitter)?;
    let total: u64 = first.iter().chain(&second).map(|t| t.api_count).sum();
    let _second_op = start(&ns.name, &flags)?;
    let third = emit(&ns.name, &emitter)?;
    let total = total + third.iter().map(|t| t.api_count).sum::<u64>();

    let done = wait_for(
        &client,
        &ns.name,
        "the series Finished with every occurrence",
        |objs| {
            objs.iter().all(|e| state(e) == "Finished")
                && objs.iter().map(count).sum::<u64>() == total
        },
    )
    .await?;
    assert_eq!(done.len(), 1, "one object for the series");
    assert_eq!(done[0].metadata.name, name, "the same object");
    ns.cleanup().await
}

/// Input: new-style events from client-go's `tools/events` are folded by their `series.count`
/// deltas (that recorder itself writes only counts 1 and 2 within its first 30 minutes).
#[tokio::test]
async fn new_style_events_fold_by_series_count() -> Result<()> {
    let client = client().await?;
    let ns = TestNamespace::new(&client, "new_style").await?;
    let _op = start(
        &ns.name,
        &[
            "--finish-after",
            "10s",
            "--series-window",
            "10s",
            "--heartbeat-interval",
            "2s",
        ],
    )?;
    let truth = emit(
        &ns.name,
        &[
            "--recorder",
            "events",
            "--scenario",
            "crashloop",
            "--pods",
            "2",
            "--rate",
            "5",
            "--count",
            "10",
        ],
    )?;
    let total: u64 = truth.iter().map(|t| t.api_count).sum();
    assert!(truth.iter().all(|t| t.api_count == 2), "{truth:?}");
    let done = wait_for(
        &client,
        &ns.name,
        "two Finished series with the API's counts",
        |objs| {
            objs.len() == 2
                && objs.iter().all(|e| state(e) == "Finished")
                && objs.iter().map(count).sum::<u64>() == total
        },
    )
    .await?;
    for e in &done {
        assert_eq!(
            e.action.as_deref(),
            Some("StartContainer"),
            "new-style fields kept"
        );
        assert!(
            e.reporting_instance
                .as_deref()
                .is_some_and(|i| i.starts_with("kubelet"))
        );
    }
    ns.cleanup().await
}

/// Odd input does not crash the operator and loses nothing it could keep: every odd loop becomes a
/// valid series object, none is rejected by the API.
#[tokio::test]
async fn odd_raw_events_become_valid_series_objects() -> Result<()> {
    use k8s_openapi::api::core::v1::Event as CoreEvent;
    use kube::api::PostParams;
    let client = client().await?;
    let ns = TestNamespace::new(&client, "odd_input").await?;
    let op = start(
        &ns.name,
        &[
            "--finish-after",
            "8s",
            "--series-window",
            "8s",
            "--heartbeat-interval",
            "1h",
        ],
    )?;
    let base = |name: &str| kubelet_backoff(&ns.name, name, &format!("pod-{name}"), 3);
    let mut odd = Vec::new();
    let mut e = base("no-source");
    e.source = None;
    odd.push(e);
    let mut e = base("empty-action");
    e.action = Some(String::new());
    odd.push(e);
    let mut e = base("huge-message");
    e.message = Some("x".repeat(10 * 1024));
    odd.push(e);
    let mut e = base("unicode");
    e.message = Some("🚀 ünïcödé ".repeat(300));
    e.reason = Some("Ünïcödé".repeat(30));
    odd.push(e);
    let mut e = base("bad-controller");
    e.reporting_component = Some("My Controller (v2)!".into());
    e.source = None;
    odd.push(e);
    let mut e = base("odd-type");
    e.type_ = Some("Error".into());
    e.reason = None;
    odd.push(e);
    let api: Api<CoreEvent> = Api::namespaced(client.clone(), &ns.name);
    for e in &odd {
        api.create(&PostParams::default(), e).await?;
    }
    let done = wait_for(
        &client,
        &ns.name,
        "one Finished series per odd loop",
        |objs| objs.len() == odd.len() && objs.iter().all(|e| state(e) == "Finished"),
    )
    .await?;
    assert!(done.iter().all(|e| count(e) == 3));
    let note_len = done
        .iter()
        .filter_map(|e| e.note.as_ref())
        .map(String::len)
        .max();
    assert!(note_len.is_some_and(|n| n <= 1024));
    assert_eq!(
        op.metric("event_series_dropped_total{reason=\"rejected\"}"),
        0.0
    );
    assert!(op.metric("event_series_api_requests_total{verb=\"create\",code=\"201\"}") >= 6.0);
    ns.cleanup().await
}
