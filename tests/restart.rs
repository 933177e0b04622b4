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
