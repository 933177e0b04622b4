//! Lifecycle rules of the series engine (Grouping, Output, Restart), on an injected clock.

// A scenario reads as one story from top to bottom: the function-length lint is for the product.
#![allow(clippy::too_many_lines)]

use chrono::TimeDelta;
use event_series::object;
use event_series_core::engine::{Engine, EngineConfig};
use event_series_core::filter::MatchFilter;
use event_series_core::intent::{FinishCause, SeriesState, WriteKind};
use event_series_core::key;
use event_series_core::settings::{Policy, PolicySet, Selector, Settings};
use event_series_test_support::sim::*;
use std::collections::BTreeMap;
use std::sync::Arc;

fn secs(n: i64) -> TimeDelta {
    TimeDelta::seconds(n)
}

/// Feeds raw event `r<i>` about pod `p<i>` with `count` occurrences, all at `now`.
fn feed_pod(engine: &mut Engine, i: usize, count: i32, now: chrono::DateTime<chrono::Utc>) {
    feed_pod_at(engine, i, count, now, now);
}

/// [`feed_pod`] of occurrences that happened at `at`, observed at `now`.
fn feed_pod_at(
    engine: &mut Engine,
    i: usize,
    count: i32,
    at: chrono::DateTime<chrono::Utc>,
    now: chrono::DateTime<chrono::Utc>,
) {
    let ev = legacy(
        "a",
        &format!("r{i}"),
        pod("a", &format!("p{i}")),
        "BackOff",
        count,
        at,
        at,
    );
    engine.observe(now, &key::normalise(&ev).unwrap());
}

#[test]
fn second_occurrence_creates_the_series_and_later_ones_cost_nothing() {
    let mut sim = Sim::new(fast_settings());
    sim.occur("a", "r1", "web-0", "BackOff", false);
    assert!(sim.intents.is_empty(), "one occurrence is only a candidate");
    let start = sim.now;
    sim.advance(secs(5), secs(1));
    sim.occur("a", "r1", "web-0", "BackOff", false);
    assert_eq!(sim.intents.len(), 1);
    let create = &sim.intents[0];
    assert_eq!(create.kind, WriteKind::Create);
    assert_eq!(create.series.count, 2);
    assert_eq!(create.series.first, start);
    assert_eq!(create.series.last, sim.now);
    assert_eq!(create.series.state, SeriesState::Ongoing);
    for _ in 0..50 {
        sim.advance(secs(1), secs(1));
        sim.occur("a", "r1", "web-0", "BackOff", false);
    }
    assert_eq!(
        sim.intents.len(),
        1,
        "occurrences between writes make no intent"
    );
    assert_eq!(sim.engine.active(sim.now)[0].count, 52);
}

#[test]
fn quiet_finishes_once_with_the_final_count_and_a_new_burst_is_a_new_series() {
    let mut sim = Sim::new(fast_settings());
    for _ in 0..10 {
        sim.occur("a", "r1", "web-0", "BackOff", false);
        sim.advance(secs(1), secs(1));
    }
    // The last occurrence was 1s ago; 18s more is 19s of quiet, less than finishAfter (20s).
    sim.advance(secs(18), secs(1));
    assert_eq!(sim.count_kinds(), (1, 0, 0), "19s quiet < finishAfter 20s");
    sim.advance(secs(1), secs(1));
    assert_eq!(sim.count_kinds(), (1, 0, 1));
    let fin = sim.intents.last().unwrap();
    assert_eq!(fin.kind, WriteKind::Finish(FinishCause::Quiet));
    assert_eq!(fin.series.count, 10);
    assert_eq!(fin.series.state, SeriesState::Finished);
    assert_eq!(sim.engine.active_series(), 0);
    let first_name = object::name_of(&fin.series);

    sim.advance(secs(100), secs(10));
    sim.occur("a", "r1", "web-0", "BackOff", false);
    sim.occur("a", "r1", "web-0", "BackOff", false);
    let create = sim.intents.last().unwrap();
    assert_eq!(create.kind, WriteKind::Create);
    assert_ne!(object::name_of(&create.series), first_name);
    assert_eq!(create.series.count, 2);
    assert_eq!(sim.store.with_state(SeriesState::Finished).len(), 1);
    assert_eq!(sim.store.with_state(SeriesState::Ongoing).len(), 1);
}

#[test]
fn heartbeats_carry_the_current_count_and_change_the_object() {
    let mut sim = Sim::new(fast_settings());
    for _ in 0..200 {
        sim.occur("a", "r1", "web-0", "BackOff", false);
        sim.advance(secs(1), secs(1));
    }
    let heartbeats: Vec<_> = sim
        .intents
        .iter()
        .filter(|i| i.kind == WriteKind::Heartbeat)
        .collect();
    // 200s with a 60s interval (first one up to 15s early): 3 heartbeats.
    assert_eq!(heartbeats.len(), 3);
    let mut prev = None;
    for h in &heartbeats {
        assert!(h.series.count > 2);
        assert_ne!(
            Some(h.series.written_at),
            prev,
            "every heartbeat changes the object"
        );
        prev = Some(h.series.written_at);
    }
    let gaps: Vec<_> = heartbeats
        .windows(2)
        .map(|w| w[1].series.written_at - w[0].series.written_at)
        .collect();
    assert!(gaps.iter().all(|g| *g == secs(60)), "{gaps:?}");
}

#[test]
fn heartbeats_of_series_created_together_are_spread() {
    let settings = Settings {
        heartbeat_interval: TimeDelta::minutes(30),
        ..fast_settings()
    };
    let mut engine = Engine::with_settings(Settings {
        finish_after: TimeDelta::hours(2),
        series_window: TimeDelta::hours(2),
        ..settings
    });
    let now = t0();
    for i in 0..100 {
        feed_pod(&mut engine, i, 2, now);
    }
    assert_eq!(engine.take_intents().len(), 100);
    let mut at = Vec::new();
    let mut t = now;
    while t < now + TimeDelta::minutes(31) {
        t += secs(1);
        engine.tick(t);
        for i in engine.take_intents() {
            assert_eq!(i.kind, WriteKind::Heartbeat);
            at.push(i.series.written_at);
        }
    }
    assert_eq!(at.len(), 100);
    at.dedup();
    assert!(
        at.len() > 50,
        "heartbeats fire at {} distinct seconds",
        at.len()
    );
    assert!(at.iter().all(|t| *t > now + TimeDelta::seconds(22 * 60)));
}

#[test]
fn a_lone_occurrence_expires_without_a_write() {
    let mut sim = Sim::new(fast_settings());
    sim.occur("a", "r1", "web-0", "BackOff", false);
    sim.advance(secs(21), secs(1));
    sim.occur("a", "r1", "web-0", "BackOff", false);
    assert!(sim.intents.is_empty(), "21s apart is beyond the 20s window");
    assert_eq!(sim.engine.stats().lone, 1);
    assert_eq!(sim.engine.candidates(), 1);
}

#[test]
fn raw_counts_are_folded_as_deltas() {
    let mut engine = Engine::with_settings(fast_settings());
    let now = t0();
    let feed = |engine: &mut Engine, count: i32| {
        let ev = legacy("a", "r1", pod("a", "p"), "BackOff", count, now, now);
        engine.observe(now, &key::normalise(&ev).unwrap());
    };
    feed(&mut engine, 3);
    feed(&mut engine, 3);
    feed(&mut engine, 2);
    assert_eq!(
        engine.stats().occurrences,
        3,
        "equal or lower counts add nothing"
    );
    feed(&mut engine, 5);
    assert_eq!(engine.stats().occurrences, 5);
    let intents = engine.take_intents();
    assert_eq!(intents.len(), 1, "first seen with count 3: created at once");
    assert_eq!(intents[0].series.count, 3);
    assert_eq!(engine.active(now)[0].count, 5);
}

#[test]
fn new_style_series_count_is_folded_as_deltas() {
    let mut engine = Engine::with_settings(fast_settings());
    let start = t0();
    let at = |n: i64| start + secs(n);
    let mut feed = |count: i32, last: i64| {
        let ev = new_style("a", "r1", pod("a", "p"), "Sync", count, start, at(last));
        engine.observe(at(last), &key::normalise(&ev).unwrap());
        engine.take_intents()
    };
    assert!(feed(1, 0).is_empty());
    let created = feed(2, 3);
    assert_eq!(created.len(), 1);
    assert_eq!(created[0].series.first, start);
    assert!(feed(10, 10).is_empty());
    assert!(feed(10, 10).is_empty());
    assert!(feed(25, 15).is_empty());
    assert_eq!(engine.active(at(15))[0].count, 25);
}

#[test]
fn a_raw_event_replayed_old_is_a_baseline_not_a_series() {
    let mut engine = Engine::with_settings(fast_settings());
    let now = t0() + TimeDelta::hours(1);
    let old = legacy("a", "r1", pod("a", "p"), "BackOff", 40, t0(), t0());
    engine.begin_recovery();
    engine.observe(now, &key::normalise(&old).unwrap());
    engine.end_recovery(now, now);
    assert!(engine.take_intents().is_empty());
    assert_eq!(engine.stats().dropped_stale, 40);
    // The emitter patches it again: only the new occurrence counts.
    let again = legacy("a", "r1", pod("a", "p"), "BackOff", 41, t0(), now);
    engine.observe(now, &key::normalise(&again).unwrap());
    assert_eq!(engine.candidates(), 1);
    assert_eq!(engine.pending_occurrences(), 1);
}

/// A watched event whose timestamps lie beyond the clock tolerance is timed by its arrival: an
/// emitter whose clock is an hour off still gets its series, with every occurrence.
#[test]
fn a_watched_event_far_off_the_clock_is_timed_by_its_arrival() {
    let mut engine = Engine::with_settings(fast_settings());
    let now = t0() + TimeDelta::hours(1);
    let old = legacy("a", "r1", pod("a", "p"), "BackOff", 40, t0(), t0());
    engine.observe(now, &key::normalise(&old).unwrap());
    let created = engine.take_intents();
    assert_eq!(created.len(), 1);
    assert_eq!((created[0].series.count, created[0].series.last), (40, now));
    assert_eq!(engine.stats().dropped_stale, 0);
}

#[test]
fn a_gap_longer_than_the_window_ends_the_series_even_before_finish_after() {
    let mut sim = Sim::new(Settings {
        finish_after: secs(120),
        ..fast_settings()
    });
    sim.occur("a", "r1", "web-0", "BackOff", false);
    sim.occur("a", "r1", "web-0", "BackOff", false);
    sim.advance(secs(30), secs(1));
    sim.occur("a", "r1", "web-0", "BackOff", false);
    let kinds: Vec<_> = sim.intents.iter().map(|i| i.kind).collect();
    assert_eq!(
        kinds,
        vec![WriteKind::Create, WriteKind::Finish(FinishCause::Gap)]
    );
    assert_eq!(sim.intents[1].series.count, 2);
    assert_eq!(sim.engine.candidates(), 1);
}

#[test]
fn note_is_part_of_the_key_only_when_asked() {
    for (include_note, series) in [(false, 1), (true, 0)] {
        let mut engine = Engine::with_settings(Settings {
            include_note,
            ..fast_settings()
        });
        let now = t0();
        for (raw, msg) in [("r1", "Created pod: a"), ("r2", "Created pod: b")] {
            let mut ev = legacy("a", raw, pod("a", "rs"), "SuccessfulCreate", 1, now, now);
            ev.message = Some(msg.into());
            engine.observe(now, &key::normalise(&ev).unwrap());
        }
        assert_eq!(engine.active_series(), series, "includeNote={include_note}");
    }
}

#[test]
fn filters_drop_and_count() {
    let mut engine = Engine::with_settings(Settings {
        filter: MatchFilter {
            types: vec!["Warning".into()],
            exclude_reasons: vec!["Pulled".into()],
            ..Default::default()
        },
        ..fast_settings()
    });
    let now = t0();
    let mut pulled = legacy("a", "r1", pod("a", "p"), "Pulled", 5, now, now);
    engine.observe(now, &key::normalise(&pulled).unwrap());
    pulled.type_ = Some("Normal".into());
    pulled.reason = Some("BackOff".into());
    pulled.metadata.uid = Some("other".into());
    engine.observe(now, &key::normalise(&pulled).unwrap());
    assert_eq!(engine.stats().dropped_filtered, 10);
    assert_eq!(engine.active_series(), 0);
    let ok = legacy("a", "r3", pod("a", "p"), "BackOff", 5, now, now);
    engine.observe(now, &key::normalise(&ok).unwrap());
    assert_eq!(engine.active_series(), 1);
}

#[test]
fn max_active_series_finishes_the_least_recently_active_with_its_count() {
    let mut sim = Sim::new(Settings {
        max_active_series: 2,
        ..fast_settings()
    });
    for p in ["p1", "p2"] {
        sim.occur_n("a", p, p, "BackOff", false, 3);
        sim.advance(secs(1), secs(1));
    }
    sim.occur("a", "p1", "p1", "BackOff", false); // p2 is now the least recently active
    sim.occur_n("a", "p3", "p3", "BackOff", false, 2);
    let evicted: Vec<_> = sim
        .intents
        .iter()
        .filter(|i| i.kind == WriteKind::Finish(FinishCause::Evicted))
        .collect();
    assert_eq!(evicted.len(), 1);
    assert_eq!(evicted[0].series.key.view().regarding.name, "p2");
    assert_eq!(evicted[0].series.count, 3);
    assert_eq!(sim.engine.active_series(), 2);
    assert_eq!(sim.engine.stats().evicted_by_policy, 1);
}

#[test]
fn candidates_and_raw_counts_are_bounded_and_evictions_counted() {
    let mut engine = Engine::new(
        PolicySet::uniform(Settings {
            max_active_series: 10,
            ..fast_settings()
        }),
        EngineConfig {
            raw_capacity: 100,
            ..Default::default()
        },
    );
    let now = t0();
    for i in 0..2000 {
        feed_pod(&mut engine, i, 1, now);
    }
    assert_eq!(engine.candidates(), 1024);
    assert_eq!(engine.stats().candidates_evicted, 2000 - 1024);
    assert_eq!(engine.stats().lone, 2000 - 1024);
    assert_eq!(engine.stats().raw_evicted, 1900);
}

#[test]
fn policy_changes_apply_live() {
    let mut engine = Engine::with_settings(Settings {
        finish_after: TimeDelta::minutes(10),
        ..fast_settings()
    });
    let now = t0();
    let ev = legacy("a", "r1", pod("a", "p"), "BackOff", 2, now, now);
    engine.observe(now, &key::normalise(&ev).unwrap());
    engine.take_intents();
    engine.tick(now + secs(30));
    assert!(engine.take_intents().is_empty());
    engine.set_policies(now + secs(30), PolicySet::uniform(fast_settings()));
    engine.tick(now + secs(31));
    let fin = engine.take_intents();
    assert_eq!(fin.len(), 1, "finishAfter 20s now applies");
    assert_eq!(fin[0].kind, WriteKind::Finish(FinishCause::Quiet));
}

#[test]
fn namespace_selector_picks_the_policy_and_relabelling_moves_series() {
    let strict = Policy {
        name: "prod".into(),
        selector: Selector {
            match_labels: BTreeMap::from([("env".to_string(), "prod".to_string())]),
            ..Default::default()
        },
        settings: Arc::new(Settings {
            filter: MatchFilter {
                types: vec!["Normal".into()],
                ..Default::default()
            },
            ..fast_settings()
        }),
    };
    let mut engine = Engine::new(
        PolicySet::new(vec![strict], fast_settings()),
        Default::default(),
    );
    let now = t0();
    engine.set_namespace_labels(
        now,
        "prod-ns",
        BTreeMap::from([("env".into(), "prod".into())]),
    );
    let warn = |ns: &str, raw: &str| legacy(ns, raw, pod(ns, "p"), "BackOff", 2, now, now);
    engine.observe(now, &key::normalise(&warn("prod-ns", "r1")).unwrap());
    engine.observe(now, &key::normalise(&warn("dev-ns", "r2")).unwrap());
    assert_eq!(
        engine.stats().dropped_filtered,
        2,
        "Warnings filtered in prod only"
    );
    assert_eq!(engine.active_series(), 1);
    engine.set_namespace_labels(
        now,
        "dev-ns",
        BTreeMap::from([("env".into(), "prod".into())]),
    );
    assert_eq!(
        engine.active_series(),
        1,
        "existing series move, they are not dropped"
    );
}

#[test]
fn relist_and_restart_do_not_count_twice() {
    let mut sim = Sim::new(fast_settings());
    for _ in 0..5 {
        sim.occur("a", "r1", "web-0", "BackOff", false);
        sim.advance(secs(1), secs(1));
    }
    sim.relist();
    sim.restart();
    sim.relist();
    for _ in 0..5 {
        sim.occur("a", "r1", "web-0", "BackOff", false);
        sim.advance(secs(1), secs(1));
    }
    sim.advance(secs(60), secs(1));
    assert_eq!(sim.store.objects.len(), 1, "one object for the series");
    assert_eq!(sim.store.counts_by_key().values().sum::<u64>(), 10);
}

#[test]
fn restart_after_long_downtime_finishes_at_once() {
    let mut sim = Sim::new(fast_settings());
    sim.occur_n("a", "r1", "web-0", "BackOff", false, 3);
    sim.now += TimeDelta::minutes(10);
    sim.restart();
    let fin = sim.intents.last().unwrap();
    assert_eq!(fin.kind, WriteKind::Finish(FinishCause::Quiet));
    assert_eq!(fin.series.count, 3);
    assert_eq!(sim.engine.active_series(), 0);
}

#[test]
fn deleted_raw_objects_are_forgotten() {
    let mut engine = Engine::with_settings(fast_settings());
    let now = t0();
    let ev = legacy("a", "r1", pod("a", "p"), "BackOff", 2, now, now);
    let obs = key::normalise(&ev).unwrap();
    engine.observe(now, &obs);
    engine.forget_raw(obs.raw);
    engine.observe(now, &obs);
    assert_eq!(
        engine.stats().occurrences,
        2,
        "a forgotten object seen again is measured against its key's record"
    );
    let mut recreated = ev.clone();
    recreated.metadata.uid = Some("another-uid".into());
    engine.observe(now, &key::normalise(&recreated).unwrap());
    assert_eq!(
        engine.stats().occurrences,
        4,
        "a re-created object (a new uid) counts anew"
    );
}

#[test]
fn lowering_max_active_series_finishes_the_excess_with_their_counts() {
    let mut engine = Engine::with_settings(fast_settings());
    let now = t0();
    for i in 0..5 {
        feed_pod(&mut engine, i, 3, now + secs(i as i64));
    }
    engine.take_intents();
    engine.set_policies(
        now + secs(5),
        PolicySet::uniform(Settings {
            max_active_series: 2,
            ..fast_settings()
        }),
    );
    let finished = engine.take_intents();
    assert_eq!(finished.len(), 3);
    assert!(
        finished
            .iter()
            .all(|i| i.kind == WriteKind::Finish(FinishCause::Evicted) && i.series.count == 3)
    );
    let names: Vec<_> = finished
        .iter()
        .map(|i| i.series.key.view().regarding.name.to_owned())
        .collect();
    assert_eq!(
        names,
        ["p0", "p1", "p2"],
        "the least recently active go first"
    );
    assert_eq!(engine.active_series(), 2);
}

#[test]
fn include_note_change_applies_to_keys_seen_after_it() {
    let mut engine = Engine::with_settings(fast_settings());
    let now = t0();
    let mut ev = legacy("a", "r1", pod("a", "rs"), "SuccessfulCreate", 2, now, now);
    engine.observe(now, &key::normalise(&ev).unwrap());
    engine.set_policies(
        now,
        PolicySet::uniform(Settings {
            include_note: true,
            ..fast_settings()
        }),
    );
    assert_eq!(engine.active_series(), 1, "the running series keeps going");
    ev.metadata.uid = Some("r2".into());
    ev.message = Some("Created pod: other".into());
    engine.observe(now, &key::normalise(&ev).unwrap());
    assert_eq!(
        engine.active_series(),
        2,
        "a different note is a different key now"
    );
}

#[test]
fn keys_of_expired_candidates_are_reclaimed_and_series_keys_survive_it() {
    let mut engine = Engine::with_settings(Settings {
        finish_after: secs(60),
        ..fast_settings()
    });
    let now = t0();
    // 100 series among 30,000 one-off candidates, their keys interleaved in the store.
    for i in 0..30_000 {
        feed_pod(&mut engine, i, if i % 300 == 0 { 2 } else { 1 }, now);
    }
    assert_eq!(engine.active_series(), 100);
    let (live, held) = engine.key_bytes();
    assert!(live > 30_000 * 50 && held >= live, "{live} {held}");
    // Past the window the candidates expire; a heartbeat-free tick keeps the series, and the
    // housekeeping that follows reclaims the expired keys.
    engine.tick(now + secs(21));
    assert_eq!(engine.candidates(), 0);
    assert_eq!(engine.active_series(), 100);
    engine.housekeep(now + secs(21));
    let (live_after, held_after) = engine.key_bytes();
    assert!(live_after * 250 < live, "{live_after} of {live}");
    assert!(
        held_after < held / 10,
        "holes were reclaimed: {held_after} of {held}"
    );
    let mut names: Vec<String> = engine
        .active(now)
        .iter()
        .map(|s| s.key.view().regarding.name.to_string())
        .collect();
    names.sort();
    let mut expected: Vec<String> = (0..30_000).step_by(300).map(|i| format!("p{i}")).collect();
    expected.sort();
    assert_eq!(names, expected);
}

#[test]
fn tables_give_back_a_burst_of_candidates() {
    let mut engine = Engine::with_settings(Settings {
        finish_after: secs(3 * 3600),
        ..fast_settings()
    });
    let now = t0();
    let idle = engine.held_bytes();
    for i in 0..50_000 {
        feed_pod(&mut engine, i, if i % 1_000 == 0 { 2 } else { 1 }, now);
    }
    let burst = engine.held_bytes();
    assert!(burst > 10 * 1024 * 1024, "{burst}");
    // The candidates expire, then their dormant records (and the TTL deletes their raw objects): the
    // burst's tables go.
    for i in 0..50_000 {
        engine.forget_raw(event_series_core::key::RawId::of(
            "a",
            &format!("r{i}"),
            &format!("raw-a-r{i}"),
        ));
    }
    engine.tick(now + secs(21));
    assert_eq!(engine.candidates(), 0);
    engine.tick(now + secs(3600 + 21));
    assert_eq!(engine.active_series(), 50);
    engine.housekeep(now + secs(3600 + 21));
    let after = engine.held_bytes();
    assert!(after < burst / 4, "held {after} of {burst} (idle {idle})");
    assert_eq!(engine.active(now).len(), 50);
}

/// A restart lists the whole stored history (10^6 events in a large cluster). Its ended loops older
/// than `dormant_retention` leave the rebuilt engine holding nothing that housekeeping would give
/// back: the running process forgot them long ago, and a restore's peak is what the rebuilt
/// engine keeps, not the history.
#[test]
fn a_restart_holds_no_record_of_history_older_than_the_retention() {
    let mut engine = Engine::with_settings(fast_settings());
    let now = t0();
    let old = now - secs(2 * 3600);
    engine.begin_recovery();
    for i in 0..50_000 {
        feed_pod_at(&mut engine, i, 1 + (i % 3) as i32, old, now);
    }
    engine.end_recovery(now, now);
    let listed: u64 = (0..50_000u64).map(|i| 1 + i % 3).sum();
    assert_eq!(engine.stats().dropped_stale, listed);
    assert_eq!((engine.candidates(), engine.active_series()), (0, 0));
    let rebuilt = engine.held_bytes();
    engine.tick(now);
    engine.housekeep(now);
    let settled = engine.held_bytes();
    assert!(
        rebuilt <= settled + settled / 10,
        "rebuilt engine holds {rebuilt} bytes, {settled} after housekeeping"
    );
}

/// Silent networks: occurrences held up in a silent connection arrive late, after the shell has held the
/// lifecycle clock at the last moment its input was known complete. They join their loop's series
/// (an ongoing one, or one that started during the silence), neither counted stale against their
/// arrival time nor finding the series already finished.
#[test]
fn occurrences_delivered_late_while_the_clock_is_held_join_their_series() {
    let t0 = chrono::Utc::now();
    let mut engine = Engine::with_settings(fast_settings());
    let occur = |engine: &mut Engine, pod_: &str, count: i32, first, last, arrival| {
        let ev = legacy("a", pod_, pod("a", pod_), "BackOff", count, first, last);
        engine.observe(arrival, &key::normalise(&ev).unwrap());
    };
    occur(&mut engine, "web-0", 2, t0, t0 + secs(1), t0 + secs(1));
    engine.tick(t0 + secs(2));
    assert_eq!(engine.take_intents().len(), 1, "the create");
    // The connection goes silent at t0 + 2: the clock runs on, the input is known only up to t0 + 2.
    // web-0 would be due to finish at t0 + 21 by what is known; it is held.
    engine.tick_with_input(t0 + secs(10), t0 + secs(2));
    assert!(!engine.finishes_held(), "no finish due yet");
    for at in [25, 39] {
        engine.tick_with_input(t0 + secs(at), t0 + secs(2));
        assert!(engine.finishes_held(), "the shell is asked for a proof");
    }
    assert!(
        engine.take_intents().is_empty(),
        "no finish on missing input"
    );
    // web-0's loop went on until t0 + 12 (count 30), and web-1's whole loop (t0 + 3 to t0 + 12)
    // happened meanwhile; all of it arrives at t0 + 40, long after it happened.
    let late = t0 + secs(40);
    for (count, last) in [(10, 5), (20, 9), (30, 12)] {
        occur(&mut engine, "web-0", count, t0, t0 + secs(last), late);
    }
    for (count, last) in [(1, 3), (12, 7), (25, 12)] {
        occur(
            &mut engine,
            "web-1",
            count,
            t0 + secs(3),
            t0 + secs(last),
            late,
        );
    }
    assert_eq!(engine.stats().dropped_stale, 0, "late is not stale");
    assert_eq!(engine.take_intents().len(), 1, "web-1's create");
    // The input is current again at t0 + 40: both loops ended at t0 + 12, so both finish now, once,
    // with every occurrence.
    engine.tick(late);
    assert!(!engine.finishes_held());
    let mut finished: Vec<(String, u64)> = engine
        .take_intents()
        .into_iter()
        .filter(|i| matches!(i.kind, WriteKind::Finish(_)))
        .map(|i| {
            (
                i.series.key.view().regarding.name.to_owned(),
                i.series.count,
            )
        })
        .collect();
    finished.sort();
    assert_eq!(finished, [("web-0".into(), 30), ("web-1".into(), 25)]);
    assert_eq!(engine.active_series(), 0);
}

/// The alert on loops Ongoing for too long reads these counts (`series_ongoing_longer_than`).
#[test]
fn ongoing_ages_count_each_loop_by_how_long_it_has_lasted() {
    let mut sim = Sim::new(fast_settings());
    let bounds = [secs(600), secs(3_600), secs(6 * 3_600)];
    assert_eq!(sim.engine.ongoing_longer_than(sim.now, bounds), [0, 0, 0]);
    // A loop every 10 s for 2 hours; a second one for its last 5 minutes.
    for i in 0..720 {
        sim.occur("a", "r1", "web-0", "BackOff", false);
        if i >= 690 {
            sim.occur("a", "r2", "web-1", "BackOff", false);
        }
        sim.advance(secs(10), secs(10));
    }
    assert_eq!(sim.engine.active_series(), 2);
    assert_eq!(
        sim.engine.ongoing_longer_than(sim.now, bounds),
        [1, 1, 0],
        "only the 2-hour loop is past 10m and 1h"
    );
    sim.advance(secs(60), secs(1));
    assert_eq!(sim.engine.active_series(), 0, "both finished");
    assert_eq!(sim.engine.ongoing_longer_than(sim.now, bounds), [0, 0, 0]);
}

#[test]
fn each_write_says_since_when_it_is_owed() {
    let mut sim = Sim::new(fast_settings());
    sim.occur("a", "r1", "web-0", "BackOff", false);
    sim.advance(secs(1), secs(1));
    sim.occur("a", "r1", "web-0", "BackOff", false);
    let create = sim.intents[0].clone();
    assert_eq!(create.kind, WriteKind::Create);
    assert_eq!(
        create.due, sim.now,
        "a create is owed from the occurrence that made it"
    );
    // Ticks 7 s apart: heartbeats and the finish are noticed late, and say since when they were owed.
    let mut last = sim.now;
    for _ in 0..30 {
        sim.advance(secs(7), secs(7));
        sim.occur("a", "r1", "web-0", "BackOff", false);
        last = sim.now;
    }
    sim.advance(secs(70), secs(7));
    let heartbeats: Vec<_> = sim
        .intents
        .iter()
        .filter(|i| i.kind == WriteKind::Heartbeat)
        .collect();
    assert!(heartbeats.len() >= 2, "{heartbeats:?}");
    for h in &heartbeats {
        let late = h.series.written_at - h.due;
        assert!(
            late >= secs(0) && late < secs(7),
            "heartbeat noticed {late} after it was due"
        );
    }
    // Each heartbeat is due one interval after the one before was made.
    assert_eq!(
        heartbeats[1].due - heartbeats[0].series.written_at,
        secs(60)
    );
    let fin = sim.intents.last().unwrap();
    assert_eq!(fin.kind, WriteKind::Finish(FinishCause::Quiet));
    assert_eq!(
        fin.due,
        last + secs(20),
        "owed from the last occurrence plus finishAfter"
    );
    assert!(fin.series.written_at > fin.due, "noticed by a later tick");
}

/// `series` series created within 10 s with a 3-minute heartbeat, the engine's heartbeat share at
/// `rate` a second (ceiling 4.5 minutes, 3/4 of a 6-minute event TTL), written by a simulated
/// writer of 50 writes a second (first in, first out) for 30 simulated minutes: the longest time
/// between two writes of one object as they land, and the heartbeat writes made.
fn heartbeat_load(series: usize, rate: f64) -> (TimeDelta, usize) {
    let mut engine = three_minute_heartbeats(rate);
    let start = t0();
    let mut queue = std::collections::VecDeque::new();
    let mut landed = Landings::default();
    let mut heartbeats = 0;
    for s in 0..30 * 60 {
        let now = start + secs(s);
        if s < 10 {
            for i in (s as usize * series / 10)..((s as usize + 1) * series / 10) {
                feed_pod(&mut engine, i, 2, now);
            }
        }
        engine.tick(now);
        for intent in engine.take_intents() {
            heartbeats += usize::from(intent.kind == WriteKind::Heartbeat);
            queue.push_back(object::name_of(&intent.series));
        }
        for name in queue.drain(..queue.len().min(50)) {
            landed.land(name, now);
        }
    }
    (landed.longest(series, start + secs(30 * 60)), heartbeats)
}

/// When each object was last written, and the longest time one went between two writes.
#[derive(Default)]
struct Landings {
    last: BTreeMap<String, chrono::DateTime<chrono::Utc>>,
    longest: TimeDelta,
}

impl Landings {
    fn land(&mut self, name: String, now: chrono::DateTime<chrono::Utc>) {
        if let Some(before) = self.last.insert(name, now) {
            self.longest = self.longest.max(now - before);
        }
    }

    /// The longest gap of `objects` objects up to `end`: one not written since has gone that long.
    fn longest(&self, objects: usize, end: chrono::DateTime<chrono::Utc>) -> TimeDelta {
        assert_eq!(self.last.len(), objects);
        self.last
            .values()
            .map(|at| end - *at)
            .fold(self.longest, TimeDelta::max)
    }
}

/// 10,000 series at a 3-minute heartbeat need 55.6 writes/s, more than a writer of 50. Paced,
/// heartbeats are spaced up to the ceiling and every object is written again within the event TTL (6
/// minutes); unpaced (an unlimited rate, as before), the writer falls further behind every round and
/// objects expire between two writes.
#[test]
fn heartbeats_are_paced_to_the_writers_rate_within_the_event_ttl() {
    let (paced, paced_writes) = heartbeat_load(10_000, 37.5);
    let (unpaced, unpaced_writes) = heartbeat_load(10_000, f64::INFINITY);
    println!(
        "longest time between two landed writes of one object: paced {paced} ({paced_writes} \
         heartbeats), unpaced {unpaced} ({unpaced_writes} heartbeats)"
    );
    assert!(
        paced <= secs(360),
        "paced: an object went {paced} without a write"
    );
    assert!(
        paced > secs(180),
        "stretched beyond the 3-minute interval: {paced}"
    );
    assert!(
        unpaced > secs(360),
        "unpaced, the writer falls behind: {unpaced}"
    );
}

fn three_minutes() -> Settings {
    Settings {
        heartbeat_interval: TimeDelta::minutes(3),
        finish_after: TimeDelta::hours(2),
        series_window: TimeDelta::hours(2),
        ..Settings::default()
    }
}

/// An engine with a 3-minute heartbeat, a heartbeat share of `rate` a second and a 270 s ceiling
/// (3/4 of a 6-minute event TTL).
fn three_minute_heartbeats(rate: f64) -> Engine {
    Engine::new(
        PolicySet::uniform(three_minutes()),
        EngineConfig {
            heartbeat_rate: rate,
            heartbeat_ceiling: TimeDelta::seconds(270),
            ..Default::default()
        },
    )
}

/// As `just bench-heartbeats` found it: 10,000 series in 10 namespaces start at once (a first
/// list: namespace after namespace) under [`three_minute_heartbeats`] at 37.5 a second. The writer is the
/// operator's own queue (one pending write per series, namespaces served in turn) taking 50 writes
/// a second, each answered 3 s later while the engine ticks on; with `report`, each create or
/// heartbeat that lands is reported as the controller does. For 30 simulated minutes: the longest
/// time between two landed writes of one object, and the heartbeats the engine asked for.
fn heartbeats_behind_a_backlog(report: bool) -> (TimeDelta, usize) {
    use event_series::writer::queue::{Queue, Settled};
    use event_series::writer::{Answer, Verb};
    use event_series_core::intent::Landed;
    use std::time::{Duration, Instant};
    let mut engine = three_minute_heartbeats(37.5);
    let (start, clock) = (t0(), Instant::now());
    for ns in 0..10 {
        for i in 0..1_000 {
            let (ns, name) = (format!("ns-{ns}"), format!("p{i}"));
            let ev = legacy(&ns, &name, pod(&ns, &name), "BackOff", 2, start, start);
            engine.observe(start, &key::normalise(&ev).unwrap());
        }
    }
    let mut queue = Queue::new(200_000, 50_000);
    let mut in_flight = std::collections::VecDeque::new();
    let mut landed = Landings::default();
    let mut heartbeats = 0;
    for s in 0..30 * 60 {
        let (now, instant) = (start + secs(s), clock + Duration::from_secs(s as u64));
        engine.tick(now);
        for intent in engine.take_intents() {
            heartbeats += usize::from(intent.kind == WriteKind::Heartbeat);
            queue.push(instant, intent).unwrap();
        }
        while in_flight.front().is_some_and(|(at, _)| *at <= s) {
            let (_, job) = in_flight.pop_front().unwrap();
            let job: event_series::writer::queue::Job = job;
            let code = if job.verb == Verb::Create { 201 } else { 200 };
            let answer = Answer::Status {
                code,
                retry_after: None,
                message: String::new(),
            };
            // Each answer carries the object, at a new version: the next update's precondition.
            let version = event_series::writer::Version::Number(s as u64);
            queue.learn(&job.target, Some(version));
            let settled = queue.answered(instant, &job, &answer);
            assert!(
                matches!(settled, Settled::Done | Settled::Again { .. }),
                "{settled:?}"
            );
            landed.land(object::name_of(&job.intent.series), now);
            if report && (job.owed.create.is_some() || job.owed.heartbeat.is_some()) {
                let created = job.verb == Verb::Create;
                engine.written(&Landed::of(&job.intent, created, now));
            }
        }
        for job in queue.take_due(instant, 50) {
            in_flight.push_back((s + 3, job));
        }
    }
    (landed.longest(10_000, start + secs(30 * 60)), heartbeats)
}

/// Heartbeats booked from when their creates were asked for, all at once, overflow the calendar
/// and fall due together at the ceiling; the writer's backlog then holds the last of them past the
/// TTL of objects it created first. Timed from the writes that landed, every object is written
/// again well within the TTL.
#[test]
fn heartbeats_are_timed_from_the_writes_that_landed() {
    let (reported, reported_writes) = heartbeats_behind_a_backlog(true);
    let (unreported, unreported_writes) = heartbeats_behind_a_backlog(false);
    println!(
        "longest time between two landed writes of one object: reported {reported} \
         ({reported_writes} heartbeats), not reported {unreported} ({unreported_writes} heartbeats)"
    );
    assert!(
        reported <= secs(300),
        "reported: an object went {reported} without a write"
    );
    assert!(
        unreported > secs(360),
        "not reported, the backlog holds heartbeats past the TTL: {unreported}"
    );
}

/// The times of the heartbeats one series is asked to write in its first 10 minutes, when its
/// create is reported landed `create_after` after it was asked for, and its first heartbeat
/// `heartbeat_after` after.
fn heartbeat_times(create_after: Option<i64>, heartbeat_after: Option<i64>) -> Vec<i64> {
    use event_series_core::intent::Landed;
    let mut engine = three_minute_heartbeats(37.5);
    let start = t0();
    feed_pod(&mut engine, 0, 2, start);
    let create = engine.take_intents().remove(0);
    assert_eq!(create.kind, WriteKind::Create);
    let (mut times, mut first_heartbeat) = (Vec::new(), None);
    for s in 1..600 {
        let now = start + secs(s);
        engine.tick(now);
        for intent in engine.take_intents() {
            if intent.kind == WriteKind::Heartbeat {
                times.push(s);
                first_heartbeat.get_or_insert(intent);
            }
        }
        if create_after == Some(s) {
            engine.written(&Landed::of(&create, true, now));
        }
        if let Some(h) = &first_heartbeat
            && heartbeat_after == Some(s - times[0])
        {
            engine.written(&Landed::of(h, false, now));
        }
    }
    times
}

/// A report moves only the booking its state was taken with: a create reported after the series'
/// first heartbeat fired (and booked the next one) moves nothing; a heartbeat reported 20 s late
/// moves the next one by about as much, within the pacing's one-second slots.
#[test]
fn a_report_moves_only_the_booking_its_state_was_taken_with() {
    let alone = heartbeat_times(None, None);
    assert_eq!(alone.len(), 3, "{alone:?}");
    assert_eq!(
        heartbeat_times(Some(400), None),
        alone,
        "a create reported after the first heartbeat fired"
    );
    let late = heartbeat_times(None, Some(20));
    assert_eq!(late[0], alone[0]);
    assert!(
        (late[1] - alone[1] - 20).abs() <= 1,
        "the next heartbeat moved by the 20 s its predecessor waited: {late:?} against {alone:?}"
    );
}

/// A policy change re-files every series: a heartbeat the calendar pushed to its ceiling stays
/// booked where it was, never later (300 series at once, one heartbeat a second: most are pushed).
#[test]
fn a_policy_change_never_puts_a_heartbeat_off() {
    let first_heartbeats = |change_at: Option<i64>| {
        let mut engine = three_minute_heartbeats(1.0);
        let start = t0();
        for i in 0..300 {
            feed_pod(&mut engine, i, 2, start);
        }
        let mut first = BTreeMap::new();
        for s in 1..600 {
            let now = start + secs(s);
            if change_at == Some(s) {
                engine.set_policies(now, PolicySet::uniform(three_minutes()));
            }
            engine.tick(now);
            for intent in engine.take_intents() {
                if intent.kind == WriteKind::Heartbeat {
                    first.entry(object::name_of(&intent.series)).or_insert(s);
                }
            }
        }
        first
    };
    let unchanged = first_heartbeats(None);
    assert_eq!(unchanged.len(), 300);
    let changed = first_heartbeats(Some(60));
    for (name, at) in &changed {
        assert!(
            *at <= unchanged[name],
            "{name}: first heartbeat at {at} s after a policy change, {} s without",
            unchanged[name]
        );
    }
}

/// A loop of one occurrence every 10 s for `minutes`, with the default settings but `first_refresh`;
/// optionally restarted at `restart_at` minutes. The writes as (kind, seconds after the loop's
/// first occurrence, count written), and the occurrences fed.
fn ten_second_loop(
    first_refresh: TimeDelta,
    minutes: i64,
    restart_at: Option<i64>,
) -> (Vec<(WriteKind, i64, u64)>, u64) {
    let mut sim = Sim::new(Settings {
        first_refresh,
        ..Settings::default()
    });
    let start = sim.now;
    for i in 0..minutes * 6 {
        if restart_at == Some(i / 6) && i % 6 == 0 {
            sim.restart();
        }
        sim.occur("prod", "crash", "api-0", "BackOff", false);
        sim.advance(secs(10), secs(1));
    }
    sim.advance(TimeDelta::minutes(10), secs(1));
    let writes = sim
        .intents
        .iter()
        .map(|i| {
            (
                i.kind,
                (i.series.written_at - start).num_seconds(),
                i.series.count,
            )
        })
        .collect();
    (writes, sim.fed)
}

fn at_of(writes: &[(WriteKind, i64, u64)], kind: WriteKind) -> Vec<i64> {
    writes.iter().filter(|w| w.0 == kind).map(|w| w.1).collect()
}

/// written at the start, then 1, 2, 4, 8 and 16 minutes after it, then by the heartbeat
/// every 30 minutes; each refresh carries every occurrence up to it.
#[test]
fn early_refreshes_double_until_the_heartbeat_takes_over() {
    let (writes, fed) = ten_second_loop(TimeDelta::minutes(1), 120, None);
    assert_eq!(at_of(&writes, WriteKind::Create), [10]);
    assert_eq!(at_of(&writes, WriteKind::Refresh), [60, 120, 240, 480, 960]);
    for (kind, at, count) in &writes {
        if *kind == WriteKind::Refresh {
            // One occurrence every 10 s from 0; the tick at `at` comes before that second's.
            assert_eq!(*count, (*at / 10) as u64, "refresh at {at}s");
        }
    }
    let heartbeats = at_of(&writes, WriteKind::Heartbeat);
    assert_eq!(heartbeats.len(), 4, "{heartbeats:?}");
    assert!(
        (10 + 22 * 60 + 30..=10 + 30 * 60).contains(&heartbeats[0]),
        "{heartbeats:?}"
    );
    assert!(
        heartbeats.windows(2).all(|w| w[1] - w[0] == 30 * 60),
        "{heartbeats:?}"
    );
    let last = writes.last().unwrap();
    assert_eq!(
        (last.0, last.2),
        (WriteKind::Finish(FinishCause::Quiet), fed)
    );

    // Off: the same writes without the refreshes.
    let (off, _) = ten_second_loop(TimeDelta::zero(), 120, None);
    let without: Vec<_> = writes
        .iter()
        .filter(|w| w.0 != WriteKind::Refresh)
        .cloned()
        .collect();
    assert_eq!(off, without);
}

#[test]
fn a_refresh_with_nothing_new_is_skipped() {
    let mut sim = Sim::new(Settings::default());
    // Six occurrences in 50 s, then silence: the 1-minute refresh has news, the 2- and 4-minute
    // ones have none; the finish comes finishAfter (6m) after the last occurrence.
    for _ in 0..6 {
        sim.occur("prod", "crash", "api-0", "BackOff", false);
        sim.advance(secs(10), secs(1));
    }
    sim.advance(TimeDelta::minutes(10), secs(1));
    let kinds: Vec<_> = sim
        .intents
        .iter()
        .map(|i| (i.kind, i.series.count))
        .collect();
    assert_eq!(
        kinds,
        [
            (WriteKind::Create, 2),
            (WriteKind::Refresh, 6),
            (WriteKind::Finish(FinishCause::Quiet), 6)
        ]
    );
}

/// A restart in the middle of the doubling schedule neither repeats a refresh nor skips one, and
/// the counts stay exact.
#[test]
fn a_restart_mid_schedule_goes_on_with_the_next_refresh() {
    let (writes, fed) = ten_second_loop(TimeDelta::minutes(1), 40, Some(5));
    assert_eq!(at_of(&writes, WriteKind::Refresh), [60, 120, 240, 480, 960]);
    assert_eq!(at_of(&writes, WriteKind::Create), [10]);
    let last = writes.last().unwrap();
    assert_eq!(
        (last.0, last.2),
        (WriteKind::Finish(FinishCause::Quiet), fed)
    );
}

/// A standby books its heartbeats from the leader's writes it sees: a write another replica made
/// puts the series' next heartbeat an interval after it, and one seen late moves nothing back.
#[test]
fn a_write_seen_from_another_replica_books_the_next_heartbeat_from_it() {
    let settings = Settings {
        heartbeat_interval: secs(600),
        first_refresh: TimeDelta::zero(),
        finish_after: secs(3600),
        series_window: secs(3600),
        ..Settings::default()
    };
    let t0 = chrono::DateTime::from_timestamp(1_750_000_000, 0).unwrap();
    let mut engine = Engine::with_settings(settings);
    feed_pod(&mut engine, 1, 2, t0);
    let create = engine.take_intents().remove(0);
    assert_eq!(create.kind, WriteKind::Create);
    let s = &create.series;
    // The leader heartbeats 5 minutes late (its queue was long): seen here, at 5 minutes.
    engine.written_elsewhere(&s.namespace, s.id, s.first, t0 + secs(300));
    // Seen late, an older write of the leader's changes nothing.
    engine.written_elsewhere(&s.namespace, s.id, s.first, t0 + secs(100));
    // An object of an earlier series of the key books nothing.
    engine.written_elsewhere(&s.namespace, s.id, s.first - secs(1), t0 + secs(3000));
    let heartbeats_until = |engine: &mut Engine, t: i64| {
        engine.tick(t0 + secs(t));
        engine
            .take_intents()
            .into_iter()
            .filter(|i| i.kind == WriteKind::Heartbeat)
            .count()
    };
    // Without the leader's write, its first heartbeat would fall due by 600 s (spread earlier).
    assert_eq!(heartbeats_until(&mut engine, 650), 0);
    assert_eq!(heartbeats_until(&mut engine, 901), 1);
}
