//! End-to-end tests on a real node (`hack/cluster-up-node.sh`): event-series runs as two Pods from
//! its own image, installed with `kubectl apply -k config/default`, and the events come from the
//! real kubelet, scheduler and controller-manager. Every count is checked against what the emitter
//! wrote to the API, read from its raw events.

// A scenario reads as one story from top to bottom: the function-length lint is for the product.
#![allow(clippy::too_many_lines)]

use anyhow::{Context, Result, ensure};
use event_series_test_support::audit;
use event_series_test_support::cluster::{count, state};
use event_series_test_support::node::{
    self, NAMESPACE, crash_pod, eventually, leader, metric_sum, namespace, raw_count, raw_events,
    raw_total, ready_operator_pods, scrape, series_for,
};
use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::api::events::v1::Event as Series;
use kube::Client;
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::json;
use std::path::Path;
use std::time::Duration;

/// The leader change of the crash-loop test holds this for writing; tests that need the same two
/// replicas and leader from start to end hold it for reading.
static REPLICAS: tokio::sync::RwLock<()> = tokio::sync::RwLock::const_new(());

const IMAGE: &str = concat!(
    "ghcr.io/event-series/event-series:v",
    env!("CARGO_PKG_VERSION")
);

/// The shared node and an admin client, or `None` where this machine cannot run a node (outside CI).
async fn setup() -> Result<Option<(&'static Path, Client)>> {
    let Some(kubeconfig) = node::node() else {
        return Ok(None);
    };
    Ok(Some((kubeconfig, node::client(kubeconfig).await?)))
}

/// A namespace of its own (labelled for `policy`) with a crash-looping Pod `crash`, once the
/// operator shows its BackOff series Ongoing: the namespace, its Pods and that series object.
async fn crash_loop(
    client: &Client,
    name: &str,
    policy: &str,
) -> Result<(String, Api<Pod>, Series)> {
    let ns = namespace(client, name, policy).await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    pods.create(&PostParams::default(), &crash_pod("crash", IMAGE)?)
        .await?;
    let first = eventually(
        Duration::from_secs(180),
        "an Ongoing BackOff series",
        || async {
            let found = series_for(client, &ns, "BackOff").await?;
            Ok(found.into_iter().find(|s| state(s) == "Ongoing"))
        },
    )
    .await?;
    Ok((ns, pods, first))
}

#[tokio::test]
async fn the_operator_runs_as_two_pods_from_its_image_read_only_with_one_leader() -> Result<()> {
    let Some((_, client)) = setup().await? else {
        return Ok(());
    };
    let _same = REPLICAS.read().await;
    let pods = eventually(Duration::from_secs(120), "two Ready replicas", || async {
        let pods = ready_operator_pods(&client).await?;
        Ok((pods.len() == 2).then_some(pods))
    })
    .await?;
    let holder = eventually(Duration::from_secs(60), "a leader", || async {
        leader(&client).await
    })
    .await?;
    assert!(
        pods.contains(&holder),
        "the Lease holder {holder} is one of {pods:?}"
    );

    let ns = Api::<Namespace>::all(client.clone()).get(NAMESPACE).await?;
    let labels = ns.metadata.labels.unwrap_or_default();
    assert_eq!(
        labels
            .get("pod-security.kubernetes.io/enforce")
            .map(String::as_str),
        Some("restricted"),
        "the restricted Pod Security Standard is enforced on {NAMESPACE}"
    );

    // What the runtime really runs: the image, a read-only root, uid 65532 (from containerd's own
    // record of the container, not from the Pod spec).
    let api: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    for name in &pods {
        let pod = api.get(name).await?;
        let status = pod
            .status
            .and_then(|s| s.container_statuses)
            .and_then(|c| c.into_iter().next())
            .context("no container status")?;
        assert_eq!(status.image, IMAGE);
        let id = status
            .container_id
            .as_deref()
            .and_then(|id| id.strip_prefix("containerd://"))
            .context("no containerd id")?
            .to_owned();
        let out = std::process::Command::new("ctr")
            .args(["--address", "/run/event-series-node/containerd.sock"])
            .args(["-n", "k8s.io", "containers", "info", &id])
            .output()?;
        ensure!(out.status.success(), "ctr containers info {id}: {out:?}");
        let info: serde_json::Value = serde_json::from_slice(&out.stdout)?;
        assert_eq!(
            info["Spec"]["root"]["readonly"],
            json!(true),
            "{name}: read-only root"
        );
        assert_eq!(
            info["Spec"]["process"]["user"]["uid"],
            json!(65532),
            "{name}: uid"
        );
    }
    Ok(())
}

/// A kubelet crash loop becomes one Ongoing series about that Pod, written by the operator's Pods;
/// the leader Pod is deleted mid-loop and the standby carries on in the same object; when the Pod
/// goes, the series is Finished with the count the kubelet wrote.
#[tokio::test]
async fn a_kubelet_crash_loop_is_one_series_across_a_leader_change_and_finishes() -> Result<()> {
    let Some((kubeconfig, client)) = setup().await? else {
        return Ok(());
    };
    let ns = namespace(&client, "crashloop", "fast").await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let pod = pods
        .create(&PostParams::default(), &crash_pod("crash", IMAGE)?)
        .await?;
    let uid = pod.metadata.uid.clone().unwrap_or_default();

    let first = eventually(
        Duration::from_secs(180),
        "an Ongoing BackOff series",
        || async {
            let found = series_for(&client, &ns, "BackOff").await?;
            Ok(found.into_iter().find(|s| state(s) == "Ongoing"))
        },
    )
    .await?;
    let regarding = first.regarding.clone().context("no regarding")?;
    assert_eq!(regarding.kind.as_deref(), Some("Pod"));
    assert_eq!(regarding.name.as_deref(), Some("crash"));
    assert_eq!(regarding.uid.as_deref(), Some(uid.as_str()));
    let name = first.metadata.name.clone().context("no name")?;

    // Written from inside the cluster: every write of the series object carries an operator Pod's
    // name as its instance.
    let operators = ready_operator_pods(&client).await?;
    let writes: Vec<_> = audit::writes(kubeconfig, &ns)?
        .into_iter()
        .filter(|w| w.resource == "events" && w.name == name)
        .collect();
    assert!(!writes.is_empty(), "the series object's create is audited");
    assert!(
        writes.iter().all(|w| operators
            .iter()
            .any(|p| w.user_agent.contains(&audit::agent_of(p)))),
        "every write of {name} comes from an operator Pod {operators:?}: {writes:?}"
    );

    // The leader goes; the standby takes the Lease and carries on in the same object.
    let change = REPLICAS.write().await;
    let old = leader(&client).await?.context("no leader")?;
    Api::<Pod>::namespaced(client.clone(), NAMESPACE)
        .delete(&old, &DeleteParams::default())
        .await?;
    let new = eventually(Duration::from_secs(90), "a new leader", || async {
        Ok(leader(&client).await?.filter(|h| *h != old))
    })
    .await?;
    eventually(
        Duration::from_secs(120),
        "two Ready replicas again",
        || async { Ok((ready_operator_pods(&client).await?.len() == 2).then_some(())) },
    )
    .await?;
    drop(change);
    let before = count(&first);
    eventually(
        Duration::from_secs(120),
        "the series growing under the new leader",
        || async {
            let found = series_for(&client, &ns, "BackOff").await?;
            Ok(found
                .iter()
                .find(|s| s.metadata.name.as_deref() == Some(&name) && count(s) > before)
                .map(|_| ()))
        },
    )
    .await?;
    let writes = audit::writes(kubeconfig, &ns)?;
    assert!(
        writes
            .iter()
            .any(|w| w.name == name && w.user_agent.contains(&audit::agent_of(&new))),
        "the new leader {new} wrote the series"
    );

    // The Pod goes: the loop stops and the series is Finished with the kubelet's count.
    pods.delete("crash", &DeleteParams::default()).await?;
    let finished = eventually(Duration::from_secs(240), "the series Finished", || async {
        let found = series_for(&client, &ns, "BackOff").await?;
        Ok(found.into_iter().find(|s| state(s) == "Finished"))
    })
    .await?;
    let all = series_for(&client, &ns, "BackOff").await?;
    assert_eq!(all.len(), 1, "one series object for one loop: {all:?}");
    assert_eq!(finished.metadata.name.as_deref(), Some(name.as_str()));
    let raw = raw_total(&client, &ns, "BackOff", "crash").await?;
    assert_eq!(
        count(&finished),
        raw,
        "the series counts what the kubelet wrote"
    );
    Api::<Namespace>::all(client.clone())
        .delete(&ns, &DeleteParams::default())
        .await?;
    Ok(())
}

/// a young loop's object keeps up with the kubelet. Three minutes into a crash loop, under a
/// policy with the default 30-minute heartbeat, the series object carries at least the count the
/// kubelet's raw BackOff carried nearly two minutes in (written by the early refresh at 2 minutes;
/// without refreshes it would still hold its create's count, 2, until the first heartbeat), and
/// `event-series get` says how old the write is.
#[tokio::test]
async fn a_young_loop_is_refreshed_early() -> Result<()> {
    let Some((kubeconfig, client)) = setup().await? else {
        return Ok(());
    };
    let (ns, pods, created) = crash_loop(&client, "fresh", "fresh").await?;
    let start = created
        .event_time
        .as_ref()
        .and_then(|t| chrono::DateTime::from_timestamp_micros(t.0.as_microsecond()))
        .context("no eventTime")?;
    let until = |secs: i64| {
        let at = start + chrono::TimeDelta::seconds(secs);
        (at - chrono::Utc::now()).to_std().unwrap_or_default()
    };
    tokio::time::sleep(until(110)).await;
    let raw_at_two = raw_total(&client, &ns, "BackOff", "crash").await?;
    tokio::time::sleep(until(180)).await;
    let now = series_for(&client, &ns, "BackOff").await?;
    let ongoing = now
        .iter()
        .find(|s| state(s) == "Ongoing")
        .context("the loop is still Ongoing")?;
    println!(
        "created with {}, 3 min in: {} (the kubelet's raw count at 1m50s: {raw_at_two})",
        count(&created),
        count(ongoing)
    );
    ensure!(
        count(ongoing) >= raw_at_two && count(ongoing) > count(&created),
        "the object holds {} at 3 minutes, the kubelet counted {raw_at_two} before 2 minutes",
        count(ongoing)
    );
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_event-series"))
        .args(["get", "-n", &ns, "--kubeconfig"])
        .arg(kubeconfig)
        .output()?;
    let table = String::from_utf8_lossy(&out.stdout);
    println!("{table}");
    let header: Vec<&str> = table
        .lines()
        .next()
        .unwrap_or("")
        .split("   ")
        .map(str::trim)
        .collect();
    ensure!(header.contains(&"WRITTEN"), "{table}");
    ensure!(
        !table.contains("<unknown>"),
        "every row has a write age: {table}"
    );
    pods.delete("crash", &DeleteParams::default()).await?;
    Api::<Namespace>::all(client.clone())
        .delete(&ns, &DeleteParams::default())
        .await?;
    Ok(())
}

/// The scheduler's FailedScheduling (events.k8s.io, with a series of its own and, at first, two
/// objects: the first carries the Pod's resourceVersion in its key) is one series, counted by delta:
/// Finished with the occurrences the scheduler wrote, never more.
#[tokio::test]
async fn an_unschedulable_pod_is_one_series_counted_by_delta() -> Result<()> {
    let Some((_, client)) = setup().await? else {
        return Ok(());
    };
    let ns = namespace(&client, "unschedulable", "fast").await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    // More CPU than the node has: "0/1 nodes are available: 1 Insufficient cpu".
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "too-big"},
        "spec": {"containers": [{
            "name": "c", "image": IMAGE,
            "resources": {"requests": {"cpu": "1000"}},
        }]}
    }))?;
    pods.create(&PostParams::default(), &pod).await?;

    // The scheduler tries again when a scheduled Pod goes (it may free CPU): place and delete small
    // Pods on the node until its recorder has written its own series (series.count 2).
    let mut pokes = 0;
    eventually(Duration::from_secs(240), "the scheduler's series", || {
        pokes += 1;
        let (client, pods, ns) = (client.clone(), pods.clone(), ns.clone());
        async move {
            let raw = raw_events(&client, &ns, "FailedScheduling", "too-big").await?;
            if raw.iter().any(|e| e.series.is_some()) {
                return Ok(Some(()));
            }
            let mut poke = crash_pod(&format!("poke-{pokes}"), IMAGE)?;
            if let Some(spec) = poke.spec.as_mut() {
                spec.node_name = Some("event-series-node".into());
            }
            pods.create(&PostParams::default(), &poke).await?;
            tokio::time::sleep(Duration::from_secs(3)).await;
            pods.delete(
                &format!("poke-{pokes}"),
                &DeleteParams::default().grace_period(0),
            )
            .await?;
            tokio::time::sleep(Duration::from_secs(8)).await;
            Ok(None)
        }
    })
    .await?;
    let found = eventually(
        Duration::from_secs(60),
        "a FailedScheduling series",
        || async {
            let found = series_for(&client, &ns, "FailedScheduling").await?;
            Ok((!found.is_empty()).then_some(found))
        },
    )
    .await?;
    assert_eq!(found.len(), 1, "one series for the two objects: {found:?}");
    assert_eq!(
        found[0].reporting_controller.as_deref(),
        Some("default-scheduler")
    );
    let name = found[0].metadata.name.clone();

    // The Pod goes: the scheduler stops, the series is Finished with what it wrote.
    pods.delete("too-big", &DeleteParams::default().grace_period(0))
        .await?;
    let finished = eventually(Duration::from_secs(180), "the series Finished", || async {
        let found = series_for(&client, &ns, "FailedScheduling").await?;
        Ok(found.into_iter().find(|s| state(s) == "Finished"))
    })
    .await?;
    assert_eq!(
        finished.metadata.name, name,
        "one object for its whole life"
    );
    let raw = raw_total(&client, &ns, "FailedScheduling", "too-big").await?;
    assert!(
        raw >= 3,
        "a single event and a series of two at least: {raw}"
    );
    assert_eq!(count(&finished), raw, "counted by delta, never twice");
    assert_eq!(series_for(&client, &ns, "FailedScheduling").await?.len(), 1);
    Api::<Namespace>::all(client.clone())
        .delete(&ns, &DeleteParams::default())
        .await?;
    Ok(())
}

/// A ReplicaSet blocked by a ResourceQuota: the controller-manager writes single FailedCreate events,
/// then one "(combined from similar events)" object that grows. By default (the note is not in the
/// key) that is one series, Finished with the controller-manager's exact count; with
/// `includeNote: true`, where every occurrence has a note of its own, none.
#[tokio::test]
async fn failed_creates_under_a_quota_are_counted_exactly() -> Result<()> {
    let Some((_, client)) = setup().await? else {
        return Ok(());
    };
    for policy in ["fast", "note"] {
        let ns = namespace(&client, &format!("quota-{policy}"), policy).await?;
        let quota: k8s_openapi::api::core::v1::ResourceQuota = serde_json::from_value(json!({
            "metadata": {"name": "no-pods"},
            "spec": {"hard": {"pods": "0"}},
        }))?;
        Api::namespaced(client.clone(), &ns)
            .create(&PostParams::default(), &quota)
            .await?;
        let rs: k8s_openapi::api::apps::v1::ReplicaSet = serde_json::from_value(json!({
            "metadata": {"name": "blocked"},
            "spec": {
                "replicas": 2,
                "selector": {"matchLabels": {"app": "blocked"}},
                "template": {
                    "metadata": {"labels": {"app": "blocked"}},
                    "spec": {"containers": [{"name": "c", "image": IMAGE}]},
                },
            },
        }))?;
        Api::namespaced(client.clone(), &ns)
            .create(&PostParams::default(), &rs)
            .await?;
        // Until the combined object has grown (patched with a higher count) a few times.
        eventually(
            Duration::from_secs(240),
            "the combined FailedCreate object counting 3",
            || async {
                let raw = raw_events(&client, &ns, "FailedCreate", "blocked").await?;
                Ok(raw
                    .iter()
                    .any(|e| {
                        e.message
                            .as_deref()
                            .is_some_and(|m| m.contains("combined from similar events"))
                            && raw_count(e) >= 3
                    })
                    .then_some(()))
            },
        )
        .await?;
        // Stop the retries; the loop ends and is Finished with its final count.
        let rss: Api<k8s_openapi::api::apps::v1::ReplicaSet> = Api::namespaced(client.clone(), &ns);
        rss.delete("blocked", &DeleteParams::default()).await?;
        let raw = raw_events(&client, &ns, "FailedCreate", "blocked").await?;
        if policy == "fast" {
            let finished = eventually(
                Duration::from_secs(180),
                "the FailedCreate series Finished",
                || async {
                    let found = series_for(&client, &ns, "FailedCreate").await?;
                    Ok(found.into_iter().find(|s| state(s) == "Finished"))
                },
            )
            .await?;
            let raw = raw_total(&client, &ns, "FailedCreate", "blocked").await?;
            assert!(raw >= 12, "single events and the combined one: {raw}");
            assert_eq!(count(&finished), raw, "the controller-manager's count");
            assert_eq!(series_for(&client, &ns, "FailedCreate").await?.len(), 1);
        } else {
            // Every message names the Pod that could not be created, and the combined object's
            // message changes with each occurrence: keyed by note, no two occurrences are
            // isomorphic, so there is no series at all (and none of a merged count).
            let notes: std::collections::BTreeSet<_> =
                raw.iter().filter_map(|e| e.message.clone()).collect();
            assert_eq!(
                notes.len(),
                raw.len(),
                "every raw object has its own message"
            );
            tokio::time::sleep(Duration::from_secs(60)).await;
            let found = series_for(&client, &ns, "FailedCreate").await?;
            assert!(found.is_empty(), "no series of different notes: {found:?}");
        }
        Api::<Namespace>::all(client.clone())
            .delete(&ns, &DeleteParams::default())
            .await?;
    }
    Ok(())
}

/// A namespace deleted while its series is Ongoing: the namespace controller removes everything,
/// the operator ends the namespace's series unwritten (`series_evicted_total{reason=
/// "namespace_deleted"}`), does not loop on errors, writes nothing into the namespace once it is
/// gone, and counts any write the API refused.
#[tokio::test]
async fn deleting_a_namespace_with_an_ongoing_series() -> Result<()> {
    let Some((kubeconfig, client)) = setup().await? else {
        return Ok(());
    };
    let (ns, _pods, _) = crash_loop(&client, "deleted", "fast").await?;
    let _same = REPLICAS.read().await;
    let leader_pod = leader(&client).await?.context("no leader")?;
    let rejected = |text: &str| {
        metric_sum(text, "event_series_api_requests_total", &["code=\"404\""])
            + metric_sum(text, "event_series_api_requests_total", &["code=\"403\""])
    };
    let gone_series = |text: &str| {
        metric_sum(
            text,
            "event_series_series_evicted_total",
            &["reason=\"namespace_deleted\""],
        )
    };
    let scraped = scrape(&client, kubeconfig, &leader_pod).await?;
    let (before, evicted_before) = (rejected(&scraped), gone_series(&scraped));

    let namespaces: Api<Namespace> = Api::all(client.clone());
    namespaces.delete(&ns, &DeleteParams::default()).await?;
    eventually(Duration::from_secs(120), "the namespace gone", || async {
        Ok(namespaces.get_opt(&ns).await?.is_none().then_some(()))
    })
    .await?;
    let gone = chrono::Utc::now();
    // The Finish is due finishAfter (45 s) after the last BackOff and is tried: a patch (404, the
    // namespace controller deleted the object) and a create (404, no namespace), once per series.
    let attempts_after_gone = || -> Result<Vec<audit::Write>> {
        Ok(audit::writes(kubeconfig, &ns)?
            .into_iter()
            .filter(|w| w.resource == "events" && w.user_agent.starts_with("event-series/"))
            .filter(|w| w.received > gone)
            .collect())
    };
    tokio::time::sleep(Duration::from_secs(100)).await;
    let late = attempts_after_gone()?;
    tokio::time::sleep(Duration::from_secs(30)).await;
    let later = attempts_after_gone()?;
    assert_eq!(late.len(), later.len(), "no error loop: {later:?}");
    let written: Vec<_> = late.iter().filter(|w| w.code < 300).collect();
    assert!(
        written.is_empty(),
        "nothing written once it is gone: {written:?}"
    );
    let mut per_object = std::collections::BTreeMap::<&str, usize>::new();
    for w in &late {
        *per_object.entry(w.name.as_str()).or_default() += 1;
    }
    assert!(
        per_object.values().all(|n| *n <= 2),
        "at most a patch and a create per series: {late:?}"
    );
    let scraped = scrape(&client, kubeconfig, &leader_pod).await?;
    assert!(
        gone_series(&scraped) > evicted_before,
        "its series ended as namespace_deleted ({evicted_before} before)"
    );
    assert!(
        rejected(&scraped) >= before + late.len() as f64,
        "each rejected write is in the metrics: {before} before, {} now, {} attempts",
        rejected(&scraped),
        late.len()
    );
    assert!(
        ready_operator_pods(&client).await?.contains(&leader_pod),
        "the leader is still Ready"
    );
    Ok(())
}

/// the operator's Pods, with `--alertmanager-url` as config/alertmanager sets it
/// (pointing at the tests' Alertmanager on the node's bridge address), post a kubelet crash loop:
/// one firing notification once the BackOff has counted 3, none again while it loops through
/// several re-posts (every 10 s, and a leader change if the crash-loop test makes one meanwhile),
/// and one resolved notification with the final count once the Pod is deleted and the loop is
/// Finished.
#[tokio::test]
async fn a_crash_looping_pod_notifies_once_firing_and_once_resolved() -> Result<()> {
    let Some((_, client)) = setup().await? else {
        return Ok(());
    };
    let hook = &node::alerting()?.webhook;
    let (ns, pods, _) = crash_loop(&client, "alerts", "alerts").await?;
    let notified = || {
        let alerts = hook.alerts_with(&[("namespace", ns.as_str()), ("reason", "BackOff")]);
        let firing = alerts.iter().filter(|(s, _)| s == "firing").count();
        (firing, alerts.len() - firing, alerts)
    };
    eventually(
        Duration::from_secs(300),
        "the firing notification",
        || async { Ok((notified().0 == 1).then_some(())) },
    )
    .await?;
    let (_, _, alerts) = notified();
    let at: u64 = alerts[0].1["annotations"]["count"]
        .as_str()
        .and_then(|c| c.parse().ok())
        .context("count")?;
    ensure!(at >= 3, "fired at count {at}, below minCount 3");
    // Several re-posts while it keeps looping.
    tokio::time::sleep(Duration::from_secs(45)).await;
    ensure!(
        notified().0 == 1,
        "a second firing notification: {:#?}",
        notified().2
    );
    pods.delete("crash", &DeleteParams::default()).await?;
    let finished = eventually(Duration::from_secs(240), "the series Finished", || async {
        let found = series_for(&client, &ns, "BackOff").await?;
        Ok(found.into_iter().find(|s| state(s) == "Finished"))
    })
    .await?;
    eventually(
        Duration::from_secs(60),
        "the resolved notification",
        || async { Ok((notified().1 >= 1).then_some(())) },
    )
    .await?;
    let (firing, resolved, alerts) = notified();
    ensure!((firing, resolved) == (1, 1), "{alerts:#?}");
    let last = &alerts
        .iter()
        .find(|(s, _)| s == "resolved")
        .context("resolved")?
        .1;
    ensure!(
        last["annotations"]["count"].as_str() == Some(count(&finished).to_string().as_str()),
        "the resolved alert carries the final count {}: {last}",
        count(&finished)
    );
    Api::<Namespace>::all(client.clone())
        .delete(&ns, &DeleteParams::default())
        .await?;
    Ok(())
}
