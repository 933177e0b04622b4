//! SIGKILL at random moments of a storm (Restart): after each restart the operator rebuilds its
//! state from its own series objects and the raw events; in the end every key has exactly one series
//! object, Finished, with exactly the occurrences the raw events hold.

use crate::OPERATOR;
use crate::support::*;
use anyhow::{Result, ensure};
use event_series_test_support::cluster::{Dedicated, TestNamespace, client_for};
use std::time::{Duration, Instant};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "slow: run by just faults"]
async fn kill_9_at_random_points_of_a_storm_keeps_one_exact_object_per_loop() -> Result<()> {
    let kills = env_secs("FAULTS_KILLS", 20) as usize;
    let storm = Duration::from_secs(env_secs("FAULTS_KILL9_STORM_SECONDS", 200));
    let mut rng = Rng::from_env("kill9");
    let cluster = Dedicated::start("faults-kill9", &[])?;
    let client = client_for(&cluster.kubeconfig).await?;
    let ns = TestNamespace::new(&client, "faults-kill9").await?;
    let kubeconfig = cluster.kubeconfig.clone();
    // finishAfter and seriesWindow far longer than any restart gap: a loop never ends while the
    // operator is down, so each loop must end as one object. Heartbeats every 3 s: many writes in
    // flight when the kill comes.
    let flags = [
        "--namespace",
        &ns.name,
        "--finish-after",
        "60s",
        "--series-window",
        "60s",
        "--heartbeat-interval",
        "3s",
    ];
    let log = ns.name.clone();
    let mut op = launch_op(&kubeconfig, &log, &flags).await?;

    let started = Instant::now();
    let stop = started + storm;
    // The kubelet's own recorder with 12 crash loops, and 30 loops written straight to the API.
    let Storm {
        emitter,
        loops,
        stats,
    } = Storm::start(&client, &kubeconfig, &ns.name, 12, storm, stop, &mut rng)?;

    // The kills: one in each of `kills` equal slices of the storm, at a random point of the slice.
    // After a kill the operator stays down 0–3 s; one restart in four is killed again while it
    // recovers (before it is ready).
    let slice = storm.saturating_sub(Duration::from_secs(10)) / kills as u32;
    let (mut done, mut in_recovery) = (0, 0);
    for i in 0..kills {
        let at = started + slice * i as u32 + rng.millis(0, slice.as_millis() as u64);
        tokio::time::sleep_until(at.max(Instant::now()).into()).await;
        op.kill9()?;
        done += 1;
        tokio::time::sleep(rng.millis(0, 3000)).await;
        if rng.next().is_multiple_of(4) {
            let early = OPERATOR.spawn(&kubeconfig, &log, &flags)?;
            tokio::time::sleep(rng.millis(50, 1500)).await;
            early.kill9()?;
            in_recovery += 1;
        }
        op = launch_op(&kubeconfig, &log, &flags).await?;
        println!(
            "kill {} at {:>5.1}s",
            i + 1,
            (Instant::now() - started).as_secs_f64()
        );
    }

    let truth = storm_truth(loops, emitter, &client, &ns.name).await?;

    let outcome = settle(&client, &ns.name, &truth, Duration::from_secs(400)).await?;
    println!(
        "kill -9: {done} kills ({in_recovery} more during recovery), {} keys, {} occurrences ({}), \
         {} series objects, split keys {:?}, wrong counts {:?}, lost {}",
        outcome.keys,
        outcome.occurrences,
        stats.summary(),
        outcome.objects,
        outcome.split,
        outcome.wrong,
        outcome.lost()
    );
    ensure!(
        outcome.wrong.is_empty(),
        "counts differ: {:?}",
        outcome.wrong
    );
    ensure!(
        outcome.split.is_empty(),
        "keys with more than one object: {:?}",
        outcome.split
    );
    ensure!(outcome.objects == outcome.keys);
    ensure!(op.alive(), "the last operator still runs");
    drop(op);
    ns.cleanup().await
}
