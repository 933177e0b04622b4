//! The `event-series get` table to the character, from series objects built here and a fixed clock
//! (Reading). The expected text lives in `tests/snapshots/`: a change to the table shows there
//! as a diff to review.

// A scenario reads as one story from top to bottom: the function-length lint is for the product.
#![allow(clippy::too_many_lines)]

use chrono::{DateTime, TimeDelta, Utc};
use event_series::reading::table::{Filter, Layout, render, rows};
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::{Event, EventSeries};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use std::collections::BTreeMap;

fn now() -> DateTime<Utc> {
    DateTime::from_timestamp(1_800_000_000, 0).unwrap_or_default()
}

fn micro(t: DateTime<Utc>) -> MicroTime {
    MicroTime(Timestamp::from_microsecond(t.timestamp_micros()).unwrap_or_default())
}

/// A series object as the operator writes it: started `ago` before now, last seen `last_ago` before.
#[allow(clippy::too_many_arguments)]
fn series(
    ns: &str,
    kind: &str,
    name: &str,
    reason: &str,
    count: i32,
    state: &str,
    ago: i64,
    last_ago: i64,
    note: &str,
) -> Event {
    let started = now() - TimeDelta::seconds(ago);
    let last = now() - TimeDelta::seconds(last_ago);
    Event {
        metadata: ObjectMeta {
            name: Some(format!("{name}.{:016x}", ago)),
            namespace: Some(ns.to_owned()),
            labels: Some(BTreeMap::from([
                ("app.kubernetes.io/managed-by".into(), "event-series".into()),
                ("eventseries.dev/state".into(), state.into()),
            ])),
            ..Default::default()
        },
        event_time: Some(micro(started)),
        series: (count > 1).then(|| EventSeries {
            count,
            last_observed_time: micro(last),
        }),
        regarding: Some(ObjectReference {
            kind: Some(kind.into()),
            name: Some(name.into()),
            namespace: Some(ns.into()),
            ..Default::default()
        }),
        reason: Some(reason.into()),
        note: Some(note.into()),
        reporting_controller: Some("kubelet".into()),
        reporting_instance: Some("node-1".into()),
        action: Some("Restart".into()),
        type_: Some("Warning".into()),
        ..Default::default()
    }
}

/// `ev` as last written by the operator `ago` seconds before now.
fn written(mut ev: Event, ago: i64) -> Event {
    let at = (now() - TimeDelta::seconds(ago)).to_rfc3339_opts(chrono::SecondsFormat::Micros, true);
    ev.metadata.annotations = Some(BTreeMap::from([("eventseries.dev/written-at".into(), at)]));
    ev
}

fn fixture() -> Vec<Event> {
    vec![
        // A crash loop of a day and a half, still going; last written by a heartbeat 9 minutes ago.
        written(
            series(
                "shop",
                "Pod",
                "web-0",
                "BackOff",
                1_290,
                "Ongoing",
                36 * 3_600,
                550,
                "Back-off restarting failed container web in pod web-0_shop(1a2b)",
            ),
            540,
        ),
        // Unschedulable for 32 minutes, ended 88 minutes ago; finished 82 minutes ago.
        written(
            series(
                "shop",
                "Pod",
                "db-0",
                "FailedScheduling",
                14,
                "Finished",
                2 * 3_600,
                3_600 + 1_680,
                "0/3 nodes are available: 3 Insufficient memory.\npreemption: 0/3 nodes are available",
            ),
            3_600 + 1_320,
        ),
        // A quota loop in another namespace, 150 seconds old, refreshed two minutes after its start.
        written(
            series(
                "batch",
                "ReplicaSet",
                "etl-7d9f",
                "FailedCreate",
                31,
                "Ongoing",
                150,
                40,
                &"x".repeat(300),
            ),
            35,
        ),
        // Half a minute of a loop: too short for a rate.
        written(
            series(
                "shop",
                "Pod",
                "api-1",
                "Unhealthy",
                3,
                "Ongoing",
                40,
                30,
                "Readiness probe failed",
            ),
            25,
        ),
        // One occurrence recorded (a series object always has two; here the count field is absent).
        series(
            "batch",
            "Job",
            "nightly",
            "BackoffLimitExceeded",
            1,
            "Finished",
            9 * 86_400,
            9 * 86_400,
            "Job has reached the specified backoff limit",
        ),
    ]
}

fn check(name: &str, got: &str) {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/snapshots")
        .join(name);
    let want = std::fs::read_to_string(&path).unwrap_or_default();
    assert_eq!(got, want, "{} differs; got:\n{got}", path.display());
}

#[test]
fn the_table_of_one_namespace_newest_last() {
    let events: Vec<Event> = fixture()
        .into_iter()
        .filter(|e| e.metadata.namespace.as_deref() == Some("shop"))
        .collect();
    let (text, _) = render(&rows(&events, &Filter::default()), Layout::default(), now());
    check("get.txt", &text);
}

#[test]
fn the_wide_table_of_all_namespaces() {
    let layout = Layout {
        namespaces: true,
        wide: true,
        ..Layout::default()
    };
    let (text, _) = render(&rows(&fixture(), &Filter::default()), layout, now());
    check("get-all-wide.txt", &text);
}

#[test]
fn no_headers_prints_the_same_rows_without_the_header() {
    let all = rows(&fixture(), &Filter::default());
    let (with, _) = render(&all, Layout::default(), now());
    let bare = Layout {
        no_headers: true,
        ..Layout::default()
    };
    let (without, _) = render(&all, bare, now());
    assert_eq!(without.lines().count(), all.len());
    assert!(with.starts_with("OBJECT"), "{with}");
    let squeeze = |s: &str| s.split_whitespace().collect::<Vec<_>>().join(" ");
    let rows_only: Vec<String> = with.lines().skip(1).map(squeeze).collect();
    assert_eq!(without.lines().map(squeeze).collect::<Vec<_>>(), rows_only);
}

#[test]
fn for_selects_one_object_whatever_the_case_of_its_kind() {
    let filter = Filter {
        regarding: Some(("replicaset".into(), "etl-7d9f".into())),
    };
    let selected = rows(&fixture(), &filter);
    assert_eq!(selected.len(), 1);
    assert_eq!(selected[0].object, "replicaset/etl-7d9f");
    assert_eq!(selected[0].count, 31);
}

/// a tenant's Event may hold any characters in every field the table prints; none reaches
/// the terminal as a control or format character (escape sequences, OSC 52, bidi overrides), in
/// the table, `-o wide` and the `--watch` rows (which print the same cells).
mod tenant_text {
    use super::*;
    use proptest::prelude::*;

    /// What a terminal must never receive from an object's text: C0 (but the table's own line
    /// ends), DEL, C1, and the bidi and invisible format characters.
    fn unsafe_char(c: char) -> bool {
        (c.is_control() && c != '\n')
            || matches!(c as u32, 0xad | 0x061c | 0x180e | 0x200b..=0x200f | 0x2028..=0x202e
                | 0x2060..=0x206f | 0xfeff | 0xfff9..=0xfffb)
    }

    fn text() -> impl Strategy<Value = String> {
        prop_oneof![
            any::<String>(),
            // Terminal sequences as an attacker writes them.
            Just("\u{1b}[2J\u{1b}]52;c;aGVsbG8=\u{7}\u{9b}31m\u{202e}gnp.exe\u{7f}".to_owned()),
            proptest::collection::vec(0u32..0x2070, 0..40)
                .prop_map(|v| v.into_iter().filter_map(char::from_u32).collect()),
        ]
    }

    proptest! {
        #[test]
        fn no_control_or_format_character_is_printed(
            ns in text(), kind in text(), name in text(), reason in text(), note in text(),
            reporter in text(),
        ) {
            let mut ev = series("x", "Pod", "p", "r", 3, "Ongoing", 100, 10, "n");
            ev.metadata.namespace = Some(ns);
            ev.metadata.name = Some(name.clone());
            ev.regarding = Some(ObjectReference {
                kind: Some(kind),
                name: Some(name),
                ..Default::default()
            });
            ev.reason = Some(reason);
            ev.note = Some(note);
            ev.reporting_controller = Some(reporter);
            for layout in [
                Layout::default(),
                Layout { namespaces: true, wide: true, no_headers: false },
            ] {
                let (text, _) = render(&rows(&[ev.clone()], &Filter::default()), layout, now());
                let bad: Vec<char> = text.chars().filter(|c| unsafe_char(*c)).collect();
                prop_assert!(bad.is_empty(), "printed {:?} in {:?}", bad, text);
                prop_assert_eq!(text.lines().count(), 2, "one header, one row: {:?}", text);
            }
        }
    }

    #[test]
    fn escapes_are_visible_and_plain_text_is_untouched() {
        use event_series::reading::table::visible;
        assert_eq!(visible("BackOff"), "BackOff");
        assert_eq!(visible("naïve 日本"), "naïve 日本");
        assert_eq!(visible("\u{1b}[2J"), "^[[2J");
        assert_eq!(visible("a\u{7f}b\u{0}"), "a^?b^@");
        assert_eq!(visible("\u{9b}31m"), "\\u{9b}31m");
        assert_eq!(visible("\u{202e}txt"), "\\u{202e}txt");
    }
}
