//! Property tests over random interleavings of many keys and raw objects.

// A scenario reads as one story from top to bottom: the function-length lint is for the product.
#![allow(clippy::too_many_lines)]

use chrono::TimeDelta;
use event_series_core::intent::WriteKind;
use event_series_test_support::sim::*;
use proptest::prelude::*;
use std::collections::{BTreeMap, BTreeSet};

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn counts_are_conserved_and_series_are_well_formed(ops in prop::collection::vec(ops_lagging_up_to(40), 1..150)) {
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

        // Per key: Create, then Heartbeats, then one Finish, before the next Create. Between a
        // Finish and the next Create, only the finished series may be written again (reopened by a
        // late occurrence), under its own name.
        let mut active: BTreeMap<_, String> = BTreeMap::new();
        let mut finished: BTreeMap<_, String> = BTreeMap::new();
        let mut names = BTreeSet::new();
        for i in &sim.intents {
            let name = event_series::object::name_of(&i.series);
            let id = i.series.id;
            if !active.contains_key(&id) && i.kind != WriteKind::Create {
                let last = finished.remove(&id);
                prop_assert_eq!(last, Some(name.clone()), "only the last finished series reopens");
                active.insert(id, name.clone());
            }
            match i.kind {
                WriteKind::Create => {
                    prop_assert!(!active.contains_key(&id), "two active series for one key");
                    prop_assert!(names.insert(name.clone()), "a series name was reused");
                    active.insert(id, name);
                }
                WriteKind::Refresh | WriteKind::Heartbeat => {
                    prop_assert_eq!(active.get(&id), Some(&name))
                }
                WriteKind::Finish(_) => {
                    prop_assert_eq!(active.remove(&id), Some(name.clone()));
                    finished.insert(id, name);
                }
            }
        }
        prop_assert!(active.is_empty(), "every started series finished exactly once");
        prop_assert_eq!(stats.series_started + stats.series_reopened, stats.series_finished);
    }
}

/// What may happen to the operator between occurrences, beside time passing.
#[derive(Clone, Debug)]
enum Fault {
    /// `n` occurrences (at least 2, so they never stand alone) on a new raw object of key `key`.
    Burst {
        key: u8,
        n: u8,
    },
    Wait(u8),
    /// A relist: every raw object read again (the bounded table has forgotten most).
    Relist,
    /// The operator restarts and rebuilds from its objects and the raw events.
    Restart,
    /// `isomorphism.includeNote` switched, live: the keys change.
    ToggleNote,
}

fn fault_strategy() -> impl Strategy<Value = Fault> {
    prop_oneof![
        8 => (0u8..5, 2u8..5).prop_map(|(key, n)| Fault::Burst { key, n }),
        4 => (1u8..40).prop_map(Fault::Wait),
        1 => Just(Fault::Relist),
        1 => Just(Fault::Restart),
        1 => Just(Fault::ToggleNote),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// Random raw-table evictions, relists, restarts and includeNote toggles against an oracle that
    /// counts each occurrence once: every occurrence fed ends up in exactly one series object.
    #[test]
    fn evictions_restarts_and_toggles_count_each_occurrence_once(faults in prop::collection::vec(fault_strategy(), 1..60)) {
        use event_series_core::settings::PolicySet;
        use event_series_core::engine::EngineConfig;
        let config = EngineConfig { raw_capacity: 3, ..EngineConfig::default() };
        let mut sim = Sim::with_config(PolicySet::uniform(fast_settings()), config);
        let (mut include_note, mut raws) = (false, 0u32);
        for f in &faults {
            match *f {
                Fault::Burst { key, n } => {
                    raws += 1;
                    let raw = format!("k{key}-r{raws}");
                    sim.occur_n("ns", &raw, &format!("pod-{key}"), "BackOff", key % 2 == 0, n as i32);
                }
                Fault::Wait(s) => sim.advance(TimeDelta::seconds(s as i64), TimeDelta::seconds(1)),
                Fault::Relist => sim.relist(),
                Fault::Restart => sim.restart(),
                Fault::ToggleNote => {
                    include_note = !include_note;
                    sim.set_policies(PolicySet::uniform(event_series_core::settings::Settings {
                        include_note,
                        ..fast_settings()
                    }));
                }
            }
        }
        sim.advance(TimeDelta::seconds(120), TimeDelta::seconds(1));
        let in_objects: u64 = sim.store.counts_by_key().values().sum();
        prop_assert_eq!(in_objects, sim.fed);
        prop_assert_eq!(sim.engine.active_series(), 0);
    }
}

fn duration_text() -> impl Strategy<Value = String> {
    prop_oneof![
        // Numbers and units put together, the accepted syntax and its near misses.
        prop::collection::vec(
            (
                0u64..u64::MAX,
                prop::sample::select(vec!["ns", "us", "µs", "ms", "s", "m", "h", "d", "", "-"])
            ),
            0..4,
        )
        .prop_map(|parts| parts
            .iter()
            .map(|(n, u)| format!("{n}{u}"))
            .collect::<String>()),
        (
            1u64..10_000_000_000_000,
            prop::sample::select(vec!["s", "m", "h"])
        )
            .prop_map(|(n, u)| format!("{n}{u}")),
        any::<String>(),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(20_000))]

    /// The policy parser (the same check as the `policy_spec` fuzz target): no input panics; an
    /// accepted spec is within range; a refused one names its field.
    #[test]
    fn any_policy_spec_converts_or_names_its_field(
        h in duration_text(),
        f in duration_text(),
        w in duration_text(),
        max in any::<i64>(),
        per_ns in any::<Option<i64>>(),
    ) {
        let spec = event_series::config::EventSeriesPolicySpec {
            heartbeat_interval: h,
            finish_after: f,
            series_window: w,
            max_active_series: max,
            max_active_series_per_namespace: per_ns,
            ..Default::default()
        };
        event_series_test_support::check::check_policy(&spec);
    }
}
