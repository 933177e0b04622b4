//! Property tests over random interleavings of many keys and raw objects.

use chrono::TimeDelta;
use event_series::intent::WriteKind;
use event_series_test_support::sim::*;
use proptest::prelude::*;
use std::collections::{BTreeMap, BTreeSet};

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn counts_are_conserved_and_series_are_well_formed(ops in prop::collection::vec(op_strategy(), 1..150)) {
        let mut sim = Sim::new(fast_settings());
        for op in &ops {
            apply(&mut sim, op);
        }
        sim.advance(TimeDelta::seconds(120), TimeDelta::seconds(1));

        // Every occurrence fed ends up in exactly one place.
        let stats = sim.engine.stats().clone();
        let in_series: u64 = sim.store.counts_by_key().values().sum();
        prop_assert_eq!(stats.occurrences, sim.fed);
        prop_assert_eq!(in_series + stats.lone + stats.dropped_stale + stats.dropped_filtered, sim.fed);
        prop_assert_eq!(sim.engine.active_series(), 0);
        prop_assert_eq!(sim.engine.candidates(), 0);

        // Per key: Create, then Heartbeats, then one Finish, before the next Create.
        let mut active: BTreeMap<_, String> = BTreeMap::new();
        let mut names = BTreeSet::new();
        for i in &sim.intents {
            let name = event_series::object::name_of(&i.series);
            match i.kind {
                WriteKind::Create => {
                    prop_assert!(!active.contains_key(&i.series.id), "two active series for one key");
                    prop_assert!(names.insert(name.clone()), "a series name was reused");
                    active.insert(i.series.id, name);
                }
                WriteKind::Heartbeat => prop_assert_eq!(active.get(&i.series.id), Some(&name)),
                WriteKind::Finish(_) => {
                    prop_assert_eq!(active.remove(&i.series.id), Some(name));
                }
            }
        }
        prop_assert!(active.is_empty(), "every started series finished exactly once");
        prop_assert_eq!(stats.series_started, stats.series_finished);
    }
}
