//! Odd raw events map to series objects that the events.k8s.io/v1 API accepts, and successive writes
//! of one series never touch a field the API makes immutable. The rules, restated from the
//! apiserver's `ValidateEventCreate`/`ValidateEventUpdate`, are the fuzz targets'
//! (`event_series_test_support::check`); the end-to-end tests check them against the real apiserver.

// A scenario reads as one story from top to bottom: the function-length lint is for the product.
#![allow(clippy::too_many_lines)]

use chrono::TimeDelta;
use event_series::object::to_event;
use event_series_core::engine::Engine;
use event_series_core::intent::Intent;
use event_series_core::key;
use event_series_test_support::check::{self, immutable};
use event_series_test_support::sim::*;
use k8s_openapi::api::core::v1::{Event, ObjectReference};
use k8s_openapi::api::events::v1 as events;

/// The create rules, the raw namespace being a valid one.
fn create_errors(e: &events::Event) -> Vec<String> {
    check::create_errors(e, true)
}

fn odd_events() -> Vec<(&'static str, Event)> {
    let now = t0();
    let base = || {
        legacy(
            "team-a",
            "raw",
            pod("team-a", "web-0"),
            "BackOff",
            2,
            now,
            now,
        )
    };
    let mut out = Vec::new();
    let mut e = base();
    e.source = None;
    out.push(("missing source", e));
    let mut e = base();
    e.action = Some(String::new());
    e.reason = None;
    out.push(("empty action and reason", e));
    let mut e = base();
    e.message = Some("x".repeat(10 * 1024));
    out.push(("10 KiB message", e));
    let mut e = base();
    e.message = Some("🚀 ünïcödé ".repeat(200));
    e.reason = Some("Ünïcode".repeat(40));
    out.push(("unicode, long reason", e));
    let mut e = base();
    e.involved_object = ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Node".into()),
        name: Some("node-1".into()),
        uid: Some("node-uid".into()),
        ..Default::default()
    };
    // The API takes an event about a cluster-scoped object only in `default` (or `kube-system`):
    // the series object goes there too, the raw event's namespace.
    e.metadata.namespace = Some("default".into());
    out.push(("cluster-scoped regarding in default", e));
    let mut e = base();
    e.reporting_component = Some("My Controller (v2)!".into());
    e.reporting_instance = Some("i".repeat(300));
    out.push(("invalid reportingController, long instance", e));
    let mut e = base();
    e.type_ = Some("Error".into());
    e.involved_object.name = Some("UPPER_case.Name-with..dots".repeat(12));
    out.push(("custom type, odd name", e));
    let mut e = base();
    e.type_ = None;
    e.involved_object = ObjectReference::default();
    // An empty regarding has no namespace either: the API takes it only in `default`.
    e.metadata.namespace = Some("default".into());
    out.push(("no type, empty regarding", e));
    out
}

#[test]
fn every_odd_event_becomes_a_valid_series_object() {
    for (what, ev) in odd_events() {
        let mut engine = Engine::with_settings(fast_settings());
        let obs = key::normalise(&ev).unwrap_or_else(|e| panic!("{what}: {e}"));
        engine.observe(t0(), &obs);
        let intents: Vec<Intent> = engine.take_intents();
        assert_eq!(intents.len(), 1, "{what}: one Create");
        let obj = to_event(&intents[0].series);
        assert_eq!(
            create_errors(&obj),
            Vec::<String>::new(),
            "{what}: {obj:#?}"
        );
    }
}

#[test]
fn writes_of_one_series_keep_immutable_fields() {
    for (what, ev) in odd_events() {
        let mut engine = Engine::with_settings(fast_settings());
        let mut writes = Vec::new();
        let mut now = t0();
        let mut ev = ev;
        for i in 0..200 {
            ev.count = Some(2 + i);
            ev.last_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(jiff(
                now,
            )));
            engine.observe(now, &key::normalise(&ev).unwrap());
            now += TimeDelta::seconds(1);
            engine.tick(now);
            writes.extend(engine.take_intents());
        }
        engine.tick(now + TimeDelta::minutes(5));
        writes.extend(engine.take_intents());
        assert!(writes.len() >= 3, "{what}: create, heartbeats, finish");
        let objs: Vec<_> = writes.iter().map(|i| to_event(&i.series)).collect();
        for o in &objs {
            assert_eq!(create_errors(o), Vec::<String>::new(), "{what}");
            assert_eq!(immutable(o), immutable(&objs[0]), "{what}");
        }
        let counts: Vec<i32> = objs
            .iter()
            .map(|o| o.series.as_ref().unwrap().count)
            .collect();
        assert!(
            counts.windows(2).all(|w| w[0] <= w[1]),
            "{what}: {counts:?}"
        );
        assert_eq!(*counts.last().unwrap(), 201, "{what}");
    }
}

#[test]
fn a_rebuilt_series_writes_the_same_object() {
    for (what, ev) in odd_events() {
        let mut engine = Engine::with_settings(fast_settings());
        engine.observe(t0(), &key::normalise(&ev).unwrap());
        let created = to_event(&engine.take_intents()[0].series);
        let check = event_series::object::Check {
            now: t0(),
            tolerance: chrono::TimeDelta::minutes(10),
        };
        let persisted =
            event_series::object::decode(&created, check).unwrap_or_else(|e| panic!("{what}: {e}"));
        let mut rebuilt = Engine::with_settings(fast_settings());
        rebuilt.begin_recovery();
        rebuilt.restore(t0(), persisted);
        rebuilt.end_recovery(t0(), t0());
        let again = to_event(&rebuilt.active(t0())[0]);
        assert_eq!(
            immutable(&again),
            immutable(&created),
            "{what}: mapping is idempotent"
        );
        assert_eq!(again.metadata.labels, created.metadata.labels, "{what}");
    }
}

#[test]
fn bookkeeping_on_the_object_stays_under_one_kib() {
    // One series fed by many raw objects (a controller with varying messages).
    let mut engine = Engine::with_settings(fast_settings());
    let now = t0();
    for i in 0..100 {
        let mut ev = legacy(
            "a",
            &format!("raw-{i}"),
            pod("a", "rs"),
            "SuccessfulCreate",
            1,
            now,
            now,
        );
        ev.count = Some(i32::MAX - i);
        engine.observe(now, &key::normalise(&ev).unwrap());
    }
    let snap = &engine.active(now)[0];
    assert_eq!(snap.sources.len(), event_series_core::intent::MAX_SOURCES);
    let obj = to_event(snap);
    let bytes = check::annotation_bytes(&obj);
    assert!(bytes < 1024, "annotations take {bytes} bytes");
}
