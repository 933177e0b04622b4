//! Restart equivalence: an engine stopped at a random point and rebuilt from what the API server holds
//! (its series objects and the raw events) ends with the counts of one that never stopped.

use chrono::TimeDelta;
use event_series_test_support::sim::*;
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

/// Runs `ops` on an engine that never stops and on one restarted after each of `crash_points`
/// with a restart buffer of `budget` bytes: both end with the same counts and objects.
fn same_counts_after_restarts(
    ops: &[Op],
    crash_points: &std::collections::BTreeSet<usize>,
    budget: usize,
) -> Result<(), TestCaseError> {
    let mut steady = Sim::new(fast_settings());
    let mut crashing = Sim::new(fast_settings());
    crashing.restart_buffer = budget;
    for (i, op) in ops.iter().enumerate() {
        apply(&mut steady, op);
        apply(&mut crashing, op);
        if crash_points.contains(&i) {
            crashing.restart();
        }
    }
    for sim in [&mut steady, &mut crashing] {
        sim.advance(TimeDelta::seconds(120), TimeDelta::seconds(1));
    }
    prop_assert_eq!(steady.store.counts_by_key(), crashing.store.counts_by_key());
    prop_assert_eq!(steady.store.objects.len(), crashing.store.objects.len());
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn restarted_engine_reaches_the_same_counts(
        ops in prop::collection::vec(op_strategy(), 1..150),
        crash_points in prop::collection::btree_set(0usize..150, 1..4),
    ) {
        same_counts_after_restarts(&ops, &crash_points, usize::MAX)?;
    }

    /// The same with a restart buffer too small for the list (`--restart-buffer-bytes`): the raw
    /// events are replayed in parts, each in time order, as the operator does when 10^6 stored
    /// events do not fit its buffer. (Occurrences written on time, as above.)
    #[test]
    fn a_restart_buffer_replayed_in_parts_reaches_the_same_counts(
        ops in prop::collection::vec(op_strategy(), 1..150),
        crash_points in prop::collection::btree_set(0usize..150, 1..4),
        budget in 300usize..4_000,
    ) {
        same_counts_after_restarts(&ops, &crash_points, budget)?;
    }
}

/// An engine whose dormant records live 60 s (the event TTL in the operator), housekept every 10 s
/// as the controller does, with at most `raw_capacity` raw objects remembered.
fn short_retention(raw_capacity: usize) -> Sim {
    let config = event_series::engine::EngineConfig {
        dormant_retention: TimeDelta::seconds(60),
        raw_capacity,
        ..Default::default()
    };
    Sim::with_config(
        event_series::config::settings::PolicySet::uniform(fast_settings()),
        config,
    )
}

fn run_until(sim: &mut Sim, second: i64) {
    while sim.now < t0() + TimeDelta::seconds(second) {
        sim.advance(TimeDelta::seconds(1), TimeDelta::seconds(1));
        if (sim.now - t0()).num_seconds() % 10 == 0 {
            let now = sim.now;
            sim.engine.housekeep(now);
        }
    }
}

/// A lone occurrence written 15 s late (raw A), then raw B of the same key at 45 s, a restart, B
/// again at 48 s (a series), then `second` (a restart or a relist) while A is still stored. The
/// live engine recorded A at its arrival, so at the first restart its record is younger than the
/// retention; a restart that judged A by its own (earlier) timestamp dropped it, and the second
/// pass counted A again inside the series (3 instead of 2).
fn late_lone_then_series(sim: &mut Sim, restart: bool, second: fn(&mut Sim)) {
    sim.skew = -TimeDelta::seconds(15);
    sim.occur("ns", "k-a", "pod-k", "BackOff", false);
    sim.skew = TimeDelta::zero();
    run_until(sim, 45);
    sim.occur("ns", "k-b", "pod-k", "BackOff", false);
    run_until(sim, 46);
    if restart {
        sim.restart();
    }
    run_until(sim, 48);
    sim.occur("ns", "k-b", "pod-k", "BackOff", false);
    run_until(sim, 50);
    if restart {
        second(sim);
    }
    run_until(sim, 170);
}

#[test]
fn a_lone_occurrence_written_late_is_counted_once_across_two_restarts() {
    let (mut steady, mut crashing) = (short_retention(1000), short_retention(1000));
    late_lone_then_series(&mut steady, false, Sim::restart);
    late_lone_then_series(&mut crashing, true, Sim::restart);
    assert_eq!(steady.store.counts_by_key(), crashing.store.counts_by_key());
}

#[test]
fn a_lone_occurrence_written_late_is_counted_once_by_a_relist_after_a_restart() {
    // A raw-count table of one object: the relist finds A forgotten.
    let (mut steady, mut crashing) = (short_retention(1), short_retention(1));
    late_lone_then_series(&mut steady, false, Sim::relist);
    late_lone_then_series(&mut crashing, true, Sim::relist);
    assert_eq!(steady.store.counts_by_key(), crashing.store.counts_by_key());
}
