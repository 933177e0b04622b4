//! Untrusted tenants and lying clocks, on the engine alone: fair bounds across namespaces, emitters
//! whose clocks are minutes off, exact counts under a bounded raw-count table and across a policy
//! change and a restart, and series objects read back as claims.

// A scenario reads as one story from top to bottom: the function-length lint is for the product.
#![allow(clippy::too_many_lines)]

use chrono::{DateTime, TimeDelta, Utc};
use event_series::object::{self, Check, DecodeError};
use event_series_core::engine::{Engine, EngineConfig};
use event_series_core::intent::{FinishCause, WriteKind};
use event_series_core::key;
use event_series_core::settings::{PolicySet, Settings};
use event_series_test_support::sim::*;
use k8s_openapi::api::events::v1 as events;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, Time};
use std::collections::BTreeMap;

fn secs(s: i64) -> TimeDelta {
    TimeDelta::seconds(s)
}

/// Objects by namespace, then by regarding name: their counts.
fn counts(sim: &Sim) -> BTreeMap<(String, String), Vec<u64>> {
    let mut out: BTreeMap<(String, String), Vec<u64>> = BTreeMap::new();
    for ((ns, _), ev) in &sim.store.objects {
        let pod = ev.regarding.as_ref().and_then(|r| r.name.clone());
        let count = ev.series.as_ref().map_or(0, |s| s.count as u64);
        out.entry((ns.clone(), pod.unwrap_or_default()))
            .or_default()
            .push(count);
    }
    out
}

fn evictions_in(sim: &Sim, ns: &str) -> usize {
    sim.intents
        .iter()
        .filter(|i| i.kind == WriteKind::Finish(FinishCause::Evicted) && &*i.series.namespace == ns)
        .count()
}

/// A quiet namespace's three slow loops and a flood of 100 new keys in another namespace under
/// `maxActiveSeries: 20`: the flood gives up its own series, the quiet loops keep one object each
/// with every occurrence.
#[test]
fn a_flood_in_one_namespace_never_gives_up_a_quiet_namespaces_series() {
    let mut sim = Sim::new(Settings {
        max_active_series: 20,
        ..Settings::default()
    });
    let mut fed_quiet = BTreeMap::new();
    let mut flood = 0;
    for second in 0..600 {
        if second % 60 == 0 {
            for q in 0..3 {
                let pod = format!("quiet-{q}");
                sim.occur("quiet", &format!("{pod}.raw"), &pod, "BackOff", false);
                *fed_quiet.entry(pod).or_insert(0u64) += 1;
            }
        }
        if second % 2 == 0 && flood < 100 {
            let pod = format!("flood-{flood}");
            sim.occur_n("flood", &format!("{pod}.raw"), &pod, "BackOff", false, 2);
            flood += 1;
        }
        sim.advance(secs(1), secs(1));
    }
    sim.advance(TimeDelta::minutes(10), secs(5));
    let c = counts(&sim);
    for (pod, fed) in &fed_quiet {
        assert_eq!(
            c.get(&("quiet".to_owned(), pod.clone())),
            Some(&vec![*fed]),
            "{pod}: one object with every occurrence"
        );
    }
    assert_eq!(evictions_in(&sim, "quiet"), 0);
    assert!(evictions_in(&sim, "flood") >= 80);
    assert_eq!(
        sim.engine.stats().evicted_by_policy as usize,
        evictions_in(&sim, "flood")
    );
}

/// A flood of one-off keys beyond the candidate bound (1,024 here) between two occurrences of a quiet
/// loop: the flooding namespace gives up its own candidates, so the quiet loop still reaches its
/// second occurrence and gets its series.
#[test]
fn a_flood_of_one_off_keys_cannot_keep_a_quiet_loop_from_its_series() {
    let settings = Settings {
        max_active_series: 20,
        ..Settings::default()
    };
    let bound = settings.max_candidates();
    let mut sim = Sim::new(settings);
    let mut flood = 0;
    for _ in 0..3 {
        sim.occur("quiet", "web-0.raw", "web-0", "BackOff", false);
        for _ in 0..bound + 100 {
            let pod = format!("flood-{flood}");
            sim.occur("flood", &format!("{pod}.raw"), &pod, "BackOff", false);
            flood += 1;
        }
        sim.advance(secs(60), secs(10));
    }
    sim.advance(TimeDelta::minutes(10), secs(5));
    let c = counts(&sim);
    assert_eq!(
        c.get(&("quiet".to_owned(), "web-0".to_owned())),
        Some(&vec![3]),
        "the quiet loop's one object with every occurrence"
    );
    assert!(
        sim.engine.stats().candidates_evicted > 0,
        "the flood hit the bound"
    );
}

/// A tenant whose Events carry every field at its limit and count two at once (each a series at
/// once, never a candidate) fills a 1 MiB key budget with 260 series, beside another namespace's
/// loop of 5 occurrences 20 s apart: the tenant's own series are given up, each written Finished
/// and counted once, and the loop becomes one series of 5. (Before: the key budget gave up the
/// namespace holding the most candidates, the loop's first occurrence each time, and the loop never
/// got a series.)
#[test]
fn series_at_every_limit_fill_the_key_budget_at_their_own_cost() {
    const BUDGET: usize = 1 << 20;
    let config = EngineConfig {
        key_bytes: BUDGET,
        ..EngineConfig::default()
    };
    let mut engine = Engine::new(PolicySet::uniform(Settings::default()), config);
    let t = t0();
    // 250 of the tenant's series at once (the budget holds about 240), then 2 more after each
    // occurrence of the loop.
    let flood = |engine: &mut Engine, range: std::ops::Range<usize>, at: DateTime<Utc>| {
        for i in range {
            let (raw, pod) = (format!("f{i}.raw"), format!("f{i}"));
            let mut ev = event_series_test_support::raw::at_every_limit("flood", &raw, &pod, 2);
            ev.first_timestamp = Some(Time(jiff(at)));
            ev.last_timestamp = ev.first_timestamp.clone();
            engine.observe(at, &key::normalise(&ev).unwrap());
            assert!(engine.key_bytes().0 <= BUDGET, "{:?}", engine.key_bytes());
        }
    };
    flood(&mut engine, 0..250, t);
    let mut intents = engine.take_intents();
    for n in 1..=5 {
        let at = t + secs(20 * i64::from(n));
        let first = t + secs(20);
        let ev = legacy(
            "quiet",
            "web.raw",
            pod("quiet", "web"),
            "BackOff",
            n,
            first,
            at,
        );
        engine.observe(at, &key::normalise(&ev).unwrap());
        let n = n as usize;
        flood(&mut engine, 250 + 2 * (n - 1)..250 + 2 * n, at);
        engine.tick(at);
        intents.extend(engine.take_intents());
    }
    assert!(
        engine.stats().evicted_by_bytes > 0,
        "260 keys at every limit fit 1 MiB"
    );
    engine.tick(t + TimeDelta::minutes(30));
    intents.extend(engine.take_intents());
    // Its writes: the create, early refreshes, one finish.
    let quiet: Vec<_> = intents
        .iter()
        .filter(|i| &*i.series.namespace == "quiet" && i.kind != WriteKind::Refresh)
        .map(|i| (i.kind, i.series.count))
        .collect();
    assert_eq!(
        quiet,
        [
            (WriteKind::Create, 2),
            (WriteKind::Finish(FinishCause::Quiet), 5)
        ],
        "the quiet loop's one series of 5 ({} flood series given up)",
        engine.stats().evicted_by_bytes
    );
    let evicted: Vec<_> = intents
        .iter()
        .filter(|i| i.kind == WriteKind::Finish(FinishCause::Evicted))
        .collect();
    assert!(evicted.iter().all(|i| &*i.series.namespace == "flood"));
    assert_eq!(evicted.len() as u64, engine.stats().evicted_by_bytes);
}

/// At the bound, a tie between the namespace that was there first and the one whose new series
/// pushed the policy over goes against the newcomer.
#[test]
fn a_tie_at_the_bound_goes_against_the_namespace_that_pushed_over_it() {
    let mut sim = Sim::new(Settings {
        max_active_series: 3,
        ..Settings::default()
    });
    for pod in ["q-0", "q-1"] {
        sim.occur_n("quiet", &format!("{pod}.raw"), pod, "BackOff", false, 2);
    }
    for pod in ["t-0", "t-1"] {
        sim.occur_n("tenant", &format!("{pod}.raw"), pod, "BackOff", false, 2);
    }
    assert_eq!(
        evictions_in(&sim, "quiet"),
        0,
        "the quiet namespace keeps both"
    );
    assert_eq!(evictions_in(&sim, "tenant"), 1);
}

#[test]
fn max_active_series_per_namespace_caps_one_namespace_alone() {
    let mut sim = Sim::new(Settings {
        max_active_series_per_namespace: 10,
        ..Settings::default()
    });
    for i in 0..30 {
        let pod = format!("flood-{i}");
        sim.occur_n("flood", &format!("{pod}.raw"), &pod, "BackOff", false, 2);
        let pod = format!("other-{i}");
        if i < 5 {
            sim.occur_n("other", &format!("{pod}.raw"), &pod, "BackOff", false, 2);
        }
        sim.advance(secs(1), secs(1));
    }
    assert_eq!(sim.engine.active_series(), 15);
    assert_eq!(evictions_in(&sim, "flood"), 20);
    assert_eq!(evictions_in(&sim, "other"), 0);
    let stats = sim.engine.stats();
    assert_eq!(
        (stats.evicted_by_namespace, stats.evicted_by_policy),
        (20, 0)
    );
}

/// Emitters whose clocks are 7 minutes behind and 5 minutes ahead of the operator's: each loop
/// gets one series with every occurrence, finished once after it goes quiet.
#[test]
fn emitters_with_clocks_minutes_off_get_their_series_with_exact_counts() {
    for skew in [secs(-7 * 60), secs(5 * 60), secs(-11 * 60), secs(30 * 60)] {
        let mut sim = Sim::new(Settings::default());
        sim.skew = skew;
        for _ in 0..18 {
            sim.occur("a", "web-0.raw", "web-0", "BackOff", false);
            sim.occur("a", "job-0.raw", "job-0", "Failed", true);
            sim.advance(secs(10), secs(1));
        }
        sim.advance(TimeDelta::minutes(10), secs(5));
        let c = counts(&sim);
        for pod in ["web-0", "job-0"] {
            assert_eq!(
                c.get(&("a".to_owned(), pod.to_owned())),
                Some(&vec![18]),
                "skew {skew}: {pod}"
            );
        }
        let stats = sim.engine.stats();
        assert_eq!(stats.dropped_stale, 0, "skew {skew}");
        let (creates, _, finishes) = sim.count_kinds();
        assert_eq!(
            (creates, finishes),
            (2, 2),
            "skew {skew}: creates, finishes"
        );
        // Early refreshes follow the series' own start (what a reader sees as its age); no
        // heartbeat in a 3-minute loop.
        assert!(
            sim.intents.iter().all(|i| i.kind != WriteKind::Heartbeat),
            "skew {skew}"
        );
    }
}

/// `includeNote` switched on live, then the operator restarted: no occurrence is counted twice,
/// though the series after the switch is a new key.
#[test]
fn include_note_toggled_live_and_a_restart_count_nothing_twice() {
    let mut sim = Sim::new(Settings::default());
    for round in 0..3 {
        for _ in 0..5 {
            sim.occur("a", "web-0.raw", "web-0", "BackOff", false);
            sim.occur("a", &format!("job-{round}.raw"), "job", "Failed", true);
            sim.advance(secs(10), secs(1));
        }
        let include_note = round % 2 == 0;
        sim.set_policies(PolicySet::uniform(Settings {
            include_note,
            ..Settings::default()
        }));
        sim.restart();
    }
    sim.advance(TimeDelta::minutes(10), secs(5));
    let total: u64 = counts(&sim).values().flatten().sum();
    assert_eq!(total, sim.fed);
}

/// A raw-count table of 2 objects, many raw objects, relists and a restart: an object forgotten by
/// the table and seen again is measured against its key's record, never counted from zero.
#[test]
fn raw_objects_forgotten_by_a_bounded_table_are_not_counted_again() {
    let config = EngineConfig {
        raw_capacity: 2,
        ..EngineConfig::default()
    };
    let mut sim = Sim::with_config(PolicySet::uniform(Settings::default()), config);
    for round in 0..6 {
        for pod in 0..4 {
            let p = format!("web-{pod}");
            sim.occur_n("a", &format!("{p}.raw"), &p, "BackOff", false, 2);
        }
        sim.advance(secs(20), secs(1));
        match round {
            2 => sim.restart(),
            _ => sim.relist(),
        }
    }
    sim.advance(TimeDelta::minutes(10), secs(5));
    assert!(sim.engine.stats().raw_evicted > 0);
    let c = counts(&sim);
    for pod in 0..4 {
        let key = ("a".to_owned(), format!("web-{pod}"));
        assert_eq!(c.get(&key), Some(&vec![12]), "{key:?}");
    }
}

/// The namespaces table forgets a namespace that went away once nothing of it is left.
#[test]
fn the_namespaces_table_shrinks_when_namespaces_go() {
    let mut engine = Engine::with_settings(Settings {
        finish_after: secs(20),
        series_window: secs(20),
        ..Settings::default()
    });
    let t = t0();
    for ns in ["a", "b", "c"] {
        let ev = legacy(ns, "r", pod(ns, "p"), "BackOff", 2, t, t);
        engine.observe(t, &key::normalise(&ev).unwrap());
    }
    assert_eq!(engine.namespaces_known(), 3);
    // A deleted namespace's series end with it (nothing can be written there any more), so its
    // entry goes at the next housekeeping; the others stay while they hold series.
    engine.namespace_removed("b");
    engine.housekeep(t);
    assert_eq!(engine.namespaces_known(), 2, "b is forgotten at once");
    assert_eq!(engine.active_series(), 2);
    engine.tick(t + secs(30));
    engine.housekeep(t + TimeDelta::hours(2));
    assert_eq!(engine.namespaces_known(), 2, "a and c are still known");
    // A namespace of the same name created again starts afresh.
    let ev = legacy(
        "b",
        "r2",
        pod("b", "p"),
        "BackOff",
        2,
        t,
        t + TimeDelta::hours(2),
    );
    engine.observe(t + TimeDelta::hours(2), &key::normalise(&ev).unwrap());
    assert_eq!(engine.namespaces_known(), 3);
}

fn genuine() -> (events::Event, DateTime<Utc>) {
    let mut sim = Sim::new(Settings::default());
    sim.occur_n("victim", "web-0.raw", "web-0", "BackOff", false, 3);
    let obj = sim.store.objects.values().next().cloned().unwrap();
    (obj, sim.now)
}

fn check(now: DateTime<Utc>) -> Check {
    Check {
        now,
        tolerance: TimeDelta::minutes(10),
    }
}

#[test]
fn a_series_object_copied_into_another_namespace_is_not_adopted() {
    let (obj, now) = genuine();
    assert!(object::decode(&obj, check(now)).is_ok());
    let mut copy = obj.clone();
    copy.metadata.namespace = Some("tenant".into());
    let e = object::decode(&copy, check(now)).unwrap_err();
    assert_eq!(e.reason(), "key_mismatch", "{e}");
    // Its regarding rewritten to the tenant's namespace too: the key label still names the victim.
    if let Some(r) = copy.regarding.as_mut() {
        r.namespace = Some("tenant".into());
    }
    assert_eq!(
        object::decode(&copy, check(now)).unwrap_err().reason(),
        "key_mismatch"
    );
    let mut edited = obj.clone();
    edited.reason = Some("Other".into());
    assert_eq!(
        object::decode(&edited, check(now)).unwrap_err().reason(),
        "key_mismatch"
    );
}

#[test]
fn a_series_object_under_another_name_or_with_bad_annotations_is_not_adopted() {
    let (obj, now) = genuine();
    let mut renamed = obj.clone();
    renamed.metadata.name = Some("web-0.0000000000000000".into());
    assert!(matches!(
        object::decode(&renamed, check(now)),
        Err(DecodeError::NameMismatch { .. })
    ));
    // Its alternative names (taken when someone else's Event held the first) are its own, up to
    // the last; any other suffix is not.
    let name = obj.metadata.name.clone().unwrap();
    for v in 1..=object::MAX_NAME_VARIANT {
        let mut alt = obj.clone();
        alt.metadata.name = Some(format!("{name}-{v}"));
        assert_eq!(object::decode(&alt, check(now)).unwrap().name_variant, v);
    }
    assert_eq!(object::decode(&obj, check(now)).unwrap().name_variant, 0);
    for suffix in ["-4", "-0", "-11", "x"] {
        let mut alt = obj.clone();
        alt.metadata.name = Some(format!("{name}{suffix}"));
        assert!(
            matches!(
                object::decode(&alt, check(now)),
                Err(DecodeError::NameMismatch { .. })
            ),
            "{suffix}"
        );
    }
    let mut garbled = obj.clone();
    if let Some(a) = garbled.metadata.annotations.as_mut() {
        a.insert("eventseries.dev/sources".into(), "not-a-source".into());
    }
    assert_eq!(
        object::decode(&garbled, check(now)).unwrap_err().reason(),
        "unparsable"
    );
}

#[test]
fn a_far_future_time_in_a_series_object_is_clamped_to_now() {
    let (mut obj, now) = genuine();
    let far = now + TimeDelta::days(3650);
    if let Some(s) = obj.series.as_mut() {
        s.last_observed_time = MicroTime(jiff(far));
    }
    let claim = object::decode(&obj, check(now)).unwrap();
    assert_eq!(claim.last, now);
    // Within the tolerance it is kept.
    let near = now + TimeDelta::minutes(5);
    if let Some(s) = obj.series.as_mut() {
        s.last_observed_time = MicroTime(jiff(near));
    }
    assert_eq!(object::decode(&obj, check(now)).unwrap().last, near);
}

/// A start beyond the tolerance cannot be clamped: the object's name is derived from it, so the
/// adopted series would be written under another name and the claimed object left Ongoing.
#[test]
fn a_series_object_starting_in_the_future_is_not_adopted() {
    let (obj, now) = genuine();
    let e = object::decode(&obj, check(now - TimeDelta::days(1))).unwrap_err();
    assert_eq!(e.reason(), "future_start", "{e}");
    // Within the tolerance (the operator's clock a little behind the emitter's) it is adopted
    // under its own name.
    let claim = object::decode(&obj, check(now - TimeDelta::minutes(5))).unwrap();
    let stored = obj.event_time.as_ref().map(|t| t.0);
    assert_eq!(
        Some(jiff(claim.first)),
        stored,
        "its start is kept as stored"
    );
}

/// Raw event ids are public (the hash of a uid anyone with `view` reads), so a tenant's own,
/// well-formed series object may list another namespace's raw event among its sources: that claim
/// must not stand for the victim's occurrences at a restart.
#[test]
fn a_claim_in_one_namespace_cannot_vouch_for_another_namespaces_raw_events() {
    let mut sim = Sim::new(Settings::default());
    // The victim's series object is written at the second occurrence; the third is not yet.
    sim.occur_n("victim", "web-0.raw", "web-0", "BackOff", false, 1);
    sim.occur_n("victim", "web-0.raw", "web-0", "BackOff", false, 1);
    sim.occur_n("victim", "web-0.raw", "web-0", "BackOff", false, 1);
    sim.occur_n("tenant", "t.raw", "t-0", "BackOff", false, 2);
    let victim_raw = key::RawId::of("victim", "web-0.raw", "raw-victim-web-0.raw");
    let forged = sim
        .store
        .objects
        .iter_mut()
        .find(|((ns, _), _)| ns == "tenant")
        .map(|(_, o)| o)
        .expect("the tenant's series object");
    forged.metadata.annotations.get_or_insert_default().insert(
        object::SOURCES_ANNOTATION.to_owned(),
        format!("{victim_raw}=1000"),
    );
    sim.restart();
    sim.occur_n("victim", "web-0.raw", "web-0", "BackOff", false, 1);
    sim.occur_n("victim", "web-0.raw", "web-0", "BackOff", false, 1);
    sim.advance(TimeDelta::minutes(10), secs(5));
    let c = counts(&sim);
    assert_eq!(
        c[&("victim".to_owned(), "web-0".to_owned())],
        vec![5],
        "every occurrence of the victim's loop, whatever the tenant's object claims"
    );
}

/// One raw object feeds the series of two keys (`includeNote` switched between them), and the
/// operator restarts while both are Ongoing: still every occurrence once.
#[test]
fn one_raw_object_across_an_include_note_switch_and_a_restart_counts_exactly() {
    let mut sim = Sim::new(Settings::default());
    let burst = |sim: &mut Sim| {
        for _ in 0..5 {
            sim.occur("a", "web-0.raw", "web-0", "BackOff", false);
            sim.advance(secs(1), secs(1));
        }
    };
    burst(&mut sim);
    sim.set_policies(PolicySet::uniform(Settings {
        include_note: true,
        ..Settings::default()
    }));
    burst(&mut sim);
    sim.restart();
    burst(&mut sim);
    sim.advance(TimeDelta::minutes(10), secs(5));
    let c = counts(&sim);
    let objects = &c[&("a".to_owned(), "web-0".to_owned())];
    assert_eq!(objects.iter().sum::<u64>(), 15, "{objects:?}");
}
