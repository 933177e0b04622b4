//! The stored series object's format (`eventseries.dev/format`): every format ever released is
//! decoded, from a golden fixture per format under `tests/fixtures/`, and an object of a newer
//! format (a downgrade) is refused as a claim and never overwritten.
//!
//! The fixture of the current format is also what this build writes, byte for byte: a change to the
//! object's layout fails here until it is given a new format number and a fixture of its own
//! (`EVENT_SERIES_UPDATE_FIXTURES=1 cargo test --test formats` writes the current one).

// A scenario reads as one story from top to bottom: the function-length lint is for the product.
#![allow(clippy::too_many_lines)]

use chrono::{DateTime, TimeDelta, Utc};
use event_series::object::{
    self, Check, DecodeError, FORMAT, decode, is_own_object, to_event, to_update,
};
use event_series_core::engine::Engine;
use event_series_core::intent::{SeriesState, Snapshot, WriteKind};
use event_series_core::key;
use event_series_test_support::sim::{legacy, pod};
use k8s_openapi::api::events::v1::Event;
use std::path::PathBuf;

fn at() -> DateTime<Utc> {
    DateTime::from_timestamp(1_798_000_000, 123_456_000).expect("a valid time")
}

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

fn read(name: &str) -> Event {
    let text = std::fs::read_to_string(fixture(name)).expect("the fixture exists");
    serde_json::from_str(&text).expect("the fixture is an events.k8s.io/v1 Event")
}

/// The series of a loop of 5 occurrences, as the engine makes it: fixed times, fixed names.
fn snapshot() -> Snapshot {
    snapshot_of(5, None)
}

/// The series of a loop of `count` occurrences whose raw event says `message` (its reason's
/// message without one).
fn snapshot_of(count: i32, message: Option<&str>) -> Snapshot {
    let mut engine = Engine::with_settings(event_series_core::settings::Settings::default());
    let mut raw = legacy(
        "team-a",
        "web-0.raw",
        pod("team-a", "web-0"),
        "BackOff",
        count,
        at(),
        at() + TimeDelta::seconds(40),
    );
    if let Some(message) = message {
        raw.message = Some(message.to_owned());
    }
    engine.observe(
        at() + TimeDelta::seconds(40),
        &key::normalise(&raw).expect("readable"),
    );
    let create = engine
        .take_intents()
        .into_iter()
        .find(|i| i.kind == WriteKind::Create)
        .expect("a create");
    create.series
}

fn check() -> Check {
    Check {
        now: at() + TimeDelta::minutes(1),
        tolerance: TimeDelta::minutes(10),
    }
}

#[test]
fn this_build_writes_the_current_formats_fixture() {
    let written = serde_json::to_string_pretty(&to_event(&snapshot())).expect("serialises") + "\n";
    let name = format!("series-object-v{FORMAT}.json");
    if std::env::var("EVENT_SERIES_UPDATE_FIXTURES").as_deref() == Ok("1") {
        std::fs::write(fixture(&name), &written).expect("writes the fixture");
    }
    let golden = std::fs::read_to_string(fixture(&name)).unwrap_or_default();
    assert_eq!(
        written, golden,
        "the object this build writes is not tests/fixtures/{name}: a new layout needs a new format"
    );
}

#[test]
fn every_released_format_is_read() {
    let expected = snapshot();
    // v1, and the same layout without the annotation (builds before it existed).
    let mut unversioned = read("series-object-v1.json");
    if let Some(a) = unversioned.metadata.annotations.as_mut() {
        a.remove(object::FORMAT_ANNOTATION);
    }
    for (what, ev) in [
        ("v1", read("series-object-v1.json")),
        ("unversioned", unversioned),
    ] {
        let stored = decode(&ev, check()).unwrap_or_else(|e| panic!("{what}: {e}"));
        assert_eq!(stored.id, expected.id, "{what}");
        assert_eq!(stored.count, 5, "{what}");
        assert_eq!(stored.first, expected.first, "{what}");
        assert_eq!(stored.last, expected.last, "{what}");
        assert_eq!(stored.state, SeriesState::Ongoing, "{what}");
        assert_eq!(stored.sources, expected.sources, "{what}");
        assert!(is_own_object(&ev, &expected), "{what}");
    }
}

#[test]
fn a_newer_format_is_refused_and_never_overwritten() {
    let expected = snapshot();
    let mut newer = read(&format!("series-object-v{FORMAT}.json"));
    newer
        .metadata
        .annotations
        .get_or_insert_default()
        .insert(object::FORMAT_ANNOTATION.into(), (FORMAT + 1).to_string());
    let refused = decode(&newer, check()).expect_err("a newer format is not read");
    assert_eq!(
        refused,
        DecodeError::UnknownFormat {
            found: (FORMAT + 1).to_string(),
            newest: FORMAT
        }
    );
    assert_eq!(refused.reason(), "unknown_format");
    assert!(
        !is_own_object(&newer, &expected),
        "a newer object would be overwritten"
    );
}

/// An update of an existing series object, applied to the object as created, gives the object of
/// the newer state, except for the fields events.k8s.io/v1 keeps immutable (the note here, from an
/// occurrence with a message of its own), which stay as created; and it applies only to the
/// series' own object (its labels tested first).
#[test]
fn an_update_changes_what_an_update_may_and_only_in_the_series_own_object() {
    let created = snapshot_of(5, Some("first message"));
    let mut newer = snapshot_of(9, Some("a later message"));
    newer.state = SeriesState::Finished;
    newer.written_at = at() + TimeDelta::minutes(7);
    let as_created = serde_json::to_value(to_event(&created)).expect("serialises");
    let mut doc = as_created.clone();
    json_patch::patch(&mut doc, &to_update(&newer)).expect("applies to the series' own object");
    let mut expected = as_created.clone();
    let whole = serde_json::to_value(to_event(&newer)).expect("serialises");
    expected["metadata"] = whole["metadata"].clone();
    expected["series"] = whole["series"].clone();
    assert_eq!(doc, expected);
    assert_eq!(doc["note"], "first message");
    assert_eq!(doc["series"]["count"], 9);

    let mut copy = as_created;
    if let Some(meta) = copy["metadata"].as_object_mut() {
        meta.remove("labels");
        meta.remove("annotations");
    }
    assert!(
        json_patch::patch(&mut copy, &to_update(&newer)).is_err(),
        "an object without the series' labels is not written into"
    );
}
