//! Two replicas with leader election: the standby takes over from a killed leader within the lease
//! duration and the counts stay exact. The metrics server is scraped during the storm.

use crate::OPERATOR;
use crate::operator::{count, emit, state, wait_for};
use anyhow::{Result, bail, ensure};
use event_series_test_support::cluster::{TestNamespace, client, kubeconfig, kubectl};
use event_series_test_support::node::metric_sum;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::Api;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

const LEASE_SECS: u64 = 4;

async fn holder(api: &Api<Lease>) -> Option<String> {
    api.get_opt("event-series")
        .await
        .ok()
        .flatten()
        .and_then(|l| l.spec)
        .and_then(|s| s.holder_identity)
        .filter(|h| !h.is_empty())
}

async fn wait_holder(api: &Api<Lease>, who: &str, within: Duration) -> Result<Duration> {
    let started = Instant::now();
    while started.elapsed() < within {
        if holder(api).await.as_deref() == Some(who) {
            return Ok(started.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    bail!(
        "{who} did not hold the lease within {within:?} (holder: {:?})",
        holder(api).await
    )
}

/// Operations: more than one replica; a warm standby (it lists and watches as the leader does,
/// writing nothing) takes over within the lease duration; `/metrics`, `/healthz` and `/readyz`
/// answer during a storm, and no object the old leader wrote is created again.
#[tokio::test]
async fn a_standby_takes_over_from_a_killed_leader_with_exact_counts() -> Result<()> {
    let client = client().await?;
    let ns = TestNamespace::new(&client, "failover").await?;
    let lease_secs = format!("{LEASE_SECS}s");
    let args = |id: &'static str| {
        vec![
            "--namespace".to_string(),
            ns.name.clone(),
            "--leader-elect".into(),
            "--lease-namespace".into(),
            ns.name.clone(),
            "--instance".into(),
            id.into(),
            "--lease-duration".into(),
            lease_secs.clone(),
            "--renew-deadline".into(),
            "3s".into(),
            "--retry-period".into(),
            "1s".into(),
            "--finish-after".into(),
            "20s".into(),
            "--series-window".into(),
            "20s".into(),
            "--heartbeat-interval".into(),
            "2s".into(),
        ]
    };
    let launch = |id: &'static str| {
        let a = args(id);
        let a: Vec<&str> = a.iter().map(String::as_str).collect();
        OPERATOR.launch(kubeconfig(), &format!("{}-{id}", ns.name), &a)
    };
    let leases: Api<Lease> = Api::namespaced(client.clone(), &ns.name);
    let a = launch("a")?;
    wait_holder(&leases, "a", Duration::from_secs(20)).await?;
    let b = launch("b")?;

    let storm_ns = ns.name.clone();
    let storm = std::thread::spawn(move || {
        emit(
            &storm_ns,
            &[
                "--recorder",
                "legacy",
                "--scenario",
                "crashloop",
                "--pods",
                "3",
                "--rate",
                "4",
                "--duration",
                "12s",
            ],
        )
    });
    tokio::time::sleep(Duration::from_secs(4)).await;

    // Scraped mid-storm: every documented metric is exported by the leader, both replicas are healthy.
    let (code, text) = a.get("/metrics").unwrap_or_default();
    assert_eq!(code, 200);
    for name in [
        "event_series_occurrences_total",
        "event_series_series_active",
        "event_series_series_started_total",
        "event_series_series_finished_total",
        "event_series_api_requests_total",
        "event_series_watch_restarts_total",
        "event_series_watch_relists_total",
        "event_series_bookmarks_total",
        "event_series_dropped_total",
    ] {
        assert!(text.contains(name), "{name} missing from /metrics");
    }
    assert!(
        a.metric("event_series_occurrences_total") > 0.0,
        "the leader counts"
    );
    // The standby is warm: it lists and watches too, its engine holds the same loops, and it
    // writes nothing while the other leads.
    assert!(
        b.metric("event_series_occurrences_total") > 0.0,
        "the standby counts the same occurrences"
    );
    assert!(
        b.metric("event_series_series_active") > 0.0,
        "the standby's engine holds the loops"
    );
    let (_, scrape) = b.get("/metrics").unwrap_or_default();
    for verb in ["create", "patch"] {
        let verb = format!("verb=\"{verb}\"");
        assert_eq!(
            metric_sum(&scrape, "event_series_api_requests_total", &[&verb]),
            0.0,
            "the standby wrote nothing: {scrape}"
        );
    }
    for op in [&a, &b] {
        assert_eq!(op.get("/healthz").map(|r| r.0), Some(200));
        assert_eq!(op.get("/readyz").map(|r| r.0), Some(200));
    }

    a.kill9()?;
    let killed = Instant::now();
    let takeover = wait_holder(
        &leases,
        "b",
        Duration::from_secs(LEASE_SECS) + Duration::from_secs(3),
    )
    .await?;
    println!("standby took over {takeover:?} after the leader was killed (lease {LEASE_SECS}s)");
    // The loops go on: the new leader's first write (a figure for the log, not a timed assertion).
    while killed.elapsed() < Duration::from_secs(30) {
        let (_, scrape) = b.get("/metrics").unwrap_or_default();
        if metric_sum(
            &scrape,
            "event_series_api_requests_total",
            &["verb=\"patch\""],
        ) > 0.0
        {
            println!(
                "the new leader's first write answered {:?} after the kill",
                killed.elapsed()
            );
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let truth = match storm.join() {
        Ok(t) => t?,
        Err(_) => bail!("the emitter thread panicked"),
    };
    let expected: BTreeMap<String, u64> = truth
        .iter()
        .map(|t| (t.regarding.name.clone(), t.api_count))
        .collect();
    let done = wait_for(
        &client,
        &ns.name,
        "every loop Finished with its count",
        |objs| {
            let mut got = BTreeMap::<String, u64>::new();
            for e in objs {
                let pod = e
                    .regarding
                    .as_ref()
                    .and_then(|r| r.name.clone())
                    .unwrap_or_default();
                *got.entry(pod).or_default() += count(e);
            }
            got == expected && objs.iter().all(|e| state(e) == "Finished")
        },
    )
    .await?;
    assert_eq!(done.len(), expected.len(), "one object per loop: {done:?}");
    // Nothing the old leader wrote was created again: the new leader knew its objects.
    let (_, scrape) = b.get("/metrics").unwrap_or_default();
    for code in ["409", "201"] {
        assert_eq!(
            metric_sum(
                &scrape,
                "event_series_api_requests_total",
                &["verb=\"create\"", &format!("code=\"{code}\"")]
            ),
            0.0,
            "the new leader created a series object the old one had written: {scrape}"
        );
    }
    ns.cleanup().await
}

/// Writes to the API server: every update carries what the writer last knew of the object (its
/// resourceVersion), so a deposed leader's write that reaches the API server late is refused by
/// the server itself, whatever the clocks. The leader's connections are slowed (each byte delivered
/// 12 s after it was sent, a proxy or an overloaded HA apiserver's peer holding requests): it
/// fences itself and exits, the standby takes over and writes the loops' objects, and only then do
/// the old leader's held updates arrive. Each is answered 409 Conflict, and every loop ends in one
/// object with its exact count.
#[tokio::test]
async fn a_deposed_leaders_late_write_is_refused_by_the_api_server() -> Result<()> {
    use crate::network::{exact, proxied, storm, wait_leading};
    use event_series_test_support::audit;
    let client = client().await?;
    let ns = TestNamespace::new(&client, "late-write").await?;
    let (proxy_a, kc_a) = proxied(&format!("{}-a", ns.name)).await?;
    let lease_secs = format!("{LEASE_SECS}s");
    let args = |id: &'static str| {
        let mut a = vec![
            "--namespace",
            &ns.name,
            "--leader-elect",
            "--lease-namespace",
        ];
        a.extend([
            ns.name.as_str(),
            "--instance",
            id,
            "--lease-duration",
            &lease_secs,
        ]);
        a.extend(["--renew-deadline", "3s", "--retry-period", "1s"]);
        a.extend(["--finish-after", "20s", "--series-window", "20s"]);
        // A heartbeat every second: the leader always has an update on its way.
        a.extend(["--heartbeat-interval", "1s", "--first-refresh", "0"]);
        a.into_iter().map(str::to_owned).collect::<Vec<_>>()
    };
    let launch = |kc: &std::path::Path, id: &'static str| {
        let a = args(id);
        let a: Vec<&str> = a.iter().map(String::as_str).collect();
        OPERATOR.launch(kc, &format!("{}-{id}", ns.name), &a)
    };
    let leases: Api<Lease> = Api::namespaced(client.clone(), &ns.name);
    let mut a = launch(&kc_a, "a")?;
    wait_leading(&leases, "a", Duration::from_secs(30), Some(&mut a)).await?;
    let b = launch(kubeconfig(), "b")?;
    let loops = storm(&ns.name, &format!("{}-storm", ns.name), 3, 45, 7)?;
    wait_for(&client, &ns.name, "the loops' series", |o| o.len() == 3).await?;
    tokio::time::sleep(Duration::from_secs(4)).await;

    proxy_a.forward_no_resets();
    proxy_a.set_latency(Duration::from_secs(12));
    let (status, _) = a
        .wait_exit(Duration::from_secs(40))?
        .ok_or_else(|| anyhow::anyhow!("the slowed leader did not exit"))?;
    assert_eq!(status.code(), Some(1), "the slowed leader exits 1");
    wait_leading(&leases, "b", Duration::from_secs(30), None).await?;
    // Until every update a held has reached the API server (12 s after it was sent).
    tokio::time::sleep(Duration::from_secs(20)).await;

    let writes = audit::writes(kubeconfig(), &ns.name)?;
    let series = |w: &&audit::Write| w.resource == "events" && w.verb == "patch";
    let b_first = writes
        .iter()
        .filter(series)
        .filter(|w| w.user_agent.contains(&audit::agent_of("b")) && w.code / 100 == 2)
        .map(|w| w.received)
        .min()
        .ok_or_else(|| anyhow::anyhow!("the new leader updated no series object"))?;
    let late: Vec<_> = writes
        .iter()
        .filter(series)
        .filter(|w| w.user_agent.contains(&audit::agent_of("a")) && w.received > b_first)
        .collect();
    assert!(
        !late.is_empty(),
        "no update of the old leader reached the API server after the new leader's first: the \
         scenario did not happen (proxy a: {:?})",
        proxy_a.stats()
    );
    let landed: Vec<_> = late.iter().filter(|w| w.code / 100 == 2).collect();
    assert!(
        landed.is_empty(),
        "updates of the deposed leader landed after the new leader wrote: {landed:#?}"
    );
    assert!(late.iter().all(|w| w.code == 409), "{late:#?}");
    println!(
        "{} late updates of the deposed leader, all refused with 409",
        late.len()
    );

    let truth = loops.wait()?;
    exact(&client, &ns.name, &truth).await?;
    drop(b);
    ns.cleanup().await
}

/// Alerts through a hand-over at scale: 2,000 loops alerting (500 at once by `--max-alerts`, the
/// oldest loops first), the leader killed (SIGKILL) with the default lease timings. The warm
/// standby writes within the lease duration + 5 s of the kill (a loop that starts at the kill is
/// owed a create), and posts the same 500 alerts before any expires (posts every 15 s, each valid
/// for 60 s: about 30 s left once the Lease is free): the webhook gets one firing notification per
/// alerting loop and nothing resolved, and Alertmanager holds the same set.
#[tokio::test]
async fn thousands_of_alerting_loops_go_through_a_hand_over_without_a_second_notification()
-> Result<()> {
    use crate::network::wait_leading;
    use event_series_test_support::alertmanager::{Alertmanager, Webhook};
    use event_series_test_support::cluster::apply_on;
    use event_series_test_support::raw::{create_all, kubelet_backoff};
    use k8s_openapi::api::core::v1::Event as CoreEvent;
    use std::collections::BTreeMap;
    const LOOPS: usize = 2_000;
    const ALERTS: usize = 500;
    let client = client().await?;
    let ns = TestNamespace::new(&client, "alert-scale").await?;
    let hook = Webhook::start()?;
    let am = Alertmanager::start(&hook, &ns.name)?;
    let policy = format!("handover-{}", ns.name);
    apply_on(
        kubeconfig(),
        &format!(
            "apiVersion: eventseries.dev/v1alpha1\nkind: EventSeriesPolicy\nmetadata:\n  name: {policy}\n\
             spec:\n  namespaceSelector:\n    matchLabels: {{kubernetes.io/metadata.name: {}}}\n  \
             finishAfter: 5m\n  seriesWindow: 5m\n  firstRefresh: \"0\"\n  heartbeatInterval: 1h\n  \
             alert:\n    minCount: 2\n",
            ns.name
        ),
        &[],
    )?;
    let url = am.url();
    let launch = |id: &'static str| {
        let args = [
            "--namespace",
            &ns.name,
            "--leader-elect",
            "--lease-namespace",
            &ns.name,
            "--instance",
            id,
            "--alertmanager-url",
            &url,
            "--alert-resend-interval",
            "15s",
            "--max-alerts",
            "500",
            "--max-alerts-per-namespace",
            "2000",
            "--qps",
            "500",
            "--burst",
            "500",
        ];
        OPERATOR.launch(kubeconfig(), &format!("{}-{id}", ns.name), &args)
    };
    let leases: Api<Lease> = Api::namespaced(client.clone(), &ns.name);
    let a = launch("a")?;
    wait_leading(&leases, "a", Duration::from_secs(40), None).await?;
    let b = launch("b")?;
    let raw: Api<CoreEvent> = Api::namespaced(client.clone(), &ns.name);
    let loops = (0..LOOPS).map(|i| {
        let pod = format!("web-{i:04}");
        kubelet_backoff(&ns.name, &format!("{pod}.raw"), &pod, 2)
    });
    create_all(&raw, loops, 16).await?;
    let per_loop = |hook: &Webhook| {
        let mut by_loop = BTreeMap::<String, (usize, usize)>::new();
        for (status, alert) in hook.alerts_with(&[("namespace", &ns.name)]) {
            let series = alert["labels"]["series"].as_str().unwrap_or("").to_owned();
            let n = by_loop.entry(series).or_default();
            if status == "firing" {
                n.0 += 1;
            } else {
                n.1 += 1;
            }
        }
        by_loop
    };
    let deadline = Instant::now() + Duration::from_secs(240);
    while per_loop(&hook).len() < ALERTS {
        if Instant::now() > deadline {
            bail!("{} loops notified of {ALERTS}", per_loop(&hook).len());
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    // The standby is warm before the kill.
    while b.get("/readyz").map(|r| r.0) != Some(200) {
        if Instant::now() > deadline {
            bail!("the standby never became Ready");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let before = per_loop(&hook);
    let flapped: Vec<_> = before.iter().filter(|(_, n)| **n != (1, 0)).collect();
    assert!(
        flapped.is_empty(),
        "before the kill, {} loops resolved or notified twice: {:?}",
        flapped.len(),
        flapped.iter().take(5).collect::<Vec<_>>()
    );

    a.kill9()?;
    let killed = Instant::now();
    create_all(&raw, [kubelet_backoff(&ns.name, "late.raw", "late", 2)], 1).await?;
    let first_write = loop {
        let (_, scrape) = b.get("/metrics").unwrap_or_default();
        let writes: f64 = ["create", "patch"]
            .iter()
            .map(|verb| {
                metric_sum(
                    &scrape,
                    "event_series_api_requests_total",
                    &[&format!("verb=\"{verb}\""), "code=\"201\""],
                ) + metric_sum(
                    &scrape,
                    "event_series_api_requests_total",
                    &[&format!("verb=\"{verb}\""), "code=\"200\""],
                )
            })
            .sum();
        if writes > 0.0 {
            break killed.elapsed();
        }
        if killed.elapsed() > Duration::from_secs(60) {
            bail!("the standby wrote nothing within 60 s of the kill");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    println!("the standby's first series write answered {first_write:?} after the kill");
    assert!(
        first_write <= Duration::from_secs(20),
        "first write {first_write:?} after the kill: beyond the lease duration (15 s) + 5 s"
    );
    // Past the alerts' validity (four resend intervals, 60 s from the old leader's last post): a
    // lapse would have been notified.
    tokio::time::sleep(Duration::from_secs(60)).await;
    let after = per_loop(&hook);
    assert_eq!(before.len(), ALERTS, "{} loops notified", before.len());
    let again: Vec<_> = after.iter().filter(|(_, n)| **n != (1, 0)).collect();
    assert!(
        again.is_empty() && after.len() == ALERTS,
        "{} loops notified again or resolved (of {}): {:?}",
        again.len(),
        after.len(),
        again.iter().take(5).collect::<Vec<_>>()
    );
    let held = am
        .alerts()?
        .into_iter()
        .filter(|a| {
            a["labels"]["namespace"] == ns.name.as_str() && a["status"]["state"] == "active"
        })
        .count();
    assert_eq!(held, ALERTS, "the same alerts active in Alertmanager");
    drop(b);
    kubectl(&["delete", "eventseriespolicy", &policy])?;
    ns.cleanup().await
}

/// Operations: a rollout starts a new Pod beside a leader and a warm standby; when the leader
/// releases the Lease, the new Pod, still restoring, must leave it to the warm standby, or writes
/// stop for its whole restore. Here the new replica `b` restores slowly (20 ms each way, one object
/// a page, 300 look-alikes of a series object to read and reject: about 15 s) and tries the Lease
/// every second; the warm standby `c` only every five seconds, so that a replica racing for a free
/// Lease would win it from `c` nine times in ten.
#[tokio::test]
async fn a_replica_still_restoring_leaves_a_released_lease_to_the_warm_standby() -> Result<()> {
    use crate::network::{proxied, wait_leading};
    use event_series_test_support::raw::{create_all, kubelet_backoff};
    use k8s_openapi::api::core::v1::Event as CoreEvent;
    use k8s_openapi::api::events::v1::Event;
    use kube::api::{ObjectMeta, PostParams};
    let client = client().await?;
    let ns = TestNamespace::new(&client, "warm-first").await?;
    let replica = |id: &str, retry: &str, extra: &[&str]| -> Vec<String> {
        let timings = ["--lease-duration", "15s", "--renew-deadline", "7s"];
        let flags = [&timings[..], &["--retry-period", retry], extra].concat();
        crate::slow::replica(&ns.name, id, &flags)
    };
    let leases: Api<Lease> = Api::namespaced(client.clone(), &ns.name);
    let a_args = replica("a", "1s", &[]);
    let a = OPERATOR.launch(
        kubeconfig(),
        &format!("{}-a", ns.name),
        &a_args.iter().map(String::as_str).collect::<Vec<_>>(),
    )?;
    wait_leading(&leases, "a", Duration::from_secs(30), None).await?;
    let raw: Api<CoreEvent> = Api::namespaced(client.clone(), &ns.name);
    create_all(&raw, [kubelet_backoff(&ns.name, "web.raw", "web", 2)], 1).await?;
    let written = wait_for(&client, &ns.name, "the loop's series object", |objs| {
        objs.len() == 1
    })
    .await?;
    let objects: Api<Event> = Api::namespaced(client.clone(), &ns.name);
    for i in 0..300 {
        let copy = Event {
            metadata: ObjectMeta {
                name: Some(format!("aaa-{i:03}")),
                labels: written[0].metadata.labels.clone(),
                annotations: written[0].metadata.annotations.clone(),
                ..ObjectMeta::default()
            },
            ..written[0].clone()
        };
        objects.create(&PostParams::default(), &copy).await?;
    }
    let c_args = replica("c", "5s", &[]);
    let c = OPERATOR.launch(
        kubeconfig(),
        &format!("{}-c", ns.name),
        &c_args.iter().map(String::as_str).collect::<Vec<_>>(),
    )?;
    let (proxy, kc) = proxied(&format!("{}-b", ns.name)).await?;
    proxy.set_latency(Duration::from_millis(20));
    let b_args = replica("b", "1s", &["--list-page-bytes", "1"]);
    let mut b = OPERATOR.spawn(
        &kc,
        &format!("{}-b", ns.name),
        &b_args.iter().map(String::as_str).collect::<Vec<_>>(),
    )?;
    // b has joined the election and is restoring.
    tokio::time::sleep(Duration::from_secs(3)).await;
    ensure!(b.alive(), "b exited (log {})", b.log.display());
    ensure!(
        b.get("/readyz").map(|r| r.0) != Some(200),
        "b is warm already: its restore must outlast the hand-over (log {})",
        b.log.display()
    );
    let status = a.terminate()?;
    ensure!(status.success(), "a stopped cleanly: {status}");
    let taken = Instant::now();
    let holder = loop {
        if let Some(h) = holder(&leases).await {
            break h;
        }
        ensure!(
            taken.elapsed() < Duration::from_secs(20),
            "nobody took the released Lease"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    println!(
        "{holder} took the released Lease {:?} after a stopped",
        taken.elapsed()
    );
    assert_eq!(
        holder,
        "c",
        "the replica still restoring took the Lease from the warm standby (b's log {})",
        b.log.display()
    );
    drop((b, c));
    ns.cleanup().await
}
