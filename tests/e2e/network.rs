//! Networks that fail silently, between the operator and the real apiserver: a fault proxy
//! (`event_series_test_support::proxy`) freezes, resets or slows the operator's connections while
//! client-go emitters, which talk to the apiserver directly, keep their loops going. Every test
//! compares the final series with the emitters' ground truth: exact counts, one object per loop.

use crate::OPERATOR;
use crate::operator::{count, state, wait_for, wait_for_within};
use anyhow::{Context, Result, bail};
use chrono::{DateTime, Utc};
use event_series_test_support::audit;
use event_series_test_support::cluster::{
    TestNamespace, apiserver_addr, client, kubeconfig, kubeconfig_through,
};
use event_series_test_support::emitter::Emitter;
use event_series_test_support::process::Operator;
use event_series_test_support::proxy::FaultProxy;
use event_series_test_support::repo_root;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::events::v1::Event;
use kube::api::Api;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

const LOGS: &str = "target/e2e-logs";

/// A fault proxy in front of the shared apiserver, and a kubeconfig that goes through it.
pub(crate) async fn proxied(name: &str) -> Result<(FaultProxy, PathBuf)> {
    let proxy = FaultProxy::start(apiserver_addr(kubeconfig())?).await?;
    let path = repo_root()
        .join(LOGS)
        .join(format!("{name}.proxy.kubeconfig"));
    let kc = kubeconfig_through(kubeconfig(), proxy.addr(), &path)?;
    Ok((proxy, kc))
}

/// A crash loop of `pods` pods (named by `seed`) at 4 occurrences per second for `secs` seconds.
pub(crate) fn storm(ns: &str, log: &str, pods: u32, secs: u32, seed: u32) -> Result<Emitter> {
    Emitter::spawn(
        kubeconfig(),
        ns,
        LOGS,
        log,
        &[
            "--recorder",
            "legacy",
            "--scenario",
            "crashloop",
            "--pods",
            &pods.to_string(),
            "--rate",
            "4",
            "--duration",
            &format!("{secs}s"),
            "--seed",
            &seed.to_string(),
        ],
    )
}

/// A number per loop: (pod, reason).
pub(crate) type PerLoop = BTreeMap<(String, String), u64>;

/// Occurrences per loop over the series objects, and objects per loop.
pub(crate) fn tally(objects: &[Event]) -> (PerLoop, PerLoop) {
    let (mut counts, mut objs) = (BTreeMap::new(), BTreeMap::new());
    for e in objects {
        let pod = e
            .regarding
            .as_ref()
            .and_then(|r| r.name.clone())
            .unwrap_or_default();
        let key = (pod, e.reason.clone().unwrap_or_default());
        *counts.entry(key.clone()).or_default() += count(e);
        *objs.entry(key).or_default() += 1;
    }
    (counts, objs)
}

/// Waits until every loop of `truth` is Finished with exactly its count, in one object.
pub(crate) async fn exact(client: &kube::Client, ns: &str, truth: &PerLoop) -> Result<Vec<Event>> {
    let objects = wait_for_within(
        client,
        ns,
        Duration::from_secs(120),
        "every loop Finished with its exact count",
        |objs| {
            let (counts, _) = tally(objs);
            &counts == truth && objs.iter().all(|e| state(e) == "Finished")
        },
    )
    .await?;
    let (_, objs) = tally(&objects);
    assert!(
        objs.values().all(|n| *n == 1),
        "one object per loop: {objs:?}"
    );
    Ok(objects)
}

/// The first instant the operator's log holds a line containing `needle`.
pub(crate) fn logged_at(op: &Operator, needle: &str) -> Option<DateTime<Utc>> {
    op.log_text()
        .lines()
        .find(|l| l.contains(needle))
        .and_then(|l| l.split_whitespace().next())
        .and_then(|t| t.parse().ok())
}

/// Silent networks (docs/FAULTS.md): A connection frozen mid-loop (no FIN, no RST): the watch on it is found
/// silent after `--watch-timeout` plus the margin and resumed from its last resourceVersion, so a
/// loop that starts after the freeze gets its series soon after; no occurrence is lost or doubled.
#[tokio::test]
async fn a_frozen_connection_is_abandoned_and_a_new_loop_still_gets_its_series() -> Result<()> {
    let client = client().await?;
    let ns = TestNamespace::new(&client, "freeze").await?;
    let (proxy, kc) = proxied(&ns.name).await?;
    let mut args = vec!["--namespace", &ns.name];
    args.extend([
        "--watch-timeout",
        "10s",
        "--request-timeout",
        "3s",
        "--finish-after",
        "15s",
        "--series-window",
        "15s",
        "--heartbeat-interval",
        "4s",
    ]);
    let op = OPERATOR.launch(&kc, &ns.name, &args)?;
    let first = storm(&ns.name, &format!("{}-first", ns.name), 1, 25, 1)?;
    wait_for(&client, &ns.name, "the first loop's series", |o| {
        o.len() == 1
    })
    .await?;

    proxy.freeze_existing();
    let frozen = Instant::now();
    let second = storm(&ns.name, &format!("{}-second", ns.name), 1, 10, 2)?;
    // --watch-timeout + margin (15 s), then a new watch and the create, within a few seconds more.
    let bound = Duration::from_secs(10 + 5 + 10);
    wait_for_within(
        &client,
        &ns.name,
        bound,
        "a series for the loop that started after the freeze",
        |o| o.len() == 2,
    )
    .await?;
    println!(
        "the loop that started after the freeze had its series {:?} after the freeze",
        frozen.elapsed()
    );
    assert!(
        op.metric("event_series_watch_stalls_total") >= 1.0,
        "the stall is counted"
    );

    let mut truth = first.wait()?;
    truth.extend(second.wait()?);
    exact(&client, &ns.name, &truth).await?;
    proxy.heal();
    println!("proxy: {:?}", proxy.stats());
    ns.cleanup().await
}

pub(crate) async fn holder(api: &Api<Lease>) -> Option<(String, Option<DateTime<Utc>>)> {
    let spec = api.get_opt("event-series").await.ok()??.spec?;
    let holder = spec.holder_identity.filter(|h| !h.is_empty())?;
    let acquired = spec
        .acquire_time
        .and_then(|t| DateTime::<Utc>::from_timestamp_micros(t.0.as_microsecond()));
    Some((holder, acquired))
}

/// Waits up to `within` until `who` holds the Lease `event-series`, failing early if `op` (the
/// process of `who`, when given) exits. How long it took.
pub(crate) async fn wait_leading(
    leases: &Api<Lease>,
    who: &str,
    within: Duration,
    mut op: Option<&mut Operator>,
) -> Result<Duration> {
    let started = Instant::now();
    while holder(leases).await.map(|h| h.0).as_deref() != Some(who) {
        let exited = op.as_mut().is_some_and(|op| !op.alive());
        if started.elapsed() > within || exited {
            let log = op
                .map(|op| op.log.display().to_string())
                .unwrap_or_default();
            bail!("{who} did not take the lease within {within:?} (log {log})");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(started.elapsed())
}

/// Silent networks (docs/FAULTS.md): Two replicas; every connection of the leader freezes (a cut-off node) for
/// longer than the renew deadline. The leader fences itself and exits 1 before the standby takes the
/// Lease; the apiserver's audit log shows no write of the old leader after its fence; the standby
/// rebuilds by listing and every loop ends in one object with its exact count.
#[tokio::test]
async fn a_leader_cut_off_fences_itself_before_the_standby_takes_over() -> Result<()> {
    let client = client().await?;
    let ns = TestNamespace::new(&client, "cutoff").await?;
    let (proxy_a, kc_a) = proxied(&format!("{}-a", ns.name)).await?;
    let (_proxy_b, kc_b) = proxied(&format!("{}-b", ns.name)).await?;
    // client-go's timings, the defaults: lease 15 s, renew deadline 10 s, retry 2 s.
    let args = |id: &'static str| {
        vec![
            "--namespace".to_string(),
            ns.name.clone(),
            "--leader-elect".into(),
            "--lease-namespace".into(),
            ns.name.clone(),
            "--instance".into(),
            id.into(),
            "--finish-after".into(),
            "15s".into(),
            "--series-window".into(),
            "15s".into(),
            "--heartbeat-interval".into(),
            "3s".into(),
            "--request-timeout".into(),
            "5s".into(),
        ]
    };
    let launch = |kc: &PathBuf, id: &'static str| {
        let a = args(id);
        let a: Vec<&str> = a.iter().map(String::as_str).collect();
        OPERATOR.launch(kc, &format!("{}-{id}", ns.name), &a)
    };
    let leases: Api<Lease> = Api::namespaced(client.clone(), &ns.name);
    let mut a = launch(&kc_a, "a")?;
    wait_leading(&leases, "a", Duration::from_secs(30), Some(&mut a)).await?;
    let b = launch(&kc_b, "b")?;
    let loops = storm(&ns.name, &ns.name, 3, 40, 1)?;
    wait_for(&client, &ns.name, "the loops' series", |o| o.len() == 3).await?;
    tokio::time::sleep(Duration::from_secs(3)).await;

    proxy_a.freeze_all();
    let frozen = Utc::now();
    let (status, exited) = a
        .wait_exit(Duration::from_secs(40))?
        .context("the cut-off leader did not exit")?;
    let exited: DateTime<Utc> = exited.into();
    assert_eq!(status.code(), Some(1), "the cut-off leader exits 1");
    let fenced = logged_at(&a, "leadership lost").context("a logs its fence")?;
    let started = Instant::now();
    let acquired = loop {
        if let Some((who, at)) = holder(&leases).await
            && who == "b"
        {
            break at.context("an acquireTime")?;
        }
        if started.elapsed() > Duration::from_secs(30) {
            bail!("b never took the lease");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    println!(
        "frozen at {frozen}, a fenced at {fenced} (+{} ms), exited at {exited} (+{} ms), b acquired at {acquired} (+{} ms)",
        (fenced - frozen).num_milliseconds(),
        (exited - frozen).num_milliseconds(),
        (acquired - frozen).num_milliseconds()
    );
    assert!(fenced < acquired && exited < acquired);
    // Heal: whatever a had in flight must not land now.
    proxy_a.heal();
    tokio::time::sleep(Duration::from_secs(2)).await;

    let truth = loops.wait()?;
    exact(&client, &ns.name, &truth).await?;
    let writes = audit::writes(kubeconfig(), &ns.name)?;
    let by_a: Vec<_> = writes
        .iter()
        .filter(|w| w.user_agent.contains(&audit::agent_of("a")))
        .collect();
    assert!(!by_a.is_empty(), "the audit log holds a's writes");
    let late: Vec<_> = by_a.iter().filter(|w| w.received >= fenced).collect();
    assert!(late.is_empty(), "writes of a after its fence: {late:?}");
    println!(
        "audit: {} writes by a, the last received {:?} before its fence; proxy a: {:?}",
        by_a.len(),
        by_a.iter().map(|w| w.received).max().map(|t| fenced - t),
        proxy_a.stats()
    );
    drop(b);
    ns.cleanup().await
}

/// Silent networks (docs/FAULTS.md): Every connection of the operator is reset every 3 s during a storm: lists,
/// watches and writes fail mid-way and are resumed or retried; counts stay exact, no object is doubled.
#[tokio::test]
async fn connections_reset_every_few_seconds_lose_and_double_nothing() -> Result<()> {
    let client = client().await?;
    let ns = TestNamespace::new(&client, "resets").await?;
    let (proxy, kc) = proxied(&ns.name).await?;
    let op = OPERATOR.launch(
        &kc,
        &ns.name,
        &[
            "--namespace",
            &ns.name,
            "--finish-after",
            "15s",
            "--series-window",
            "15s",
            "--heartbeat-interval",
            "2s",
        ],
    )?;
    let loops = storm(&ns.name, &ns.name, 3, 30, 1)?;
    let mut resets = 0;
    let until = Instant::now() + Duration::from_secs(33);
    while Instant::now() < until {
        tokio::time::sleep(Duration::from_secs(3)).await;
        proxy.reset_all();
        resets += 1;
    }
    let truth = loops.wait()?;
    exact(&client, &ns.name, &truth).await?;
    println!(
        "{resets} resets; watch restarts {}; proxy {:?}",
        op.metric("event_series_watch_restarts_total"),
        proxy.stats()
    );
    assert!(op.metric("event_series_watch_restarts_total") >= 1.0);
    ns.cleanup().await
}

/// Silent networks (docs/FAULTS.md): 2 s of added latency each way on every connection: slower, but no request
/// passes its deadline, no watch counts as stalled, and the counts are exact.
#[tokio::test]
async fn two_seconds_of_latency_cause_no_timeout_storm() -> Result<()> {
    let client = client().await?;
    let ns = TestNamespace::new(&client, "latency").await?;
    let (proxy, kc) = proxied(&ns.name).await?;
    proxy.set_latency(Duration::from_secs(2));
    let op = OPERATOR.launch(
        &kc,
        &ns.name,
        &[
            "--namespace",
            &ns.name,
            "--finish-after",
            "20s",
            "--series-window",
            "20s",
            "--heartbeat-interval",
            "5s",
            "--watch-timeout",
            "20s",
        ],
    )?;
    let loops = storm(&ns.name, &ns.name, 3, 20, 1)?;
    let truth = loops.wait()?;
    exact(&client, &ns.name, &truth).await?;
    let metrics = op.get("/metrics").map(|r| r.1).unwrap_or_default();
    let timeouts: Vec<&str> = metrics
        .lines()
        .filter(|l| l.contains("code=\"timeout\""))
        .collect();
    assert!(timeouts.is_empty(), "{timeouts:?}");
    assert_eq!(op.metric("event_series_watch_stalls_total"), 0.0);
    assert_eq!(op.get("/readyz").map(|r| r.0), Some(200));
    ns.cleanup().await
}

/// `n` Ongoing series objects in `ns`, as the operator would have written them (one per pod), made
/// by the engine itself and created 32 at a time.
pub(crate) async fn series_objects(client: &kube::Client, ns: &str, n: usize) -> Result<()> {
    use event_series::object::to_event;
    use event_series_core::engine::Engine;
    use event_series_core::settings::Settings;
    use event_series_test_support::raw::kubelet_backoff;
    use futures::StreamExt;
    let mut engine = Engine::with_settings(Settings::default());
    let now = Utc::now();
    let mut objects = Vec::with_capacity(n);
    for i in 0..n {
        let raw = kubelet_backoff(ns, &format!("p{i}.raw"), &format!("p{i}"), 3);
        engine.observe(now, &event_series_core::key::normalise(&raw)?);
        objects.extend(
            engine
                .take_intents()
                .into_iter()
                .map(|i| to_event(&i.series)),
        );
    }
    let api: Api<Event> = Api::namespaced(client.clone(), ns);
    let failed = futures::stream::iter(objects)
        .map(|o| {
            let api = api.clone();
            async move { api.create(&Default::default(), &o).await }
        })
        .buffer_unordered(32)
        .filter(|r| futures::future::ready(r.is_err()))
        .count()
        .await;
    anyhow::ensure!(failed == 0, "{failed} series objects not created");
    Ok(())
}

/// Silent networks (docs/FAULTS.md): SIGTERM while a large restore is under way (its lists slowed by 1 s of latency
/// each way): the operator ends it at once, exits within `--shutdown-timeout`, and writes nothing.
#[tokio::test]
async fn sigterm_during_a_large_restore_exits_promptly_and_writes_nothing() -> Result<()> {
    const SERIES: usize = 6_000;
    let client = client().await?;
    let ns = TestNamespace::new(&client, "restore-term").await?;
    series_objects(&client, &ns.name, SERIES).await?;
    let (proxy, kc) = proxied(&ns.name).await?;
    proxy.set_latency(Duration::from_secs(1));
    let identity = format!("{}-op", ns.name);
    let mut op = OPERATOR.spawn(
        &kc,
        &ns.name,
        &[
            "--namespace",
            &ns.name,
            "--instance",
            &identity,
            "--shutdown-timeout",
            "5s",
            // Every restored series is older than this: a restore that ran to its end would
            // finish (and write) all of them at once.
            "--finish-after",
            "5s",
            "--series-window",
            "5s",
        ],
    )?;
    let started = Instant::now();
    while logged_at(&op, "restoring own series objects").is_none() {
        if started.elapsed() > Duration::from_secs(60) || !op.alive() {
            bail!("the restore never started (log {})", op.log.display());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        logged_at(&op, "own series objects restored").is_none(),
        "the restore is still under way when the signal comes"
    );
    op.signal_term()?;
    let signalled = Utc::now();
    let term = Instant::now();
    let (status, _) = op
        .wait_exit(Duration::from_secs(5 + 3))?
        .context("no exit within --shutdown-timeout (5 s) and 3 s of slack")?;
    println!("exited {:?} after SIGTERM: {status}", term.elapsed());
    assert!(status.success(), "{status}");
    let writes: Vec<_> = audit::writes(kubeconfig(), &ns.name)?
        .into_iter()
        .filter(|w| w.user_agent.contains(&audit::agent_of(&identity)))
        .collect();
    assert!(
        writes.iter().all(|w| w.received < signalled),
        "writes after SIGTERM: {writes:?}"
    );
    ns.cleanup().await
}
