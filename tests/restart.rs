//! Restart equivalence: an engine stopped at a random point and rebuilt from what the API server holds
//! (its series objects and the raw events) ends with the counts of one that never stopped.

// A scenario reads as one story from top to bottom: the function-length lint is for the product.
#![allow(clippy::too_many_lines)]

use chrono::TimeDelta;
use event_series_core::intent::WriteKind;
use event_series_test_support::sim::*;
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

/// [`same_counts_of`] an engine that never stops and one restarted with a restart buffer of
/// `budget` bytes, both without the event TTL.
fn same_counts_after_restarts(
    ops: &[Op],
    crash_points: &std::collections::BTreeSet<usize>,
    budget: usize,
) -> Result<(), TestCaseError> {
    let (steady, crashing) = (Sim::new(fast_settings()), Sim::new(fast_settings()));
    same_counts_of(steady, crashing, ops, crash_points, budget)
}

/// Runs `ops` (written on time) on `steady` and on `crashing`, restarted after each of
/// `crash_points`: both count the same occurrences in the series of each key and write as many
/// series objects. (With late writes objects may differ: a late occurrence may arrive after its
/// series finished and reopen it, where a restart that lists the raw object, which records only
/// its latest occurrence, starts a new series for it.)
fn same_counts_of(
    mut steady: Sim,
    mut crashing: Sim,
    ops: &[Op],
    crash_points: &std::collections::BTreeSet<usize>,
    budget: usize,
) -> Result<(), TestCaseError> {
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
    // The known exception (see `engine::restore`): a raw object that outlived every series object
    // recording it is placed again. Every other key counts exactly.
    let counts = |s: &Sim| {
        let mut c = s.store.counts_by_key();
        c.retain(|key, _| !crashing.outlived.contains(key));
        c
    };
    prop_assert_eq!(counts(&steady), counts(&crashing));
    // Objects can only be compared when every key counted the same.
    if crashing.outlived.is_empty() {
        let written = |s: &Sim| s.store.objects.len() + s.store.expired.len();
        prop_assert_eq!(written(&steady), written(&crashing));
    }
    Ok(())
}

/// A simulation that lives with a 90 s event TTL, as the operator does with its `--event-ttl`, and
/// a 20 s clock tolerance: raw events and series objects expire, the engine forgets dormant keys
/// and is housekept, and a restart lists history older than the retention plus the tolerance.
fn with_ttl() -> Sim {
    Sim::with_event_ttl(
        fast_settings(),
        TimeDelta::seconds(90),
        TimeDelta::seconds(20),
    )
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

    /// Restarts of an engine that lives with the event TTL (everything above ran without one, so
    /// no restart ever met history older than the retention): the same counts and objects, but for
    /// the keys of a raw object that outlived every series object recording it.
    #[test]
    fn restarts_under_the_event_ttl_reach_the_same_counts(
        ops in prop::collection::vec(op_strategy(), 1..150),
        crash_points in prop::collection::btree_set(0usize..150, 1..4),
        budget in prop_oneof![Just(usize::MAX), 300usize..4_000],
    ) {
        same_counts_of(with_ttl(), with_ttl(), &ops, &crash_points, budget)?;
    }
}

/// An engine whose dormant records live 60 s (the event TTL in the operator), housekept every 10 s
/// as the controller does, with at most `raw_capacity` raw objects remembered.
fn short_retention(raw_capacity: usize) -> Sim {
    let config = event_series_core::engine::EngineConfig {
        dormant_retention: TimeDelta::seconds(60),
        raw_capacity,
        ..Default::default()
    };
    Sim::with_config(
        event_series_core::settings::PolicySet::uniform(fast_settings()),
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

/// The known exception [`same_counts_of`] leaves out is flagged by the simulation: a legacy raw
/// object with a burst of 50 (a series, Finished at 6 min, its object deleted by the 1 h event TTL
/// at 66 min), then one occurrence every 30 min, each alone and each rewriting the raw object, so
/// that it lives on; a restart at 95 min lists it with count 53 since 0 min and no series object
/// recording it.
#[test]
fn a_raw_object_that_outlives_its_series_object_is_flagged_at_a_restart() {
    let mk = || {
        let settings = event_series_core::settings::Settings::default();
        Sim::with_event_ttl(settings, TimeDelta::hours(1), TimeDelta::minutes(10))
    };
    let (mut steady, mut crashing) = (mk(), mk());
    for sim in [&mut steady, &mut crashing] {
        sim.occur_n("ns", "web.burst", "web", "BackOff", false, 50);
        for _ in 0..3 {
            sim.advance(TimeDelta::minutes(30), TimeDelta::seconds(10));
            sim.occur("ns", "web.burst", "web", "BackOff", false);
        }
        sim.advance(TimeDelta::minutes(5), TimeDelta::seconds(10));
    }
    assert!(
        crashing.store.objects.is_empty(),
        "the series object expired"
    );
    crashing.restart();
    for sim in [&mut steady, &mut crashing] {
        sim.advance(TimeDelta::minutes(30), TimeDelta::seconds(10));
    }
    let steady = steady.store.counts_by_key();
    assert_eq!(steady.values().sum::<u64>(), 50);
    let flagged: Vec<&String> = crashing.outlived.iter().collect();
    assert_eq!(flagged, steady.keys().collect::<Vec<_>>());
}

/// Runs `script` on an engine that never stops and on one restarted where the script says, and
/// returns both stores' counts by key (fast settings: 20 s window and finish; a 90 s event TTL;
/// a clock tolerance of `tolerance` seconds).
fn both_runs(
    tolerance: i64,
    script: impl Fn(&mut Sim, bool),
) -> [std::collections::BTreeMap<String, u64>; 2] {
    [false, true].map(|restart| {
        let mut sim = Sim::with_event_ttl(
            fast_settings(),
            TimeDelta::seconds(90),
            TimeDelta::seconds(tolerance),
        );
        script(&mut sim, restart);
        sim.advance(TimeDelta::seconds(120), TimeDelta::seconds(1));
        sim.store.counts_by_key()
    })
}

/// An emitter 21 s behind (beyond the 20 s tolerance) writes 2 occurrences, timed at their
/// arrival; its series finishes; 40 s later the same raw object reports 2 more. Their placement is
/// measured from the first two as the engine timed them, as the series object records them: a new
/// series of 2, with a restart after the second batch or before it. (The live engine measured from
/// the emitter's own time, 61 s back, called the two spread out and made no series: 2 against a
/// restart's 4. A restart before the second batch that re-timed the listed object by the
/// emitter's time did the same: 4 against 2.)
#[test]
fn the_next_occurrences_of_a_skewed_emitter_are_placed_from_its_timed_latest() {
    for restart_before in [false, true] {
        let [steady, crashing] = both_runs(20, |sim, restart| {
            sim.skew = -TimeDelta::seconds(21);
            sim.occur_n("ns", "k-a", "pod-k", "BackOff", true, 2);
            sim.skew = TimeDelta::zero();
            sim.advance(TimeDelta::seconds(40), TimeDelta::seconds(1));
            if restart && restart_before {
                sim.restart();
            }
            sim.occur_n("ns", "k-a", "pod-k", "BackOff", true, 2);
            if restart && !restart_before {
                sim.restart();
            }
        });
        assert_eq!(steady.values().sum::<u64>(), 4, "{steady:?}");
        assert_eq!(
            steady, crashing,
            "restart before the second batch: {restart_before}"
        );
    }
}

/// A series of 2 written 4 s late (within the tolerance), a restart at once, a third occurrence
/// 16 s later: 20 s after the first two by the emitter's clock, inside the window. The restored
/// series was seen when the API server wrote its raw object, as the live one was, so it has not
/// finished yet and takes the third. (Restored as seen at the emitter's time, it finished 4 s
/// early: 2 against 3.)
#[test]
fn a_restored_series_is_seen_when_its_raw_object_was_written() {
    let [steady, crashing] = both_runs(20, |sim, restart| {
        sim.skew = -TimeDelta::seconds(4);
        sim.occur_n("ns", "k-a", "pod-k", "BackOff", false, 2);
        sim.skew = TimeDelta::zero();
        if restart {
            sim.restart();
        }
        sim.advance(TimeDelta::seconds(16), TimeDelta::seconds(1));
        sim.occur("ns", "k-a", "pod-k", "BackOff", false);
    });
    assert_eq!(steady.values().sum::<u64>(), 3, "{steady:?}");
    assert_eq!(steady, crashing);
}

/// An emitter whose clock is 8 minutes behind (within the default 10-minute tolerance, beyond the
/// 6-minute window): one occurrence, a restart 30 s later, a second occurrence on the same raw
/// object. The live run makes a series of 2. A restart that timed the listed occurrence by its own
/// timestamp saw it 8 minutes old, dropped it as stale and made no series.
#[test]
fn a_restart_times_a_listed_occurrence_of_a_skewed_emitter_as_the_watch_did() {
    let mk = || Sim::new(event_series_core::settings::Settings::default());
    let (mut steady, mut crashing) = (mk(), mk());
    for (sim, restart) in [(&mut steady, false), (&mut crashing, true)] {
        sim.skew = -TimeDelta::minutes(8);
        sim.occur("ns", "web.1", "web", "BackOff", false);
        sim.advance(TimeDelta::seconds(30), TimeDelta::seconds(10));
        if restart {
            sim.restart();
        }
        sim.advance(TimeDelta::seconds(30), TimeDelta::seconds(10));
        sim.occur("ns", "web.1", "web", "BackOff", false);
        sim.advance(TimeDelta::minutes(10), TimeDelta::seconds(10));
    }
    let steady = steady.store.counts_by_key();
    assert_eq!(
        steady.values().sum::<u64>(),
        2,
        "the live run made a series of 2"
    );
    assert_eq!(steady, crashing.store.counts_by_key());
    assert_eq!(crashing.engine.stats().dropped_stale, 0);
}

/// client-go's `tools/record` keeps what it wrote in its cache: a loop of 50 (one series), quiet
/// for longer than the 1 h event TTL (both objects deleted), then one more occurrence, which the
/// recorder writes as a new object under the old name with count 51 and the old first time. The
/// operator counts that one occurrence, not 51 (a second series of 51 counted the loop twice),
/// with or without a restart after it.
#[test]
fn an_object_a_recorder_recreates_after_the_ttl_adds_only_its_new_occurrence() {
    for restart in [false, true] {
        let settings = event_series_core::settings::Settings::default();
        let mut sim = Sim::with_event_ttl(settings, TimeDelta::hours(1), TimeDelta::minutes(10));
        sim.recorder_cache = true;
        sim.occur_n("ns", "web.burst", "web", "BackOff", false, 50);
        sim.advance(TimeDelta::minutes(70), TimeDelta::seconds(10));
        assert!(sim.store.objects.is_empty(), "the series object expired");
        sim.occur("ns", "web.burst", "web", "BackOff", false);
        if restart {
            sim.restart();
        }
        sim.advance(TimeDelta::seconds(30), TimeDelta::seconds(10));
        sim.occur("ns", "web.burst", "web", "BackOff", false);
        sim.advance(TimeDelta::minutes(10), TimeDelta::seconds(10));
        let writes: Vec<(u64, _)> = sim
            .intents
            .iter()
            .filter(|i| i.kind != WriteKind::Heartbeat && i.kind != WriteKind::Refresh)
            .map(|i| (i.series.count, i.series.first))
            .collect();
        let t0 = writes[0].1;
        let again = t0 + TimeDelta::minutes(70);
        assert_eq!(
            writes,
            [(50, t0), (50, t0), (2, again), (2, again)],
            "create and finish of each loop, the second from its own start (restart: {restart})"
        );
    }
}
