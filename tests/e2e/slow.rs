//! A slow, compacting control plane (docs/FAULTS.md, Slow control planes): a leader one second away
//! keeps the Lease, a restore outlives its continue tokens, a restore that cannot progress hands the
//! Lease over, and edits of a dead holder's Lease do not keep it alive.

use crate::OPERATOR;
use crate::network::{exact, holder, logged_at, proxied, series_objects, storm, wait_leading};
use anyhow::{Context, Result, bail};
use event_series_test_support::cluster::{
    Dedicated, TestNamespace, apiserver_addr, client, client_for, ensure_namespace, kubeconfig,
    kubeconfig_through, operator_cluster_rules, operator_rules, series, service_account_kubeconfig,
};
use event_series_test_support::proxy::FaultProxy;
use event_series_test_support::repo_root;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams, PostParams};
use std::time::{Duration, Instant};

/// The leader-election flags of a replica named `id` in `ns`, with client-go's default timings.
pub(crate) fn replica(ns: &str, id: &str, extra: &[&str]) -> Vec<String> {
    let mut args: Vec<String> = [
        "--namespace",
        ns,
        "--leader-elect",
        "--lease-namespace",
        ns,
        "--instance",
        id,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    args.extend(extra.iter().map(|s| s.to_string()));
    args
}

fn strs(args: &[String]) -> Vec<&str> {
    args.iter().map(String::as_str).collect()
}

/// Starts replica `a` with `flags` through `kubeconfig` and waits up to `within` until it leads.
async fn leader(
    ns: &str,
    kubeconfig: &std::path::Path,
    flags: &[&str],
    leases: &Api<Lease>,
    within: Duration,
) -> Result<event_series_test_support::process::Operator> {
    let mut a = OPERATOR.spawn(
        kubeconfig,
        &format!("{ns}-a"),
        &strs(&replica(ns, "a", flags)),
    )?;
    wait_leading(leases, "a", within, Some(&mut a)).await?;
    Ok(a)
}

async fn transitions(leases: &Api<Lease>) -> Option<i32> {
    leases
        .get_opt("event-series")
        .await
        .ok()??
        .spec?
        .lease_transitions
}

/// Operations: a control plane answering in seconds keeps one leader. Two replicas, each behind
/// 1 s of latency each way (a GET and a PUT of the Lease take 4 s, a fresh TLS connection more),
/// client-go's default timings, for three minutes of crash loops: one holder throughout, no exit, no
/// transition, every loop counted exactly in one object. Before renewal rounds had the renew
/// deadline (3.33 s a round), each replica lost the Lease within seconds and exited 1.
#[tokio::test]
async fn a_control_plane_one_second_away_keeps_one_leader() -> Result<()> {
    let client = client().await?;
    let ns = TestNamespace::new(&client, "slow-lease").await?;
    let (proxy_a, kc_a) = proxied(&format!("{}-a", ns.name)).await?;
    let (proxy_b, kc_b) = proxied(&format!("{}-b", ns.name)).await?;
    proxy_a.set_latency(Duration::from_secs(1));
    proxy_b.set_latency(Duration::from_secs(1));
    let flags = [
        "--finish-after",
        "15s",
        "--series-window",
        "15s",
        "--heartbeat-interval",
        "10s",
        "--watch-timeout",
        "20s",
    ];
    let leases: Api<Lease> = Api::namespaced(client.clone(), &ns.name);
    let mut a = leader(&ns.name, &kc_a, &flags, &leases, Duration::from_secs(60)).await?;
    let before = transitions(&leases).await;
    let mut b = OPERATOR.spawn(
        &kc_b,
        &format!("{}-b", ns.name),
        &strs(&replica(&ns.name, "b", &flags)),
    )?;
    let loops = storm(&ns.name, &ns.name, 3, 150, 7)?;
    let watched = Instant::now();
    while watched.elapsed() < Duration::from_secs(180) {
        let now = holder(&leases).await.map(|h| h.0);
        assert_eq!(now.as_deref(), Some("a"), "one holder throughout");
        assert!(a.alive(), "the leader exited (log {})", a.log.display());
        assert!(b.alive(), "the standby exited (log {})", b.log.display());
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    assert_eq!(transitions(&leases).await, before, "no transition");
    assert!(logged_at(&a, "leadership lost").is_none());
    let truth = loops.wait()?;
    exact(&client, &ns.name, &truth).await?;
    println!(
        "a held the lease for 3 min at 1 s each way; lease requests of a: {} timeouts; proxy a {:?}",
        a.get("/metrics")
            .map(|(_, m)| m.lines().filter(|l| l.contains("code=\"timeout\"")).count())
            .unwrap_or(0),
        proxy_a.stats()
    );
    drop((a, b));
    ns.cleanup().await
}

/// Operations: a restore survives expired continue tokens. A cluster whose etcd is compacted
/// every 5 s while other writes go on; 400 stored series objects listed one per page through 50 ms
/// of latency each way, so the list outlives its snapshot many times over. The restore completes
/// (each expired token counted in `restore_tokens_expired_total`), restores every series once, and
/// finishes or rewrites none. Before, the restore retried the expired token forever and never
/// became ready.
#[tokio::test]
async fn a_restore_outlives_its_continue_tokens() -> Result<()> {
    const SERIES: usize = 400;
    let cluster = Dedicated::start(
        "compaction",
        &[("APISERVER_EXTRA_ARGS", "--etcd-compaction-interval=5s")],
    )?;
    let client = client_for(&cluster.kubeconfig).await?;
    let ns = "restore-compacted";
    ensure_namespace(&client, ns).await?;
    series_objects(&client, ns, SERIES).await?;
    let stored = series(&client, ns).await?;
    anyhow::ensure!(stored.len() == SERIES, "{} stored", stored.len());
    let proxy = FaultProxy::start(apiserver_addr(&cluster.kubeconfig)?).await?;
    proxy.set_latency(Duration::from_millis(50));
    let kc = kubeconfig_through(
        &cluster.kubeconfig,
        proxy.addr(),
        &repo_root().join("target/e2e-logs/compaction.proxy.kubeconfig"),
    )?;
    // Writes elsewhere move etcd's revision on, so that each compaction removes the list's snapshot.
    let churn = tokio::spawn(churn(client.clone(), ns.to_owned()));
    // A log of this run's own: the fixed names of this test's cluster and namespace would otherwise
    // find an earlier run's log lines.
    let log = format!("restore-compacted-{}", std::process::id());
    let op = OPERATOR.spawn(&kc, &log, &["--namespace", ns, "--list-page-bytes", "1"])?;
    let started = Instant::now();
    while logged_at(&op, "own series objects restored").is_none() {
        if started.elapsed() > Duration::from_secs(300) {
            churn.abort();
            bail!(
                "the restore did not complete in 5 min ({} tokens expired; log {})",
                op.metric("event_series_restore_tokens_expired_total"),
                op.log.display()
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    churn.abort();
    let expired = op.metric("event_series_restore_tokens_expired_total");
    println!(
        "restored in {:?}, {expired} continue tokens expired on the way",
        started.elapsed()
    );
    assert!(expired >= 1.0, "the test must make a token expire");
    assert_eq!(op.metric("event_series_series_active"), SERIES as f64);
    tokio::time::sleep(Duration::from_secs(3)).await;
    let after = series(&client, ns).await?;
    let ongoing = after
        .iter()
        .filter(|e| crate::operator::state(e) == "Ongoing")
        .count();
    assert_eq!(ongoing, SERIES, "nothing finished by a page seen twice");
    let count = |evs: &[k8s_openapi::api::events::v1::Event]| {
        evs.iter().map(crate::operator::count).sum::<u64>()
    };
    assert_eq!(count(&after), count(&stored), "no count changed");
    drop(op);
    Ok(())
}

/// Input: the first list of raw events outlives its continue tokens too. 150 stored raw events
/// (each already a series) listed one per page through 50 ms of latency each way, on a cluster whose
/// etcd is compacted every 5 s while other writes go on: every token expires many times over. The
/// list goes on from the token the API server offers, so the operator becomes ready with every
/// series, each counted once. Before, each expired token started the list over, which never ended
/// (at 10^6 stored events the same happens with the default 5-minute compaction).
#[tokio::test]
async fn the_first_list_of_raw_events_outlives_its_continue_tokens() -> Result<()> {
    const RAW: u64 = 150;
    let cluster = Dedicated::start(
        "raw-compaction",
        &[("APISERVER_EXTRA_ARGS", "--etcd-compaction-interval=5s")],
    )?;
    let client = client_for(&cluster.kubeconfig).await?;
    // Each a legacy event already counting 2 recent occurrences, in namespace bench-0.
    event_series_test_support::load::Load::new(client.clone(), 16)
        .seed(RAW, 0, 1)
        .await?;
    let proxy = FaultProxy::start(apiserver_addr(&cluster.kubeconfig)?).await?;
    proxy.set_latency(Duration::from_millis(50));
    let kc = kubeconfig_through(
        &cluster.kubeconfig,
        proxy.addr(),
        &repo_root().join("target/e2e-logs/raw-compaction.proxy.kubeconfig"),
    )?;
    let churn = tokio::spawn(churn(client.clone(), "bench-0".to_owned()));
    let log = format!("raw-compacted-{}", std::process::id());
    let mut op = OPERATOR.spawn(
        &kc,
        &log,
        &["--namespace", "bench-0", "--list-page-bytes", "1"],
    )?;
    let started = Instant::now();
    while logged_at(&op, "recovered; watching").is_none() {
        if started.elapsed() > Duration::from_secs(300) || !op.alive() {
            churn.abort();
            bail!(
                "the first list did not complete in 5 min (log {})",
                op.log.display()
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    churn.abort();
    println!("recovered in {:?}", started.elapsed());
    assert!(
        op.log_text().contains("continue token expired"),
        "the test must make a token expire (log {})",
        op.log.display()
    );
    assert_eq!(op.metric("event_series_series_active"), RAW as f64);
    assert_eq!(
        op.metric("event_series_occurrences_total"),
        2.0 * RAW as f64
    );
    drop(op);
    Ok(())
}

/// Input: no list loses an occurrence. 1,500 stored raw events listed one per page through 50 ms of
/// latency each way, on a cluster whose etcd is compacted every 20 s while other writes go on, so
/// the list outlives its continue tokens. A loop of 6 occurrences, whose series a first operator
/// wrote, is listed on the first page by the operator restarted after it, goes on during the list
/// (4 more, 20 s apart) and then stops: its one series ends Finished with 10.
/// Before, the list went on at the current resourceVersion from the token the API server offered
/// and the watch started after it: the 4 were never seen, and the series ended Finished with 6.
#[tokio::test]
async fn a_loop_that_goes_on_during_a_list_outliving_its_tokens_keeps_every_occurrence()
-> Result<()> {
    use event_series_test_support::raw::{Occurrences, app_container, create_all, kubelet};
    const FILLER: usize = 1_500;
    let cluster = Dedicated::start(
        "list-loss",
        &[("APISERVER_EXTRA_ARGS", "--etcd-compaction-interval=20s")],
    )?;
    let client = client_for(&cluster.kubeconfig).await?;
    let ns = "list-loss";
    ensure_namespace(&client, ns).await?;
    let api: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(client.clone(), ns);
    // One occurrence each: no series, no write; listed after the loop (names sort after it).
    let filler = (0..FILLER).map(|i| {
        let pod = format!("f-{i:05}");
        let regarding = app_container(ns, &pod, format!("uid-{i}"));
        let seen = Occurrences::at(1, Timestamp::now());
        kubelet(
            ns,
            &format!("{pod}.raw"),
            regarding,
            "Pulled",
            "pulled".into(),
            seen,
        )
    });
    create_all(&api, filler, 16).await?;
    let now = Timestamp::now();
    let looping = kubelet(
        ns,
        "a-loop.raw",
        app_container(ns, "web", "uid-web".into()),
        "BackOff",
        "Back-off restarting failed container".into(),
        Occurrences {
            count: 6,
            first: now - Duration::from_secs(10),
            last: now,
        },
    );
    api.create(&PostParams::default(), &looping).await?;
    let flags = [
        "--namespace",
        ns,
        "--list-page-bytes",
        "1",
        "--finish-after",
        "60s",
        "--series-window",
        "60s",
    ];
    // A first operator writes the loop's series at 6; the one restarted after it lists slowly.
    let first_flags: Vec<&str> = flags[..2].iter().chain(&flags[4..]).copied().collect();
    let first_log = format!("list-loss-first-{}", std::process::id());
    let first = OPERATOR.launch(&cluster.kubeconfig, &first_log, &first_flags)?;
    crate::operator::wait_for_within(
        &client,
        ns,
        Duration::from_secs(30),
        "the loop's series at 6",
        |objs| objs.len() == 1 && crate::operator::count(&objs[0]) == 6,
    )
    .await?;
    first.kill9()?;
    let proxy = FaultProxy::start(apiserver_addr(&cluster.kubeconfig)?).await?;
    proxy.set_latency(Duration::from_millis(50));
    let kc = kubeconfig_through(
        &cluster.kubeconfig,
        proxy.addr(),
        &repo_root().join("target/e2e-logs/list-loss.proxy.kubeconfig"),
    )?;
    let churn = tokio::spawn(churn(client.clone(), ns.to_owned()));
    let log = format!("list-loss-{}", std::process::id());
    let mut op = OPERATOR.spawn(&kc, &log, &flags)?;
    let started = Instant::now();
    for n in 7..=10 {
        tokio::time::sleep(Duration::from_secs(20)).await;
        if logged_at(&op, "recovered; watching").is_some() {
            churn.abort();
            bail!(
                "the list ended before occurrence {n}: the test proves nothing (log {})",
                op.log.display()
            );
        }
        api.patch(
            "a-loop.raw",
            &PatchParams::default(),
            &event_series_test_support::raw::occurrence_patch(n),
        )
        .await?;
    }
    while logged_at(&op, "recovered; watching").is_none() {
        if started.elapsed() > Duration::from_secs(600) || !op.alive() {
            churn.abort();
            bail!(
                "the list did not complete in 10 min (log {})",
                op.log.display()
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    churn.abort();
    let listed = started.elapsed();
    assert!(
        op.log_text().contains("continue token expired"),
        "the test must make a token expire (log {})",
        op.log.display()
    );
    // Quiet once the loop stops, the scope's watch may then resume from a version etcd has
    // compacted (no bookmarks without an events watch cache): a relist, one object a page as slow
    // as the first list, may come before the finish is proven.
    let objects = crate::operator::wait_for_within(
        &client,
        ns,
        Duration::from_secs(420),
        "the loop's series Finished",
        |objs| !objs.is_empty() && objs.iter().all(|e| crate::operator::state(e) == "Finished"),
    )
    .await?;
    let counts: Vec<u64> = objects.iter().map(crate::operator::count).collect();
    println!(
        "listed in {listed:?} with continue tokens expiring; the loop's series: {counts:?} (10 expected)"
    );
    assert_eq!(counts, [10], "one Finished series with every occurrence");
    drop(op);
    Ok(())
}

/// Updates a ConfigMap in `ns` every 100 ms, until aborted.
async fn churn(client: kube::Client, ns: String) {
    let api: Api<ConfigMap> = Api::namespaced(client, &ns);
    let mut i = 0u64;
    loop {
        i += 1;
        let cm = serde_json::json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "churn"}, "data": {"i": i.to_string()}
        });
        let _ = api
            .patch(
                "churn",
                &PatchParams::apply("churn").force(),
                &Patch::Apply(&cm),
            )
            .await;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Operations: a restore that cannot progress for `--restore-timeout` gives up the Lease and
/// exits non-zero, and the standby leads. Replica a may not list series objects (its role lacks
/// `list` on events.k8s.io events), so its restore never gets a page; it restores while it stands
/// by, takes the Lease (a new install's first leader waits out a lease duration, 15 s) and gives it
/// up at the restore timeout after its start. Before, it retried forever while renewing the Lease,
/// and the standby never led.
#[tokio::test]
async fn a_restore_that_cannot_progress_hands_the_lease_over() -> Result<()> {
    use k8s_openapi::api::rbac::v1::PolicyRule;
    let client = client().await?;
    let ns = TestNamespace::new(&client, "stuck-restore").await?;
    let mut rules: Vec<PolicyRule> = operator_rules()
        .into_iter()
        .filter(|r| r.api_groups.as_deref() != Some(&["events.k8s.io".to_owned()]))
        .collect();
    rules.push(PolicyRule {
        api_groups: Some(vec!["events.k8s.io".into()]),
        resources: Some(vec!["events".into()]),
        verbs: vec!["create".into(), "patch".into()],
        ..Default::default()
    });
    rules.push(PolicyRule {
        api_groups: Some(vec!["coordination.k8s.io".into()]),
        resources: Some(vec!["leases".into()]),
        verbs: vec!["get".into(), "create".into(), "update".into()],
        ..Default::default()
    });
    let kc_a = service_account_kubeconfig(
        &client,
        kubeconfig(),
        &ns.name,
        "no-list",
        rules,
        operator_cluster_rules(),
    )
    .await?;
    let leases: Api<Lease> = Api::namespaced(client.clone(), &ns.name);
    // Alone and never warm, `a` takes the Lease cold: after the lease duration a missing Lease is
    // waited out, and another it leaves to a warm replica (15 s each).
    let mut a = leader(
        &ns.name,
        &kc_a,
        &["--restore-timeout", "45s"],
        &leases,
        Duration::from_secs(42),
    )
    .await?;
    let leading = Instant::now();
    let b = OPERATOR.spawn(
        kubeconfig(),
        &format!("{}-b", ns.name),
        &strs(&replica(&ns.name, "b", &[])),
    )?;
    let (status, _) = a
        .wait_exit(Duration::from_secs(60))?
        .context("a stuck restore did not end the process")?;
    assert!(!status.success(), "exits non-zero: {status}");
    assert!(
        a.log_text().contains("made no progress"),
        "says why (log {})",
        a.log.display()
    );
    let exited = Instant::now();
    wait_leading(&leases, "b", Duration::from_secs(10), None).await?;
    println!(
        "a exited ({status}) {:?} after taking the lease; b led {:?} later",
        exited - leading,
        exited.elapsed()
    );
    drop(b);
    ns.cleanup().await
}

/// Operations: a standby times the holder by its election record. A Lease held by a replica
/// that is gone, whose annotations another client rewrites every second (new resourceVersions,
/// the same record): the standby leads within the lease duration plus the retry period. Before, each
/// edit restarted its wait, and it never led.
#[tokio::test]
async fn edits_of_a_dead_holders_lease_do_not_keep_it_alive() -> Result<()> {
    let client = client().await?;
    let ns = TestNamespace::new(&client, "lease-edits").await?;
    let leases: Api<Lease> = Api::namespaced(client.clone(), &ns.name);
    let now = Timestamp::now();
    leases
        .create(
            &PostParams::default(),
            &Lease {
                metadata: ObjectMeta {
                    name: Some("event-series".into()),
                    ..ObjectMeta::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some("gone".into()),
                    lease_duration_seconds: Some(15),
                    acquire_time: Some(MicroTime(now)),
                    renew_time: Some(MicroTime(now)),
                    lease_transitions: Some(0),
                    ..LeaseSpec::default()
                }),
            },
        )
        .await?;
    let editor = {
        let leases = leases.clone();
        tokio::spawn(async move {
            for i in 0u64.. {
                let patch =
                    serde_json::json!({"metadata": {"annotations": {"edited": i.to_string()}}});
                let _ = leases
                    .patch(
                        "event-series",
                        &PatchParams::default(),
                        &Patch::Merge(&patch),
                    )
                    .await;
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        })
    };
    let b = OPERATOR.spawn(
        kubeconfig(),
        &format!("{}-b", ns.name),
        &strs(&replica(&ns.name, "b", &[])),
    )?;
    let started = Instant::now();
    // The lease duration (15 s) from b's first read, a jittered retry period (2.4 s) and slack.
    let bound = Duration::from_secs(15 + 3 + 5);
    while holder(&leases).await.map(|h| h.0).as_deref() != Some("b") {
        if started.elapsed() > bound {
            editor.abort();
            bail!(
                "b did not lead within {bound:?} while the Lease's annotations changed every second"
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    editor.abort();
    println!("b led {:?} after it started", started.elapsed());
    drop(b);
    ns.cleanup().await
}

/// One process of a replica: its identity, and when it led (from its log) and stopped.
struct Incarnation {
    identity: &'static str,
    op: event_series_test_support::process::Operator,
    exited: Option<chrono::DateTime<chrono::Utc>>,
}

/// Operations: at 2.5 s of latency each way a leader may lose the Lease, but the fence holds
/// and the pair recovers by itself. Two replicas, each behind its own proxy; a replica that exits is
/// started again at once (as its kubelet would). For 100 s, a new crash loop of two pods every 20 s
/// (occurrences that reach no leader within `seriesWindow` are dropped as stale, by design). Then the
/// latency goes, and a last storm must end exactly, one object per loop. Checked on the apiserver's
/// audit log: after each new leader's first write, no write of the previous leader until it leads
/// again.
#[tokio::test]
async fn at_two_and_a_half_seconds_the_fence_holds_and_the_pair_recovers() -> Result<()> {
    use chrono::{DateTime, Utc};
    use event_series_test_support::audit;
    let client = client().await?;
    let ns = TestNamespace::new(&client, "slower-lease").await?;
    let (proxy_a, kc_a) = proxied(&format!("{}-a", ns.name)).await?;
    let (proxy_b, kc_b) = proxied(&format!("{}-b", ns.name)).await?;
    for p in [&proxy_a, &proxy_b] {
        p.set_latency(Duration::from_millis(2500));
    }
    let flags = [
        "--finish-after",
        "20s",
        "--series-window",
        "20s",
        "--heartbeat-interval",
        "5s",
        "--watch-timeout",
        "20s",
    ];
    let mut runs = 0u32;
    let mut spawn = |identity: &'static str| -> Result<Incarnation> {
        runs += 1;
        let kc = if identity == "a" { &kc_a } else { &kc_b };
        let log = format!("{}-{identity}-{runs}", ns.name);
        let op = OPERATOR.spawn(kc, &log, &strs(&replica(&ns.name, identity, &flags)))?;
        Ok(Incarnation {
            identity,
            op,
            exited: None,
        })
    };
    let mut all = vec![spawn("a")?, spawn("b")?];
    let started = Instant::now();
    let (mut storms, mut last) = (Vec::new(), None::<crate::network::PerLoop>);
    let mut healed: Option<Instant> = None;
    while healed.is_none_or(|h| h.elapsed() < Duration::from_secs(60)) {
        let elapsed = started.elapsed().as_secs();
        if healed.is_none() && elapsed < 100 && storms.len() < (elapsed / 20 + 1) as usize {
            let seed = 100 + storms.len() as u32;
            storms.push(storm(
                &ns.name,
                &format!("{}-{seed}", ns.name),
                2,
                10,
                seed,
            )?);
        }
        if healed.is_none() && elapsed >= 100 {
            proxy_a.set_latency(Duration::ZERO);
            proxy_b.set_latency(Duration::ZERO);
            healed = Some(Instant::now());
        }
        if let Some(h) = healed
            && last.is_none()
            && h.elapsed() > Duration::from_secs(20)
        {
            let seed = 999;
            last = Some(storm(&ns.name, &format!("{}-{seed}", ns.name), 3, 15, seed)?.wait()?);
        }
        let mut respawn = Vec::new();
        for inc in all.iter_mut().filter(|i| i.exited.is_none()) {
            if let Some((status, at)) = inc.op.wait_exit(Duration::ZERO)? {
                println!(
                    "{} exited ({status}) after {:?}",
                    inc.identity,
                    started.elapsed()
                );
                inc.exited = Some(at.into());
                respawn.push(inc.identity);
            }
        }
        for identity in respawn {
            all.push(spawn(identity)?);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    for s in storms {
        s.wait()?;
    }
    // The loops after the latency went: exact, one object each, Finished.
    let truth = last.context("the last storm ran")?;
    let objects = crate::operator::wait_for_within(
        &client,
        &ns.name,
        Duration::from_secs(120),
        "the last storm's loops Finished with their exact counts",
        |objs| {
            let (counts, _) = crate::network::tally(objs);
            truth.iter().all(|(k, n)| counts.get(k) == Some(n))
                && objs.iter().all(|e| crate::operator::state(e) == "Finished")
        },
    )
    .await?;
    let (_, per_loop) = crate::network::tally(&objects);
    assert!(
        truth.keys().all(|k| per_loop.get(k) == Some(&1)),
        "one object per loop"
    );
    // Leadership terms, in the order they began.
    let mut terms: Vec<(DateTime<Utc>, &'static str)> = all
        .iter()
        .filter_map(|i| Some((logged_at(&i.op, "lease acquired")?, i.identity)))
        .collect();
    terms.sort();
    let writes: Vec<audit::Write> = audit::writes(kubeconfig(), &ns.name)?
        .into_iter()
        .filter(|w| w.resource == "events")
        .collect();
    let by = |id: &'static str| {
        writes
            .iter()
            .filter(move |w| w.user_agent.contains(&audit::agent_of(id)))
    };
    let mut handovers = 0;
    for (k, (began, leader)) in terms.iter().enumerate().skip(1) {
        let (_, previous) = terms[k - 1];
        if previous == *leader {
            continue;
        }
        let Some(first) = by(leader).map(|w| w.received).filter(|t| t >= began).min() else {
            continue;
        };
        handovers += 1;
        let back = terms[k + 1..]
            .iter()
            .find(|(_, id)| *id == previous)
            .map(|(t, _)| *t);
        let late: Vec<_> = by(previous)
            .filter(|w| w.received > first && back.is_none_or(|b| w.received < b))
            .collect();
        assert!(
            late.is_empty(),
            "writes of {previous} after {leader}'s first write at {first}: {late:?}"
        );
    }
    let exits = all.iter().filter(|i| i.exited.is_some()).count();
    println!(
        "{} leadership terms ({handovers} between replicas), {exits} exits, {} series writes; no write of a leader after the next one's first",
        terms.len(),
        writes.len()
    );
    assert!(!writes.is_empty());
    drop(all);
    ns.cleanup().await
}

/// Operations: a leader releases the Lease on shutdown only when no request of its is still
/// unanswered. The leader's connections turn slow (3 s each way) 2.5 s before SIGTERM, while it
/// heartbeats every second or two: writes are in flight when `--shutdown-timeout` (1 s) cuts them. It
/// must not release the Lease, so the standby waits out the lease duration from the leader's last
/// renewal; the audit log shows no write of the old leader after the new leader's first, and every
/// loop ends exactly in one object. Before, the Lease was released and the standby led at once.
#[tokio::test]
async fn a_leader_with_writes_unanswered_at_shutdown_lets_its_lease_expire() -> Result<()> {
    use chrono::Utc;
    use event_series_test_support::audit;
    let client = client().await?;
    let ns = TestNamespace::new(&client, "unanswered").await?;
    let (proxy_a, kc_a) = proxied(&format!("{}-a", ns.name)).await?;
    let flags = [
        "--finish-after",
        "20s",
        "--series-window",
        "20s",
        "--heartbeat-interval",
        "1s",
        "--shutdown-timeout",
        "1s",
    ];
    let leases: Api<Lease> = Api::namespaced(client.clone(), &ns.name);
    let mut a = leader(&ns.name, &kc_a, &flags, &leases, Duration::from_secs(30)).await?;
    let b = OPERATOR.spawn(
        kubeconfig(),
        &format!("{}-b", ns.name),
        &strs(&replica(&ns.name, "b", &flags)),
    )?;
    // One occurrence per second per pod: the legacy recorder's burst of 25 lasts 25 s, so the loops,
    // and a heartbeat of each series every second, go on past the signal.
    let loops = event_series_test_support::emitter::Emitter::spawn(
        kubeconfig(),
        &ns.name,
        "target/e2e-logs",
        &ns.name,
        &[
            "--recorder",
            "legacy",
            "--scenario",
            "crashloop",
            "--pods",
            "3",
            "--rate",
            "1",
            "--duration",
            "30s",
            "--seed",
            "5",
        ],
    )?;
    crate::operator::wait_for(&client, &ns.name, "the loops' series", |o| o.len() == 3).await?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    // Every write sent from now on takes 6 s to be answered, and the series heartbeat every second
    // or two: the writes of the last 2.5 s are still in flight when the 1 s drain after SIGTERM ends.
    proxy_a.set_latency(Duration::from_secs(3));
    tokio::time::sleep(Duration::from_millis(2500)).await;
    a.signal_term()?;
    let signalled = Utc::now();
    let (status, _) = a
        .wait_exit(Duration::from_secs(20))?
        .context("a did not exit after SIGTERM")?;
    assert!(status.success(), "a exits 0 on SIGTERM: {status}");
    // Not released: still held by a, as of its last renewal.
    let spec = leases
        .get("event-series")
        .await?
        .spec
        .context("a Lease spec")?;
    let held_by = spec.holder_identity.unwrap_or_default();
    assert_eq!(
        held_by, "a",
        "the Lease was handed over (holder {held_by:?}) with writes of a in flight"
    );
    let renewed = spec
        .renew_time
        .and_then(|t| chrono::DateTime::<Utc>::from_timestamp_micros(t.0.as_microsecond()))
        .context("a renewTime")?;
    assert!(
        a.log_text().contains("left to expire"),
        "a says why it keeps the Lease (log {})",
        a.log.display()
    );
    let acquired = loop {
        if let Some((who, at)) = holder(&leases).await
            && who == "b"
        {
            break at.context("an acquireTime")?;
        }
        if (Utc::now() - signalled).num_seconds() > 40 {
            bail!("b never took the lease");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    println!(
        "b acquired the lease {} ms after a's SIGTERM, {} ms after a's last renewal",
        (acquired - signalled).num_milliseconds(),
        (acquired - renewed).num_milliseconds()
    );
    // The standby waits out the lease duration (15 s) from the last renewal it saw, on its own
    // clock; the Lease's times have microseconds of this machine's clock.
    assert!(
        acquired - renewed >= chrono::TimeDelta::seconds(14),
        "the standby led before a's Lease expired"
    );
    let truth = loops.wait()?;
    exact(&client, &ns.name, &truth).await?;
    let writes: Vec<audit::Write> = audit::writes(kubeconfig(), &ns.name)?
        .into_iter()
        .filter(|w| w.resource == "events")
        .collect();
    let first_b = writes
        .iter()
        .filter(|w| w.user_agent.contains(&audit::agent_of("b")))
        .map(|w| w.received)
        .min()
        .context("b wrote")?;
    let late: Vec<_> = writes
        .iter()
        .filter(|w| w.user_agent.contains(&audit::agent_of("a")) && w.received > first_b)
        .collect();
    assert!(late.is_empty(), "writes of a after b's first: {late:?}");
    drop(b);
    ns.cleanup().await
}

/// Operations: a leader stopping releases its Lease even when a renewal it had on its way
/// landed after the election stopped (the Lease one version further, still its own). Before, the
/// release was refused with a conflict (a full e2e run logged `releasing the lease failed ...
/// Conflict` and `a_restore_that_cannot_progress_hands_the_lease_over` failed) and the standby
/// waited out the lease duration. A Lease someone else took in between is left as it is.
#[tokio::test]
async fn a_release_after_a_late_renewal_still_releases_the_lease() -> Result<()> {
    use event_series::leader::{LeaseConfig, elector::Timings, release_lease};
    let client = client().await?;
    let ns = TestNamespace::new(&client, "late-renewal").await?;
    let leases: Api<Lease> = Api::namespaced(client.clone(), &ns.name);
    let held_by = |holder: &str| {
        let now = Timestamp::now();
        Lease {
            metadata: ObjectMeta {
                name: Some("event-series".into()),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(holder.into()),
                lease_duration_seconds: Some(15),
                acquire_time: Some(MicroTime(now)),
                renew_time: Some(MicroTime(now)),
                lease_transitions: Some(3),
                ..LeaseSpec::default()
            }),
        }
    };
    let config = LeaseConfig {
        name: "event-series".into(),
        namespace: ns.name.clone(),
        identity: "a".into(),
        timings: Timings::default(),
        request_timeout: Duration::from_secs(10),
    };
    let holder_now = || async {
        let lease = leases.get("event-series").await?;
        anyhow::Ok(
            lease
                .spec
                .and_then(|s| s.holder_identity)
                .unwrap_or_default(),
        )
    };
    // a renews at `known` (what its elector last saw); the renewal it cut short lands after.
    let known = leases.create(&PostParams::default(), &held_by("a")).await?;
    let known_rv = known
        .metadata
        .resource_version
        .clone()
        .context("no version")?;
    let mut late = held_by("a");
    late.metadata.resource_version = Some(known_rv.clone());
    leases
        .replace("event-series", &PostParams::default(), &late)
        .await?;
    assert!(
        release_lease(&leases, &config, known_rv, 3).await?,
        "a's own Lease was not released"
    );
    assert_eq!(holder_now().await?, "", "the Lease still has a holder");
    // b took it meanwhile: a's release, from the version a knew, leaves it to b.
    let free = leases.get("event-series").await?;
    let mut taken = held_by("b");
    taken.metadata.resource_version = free.metadata.resource_version.clone();
    leases
        .replace("event-series", &PostParams::default(), &taken)
        .await?;
    let stale = free.metadata.resource_version.context("no version")?;
    assert!(!release_lease(&leases, &config, stale, 3).await?);
    assert_eq!(holder_now().await?, "b");
    ns.cleanup().await
}
