//! A 429 storm (Writes): 1,000 crash loops for 10 minutes against an apiserver whose inflight
//! limits are far below the load, priority and fairness off so that it answers 429 rather than queue.
//! The loops and the operator run as ServiceAccounts (the admin is exempt from the limits). Nothing
//! may be lost: each loop's series hold exactly the occurrences its raw event holds.
//!
//! Without fairness a loop's writer can be starved longer than `finishAfter`; its loop then rightly
//! becomes two series (Finished, then a new one), so counts are checked per loop, summed over its
//! objects, and splits are reported. `FAULTS_STORM_SECONDS` shortens the storm for a local check;
//! `just faults` runs the full 10 minutes.

use crate::support::*;
use anyhow::{Result, ensure};
use event_series_test_support::cluster::{
    Dedicated, TestNamespace, client_for, operator_cluster_rules, operator_rules,
    service_account_kubeconfig,
};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "slow: run by just faults"]
async fn a_ten_minute_429_storm_of_1000_keys_loses_nothing() -> Result<()> {
    let storm = Duration::from_secs(env_secs("FAULTS_STORM_SECONDS", 600));
    let keys = env_secs("FAULTS_STORM_KEYS", 1000) as usize;
    let period = Duration::from_secs(env_secs("FAULTS_STORM_PERIOD_SECONDS", 10));
    let mut rng = Rng::from_env("429 storm");
    let cluster = Dedicated::start(
        "faults-429",
        &[(
            "APISERVER_EXTRA_ARGS",
            "--enable-priority-and-fairness=false --max-requests-inflight=2 \
             --max-mutating-requests-inflight=1",
        )],
    )?;
    let admin = client_for(&cluster.kubeconfig).await?;
    let ns = TestNamespace::new(&admin, "faults-429").await?;
    let operator = service_account_kubeconfig(
        &admin,
        &cluster.kubeconfig,
        &ns.name,
        "event-series",
        operator_rules(),
        operator_cluster_rules(),
    )
    .await?;
    let emitter = service_account_kubeconfig(
        &admin,
        &cluster.kubeconfig,
        &ns.name,
        "emitter",
        vec![k8s_openapi::api::rbac::v1::PolicyRule {
            api_groups: Some(vec![String::new()]),
            resources: Some(vec!["events".into()]),
            verbs: vec!["create".into(), "patch".into()],
            ..Default::default()
        }],
        Vec::new(),
    )
    .await?;
    // A long window so that a starved loop rarely splits; a heartbeat every 30 s, so that 1,000
    // series keep the operator writing all the time.
    let op = launch_op(
        &operator,
        &ns.name,
        &[
            "--namespace",
            &ns.name,
            "--finish-after",
            "60s",
            "--series-window",
            "300s",
            "--heartbeat-interval",
            "30s",
        ],
    )
    .await?;
    // Several clients, so that 1,000 writers do not all queue behind one connection pool.
    let mut emitters = Vec::new();
    for _ in 0..10 {
        emitters.push(client_for(&emitter).await?);
    }
    let stats = Arc::new(WriteStats::default());
    let started = Instant::now();
    let mut loops = crash_loops(
        &emitters,
        &ns.name,
        "loop",
        keys,
        period,
        started + storm,
        &mut rng,
        &stats,
    );
    // Progress, every minute.
    let mut written = std::collections::BTreeMap::new();
    let mut next_report = Instant::now() + Duration::from_secs(60);
    loop {
        tokio::select! {
            done = loops.join_next() => match done {
                Some(done) => {
                    let (pod, count) = done??;
                    written.insert(pod, count);
                }
                None => break,
            },
            _ = tokio::time::sleep_until(next_report.into()) => {
                next_report += Duration::from_secs(60);
                println!(
                    "{:>4.0}s: loops: {}; operator: {} series active, 429s {}",
                    started.elapsed().as_secs_f64(),
                    stats.summary(),
                    op.metric("event_series_series_active"),
                    throttled(&op)
                );
            }
        }
    }
    let truth = raw_truth(&admin, &ns.name).await?;
    for (pod, count) in &written {
        ensure!(
            truth.get(&(pod.clone(), "BackOff".into())) == Some(count),
            "raw events of {pod}: {:?}, the loop wrote {count}",
            truth.get(&(pod.clone(), "BackOff".into()))
        );
    }
    let outcome = settle(&admin, &ns.name, &truth, Duration::from_secs(900)).await?;
    let operator_429 = throttled(&op);
    let metric = |name: &str| op.metric(name) as u64;
    let seen = metric("event_series_occurrences_total");
    let lone = metric("event_series_dropped_total{reason=\"lone\"}");
    let stale = metric("event_series_dropped_total{reason=\"stale\"}");
    let in_series = outcome.occurrences as i64 - outcome.lost();
    let over: i64 = outcome.wrong.values().filter(|d| **d > 0).sum();
    println!(
        "429 storm: {:.0}s, {} keys, {} occurrences; loops: {}; operator: saw {seen} occurrences, \
         {operator_429} writes answered 429, {} rejected; {} series objects ({} keys split by \
         starvation); {} keys exact, {} keys short by {} occurrences in all (lone {lone}, stale \
         {stale}: a writer starved past the windows), {over} counted twice",
        storm.as_secs_f64(),
        outcome.keys,
        outcome.occurrences,
        stats.summary(),
        op.metric("event_series_dropped_total{reason=\"rejected\"}"),
        outcome.objects,
        outcome.split.len(),
        outcome.keys - outcome.wrong.len(),
        outcome.wrong.len(),
        outcome.lost(),
    );
    ensure!(outcome.keys == keys, "every loop wrote its raw event");
    // Nothing lost: the operator saw every occurrence exactly once, and each one is either in a
    // series object or counted where the contract puts an occurrence that cannot join a series (a lone
    // occurrence after a loop was split by starvation; one that reached the API more than
    // seriesWindow after it happened). None is counted twice.
    ensure!(seen == outcome.occurrences, "the operator saw {seen}");
    ensure!(over == 0, "occurrences counted twice: {:?}", outcome.wrong);
    ensure!(
        in_series as u64 + lone + stale == outcome.occurrences,
        "unaccounted occurrences: {in_series} in series + {lone} lone + {stale} stale"
    );
    ensure!(operator_429 > 0.0, "the storm throttled the operator");
    ensure!(op.metric("event_series_dropped_total{reason=\"rejected\"}") == 0.0);
    drop(op);
    Ok(())
}

fn throttled(op: &Op) -> f64 {
    ["create", "patch", "update", "get"]
        .iter()
        .map(|v| {
            op.metric(&format!(
                "event_series_api_requests_total{{verb=\"{v}\",code=\"429\"}}"
            ))
        })
        .sum()
}
