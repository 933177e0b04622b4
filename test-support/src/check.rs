//! The invariants the fuzz targets (`fuzz/`) check for one raw core/v1 Event. The `faults` suite
//! replays the seed corpus and every saved crash through them, and the `mapping` suite uses the
//! events.k8s.io/v1 rules restated here.
//!
//! For an event the API server could hold (times within years 1–9999, as Go marshals them):
//! 1. `key::observe` never panics; an observation has `count >= 1`, `first <= last`, a namespace;
//! 2. fed to the engine (with a second raw object of the same key, one more occurrence, a heartbeat,
//!    the end of the loop), every intent maps (`mapping::to_event`) to an object that passes the
//!    events.k8s.io/v1 create rules restated below (`create_errors`);
//! 3. all writes of one series object agree on the fields the API makes immutable;
//! 4. occurrences are conserved: every counted occurrence ends in exactly one finished series, `lone`,
//!    `dropped_filtered` or `dropped_stale`;
//! 5. every Ongoing write reads back (`recovery::parse`) as the same series, and a series restored
//!    from it maps to the same immutable fields (the mapping is idempotent) and the same count.

use chrono::{DateTime, TimeDelta, Utc};
use event_series::config::EventSeriesPolicySpec;
use event_series::config::resolve::to_policy;
use event_series::object;
use event_series::object::to_event;
use event_series_core::engine::{Engine, EngineConfig};
use event_series_core::intent::{Intent, SeriesState, WriteKind};
use event_series_core::key::{self, Observation, RawId};
use event_series_core::settings::{PolicySet, Settings};
use k8s_openapi::api::core::v1::Event;
use k8s_openapi::api::events::v1 as events;
use k8s_openapi::jiff::Timestamp;
use std::collections::BTreeMap;

/// Go's zero `time.Time` (0001-01-01T00:00:00Z): marshalled as `null`, so never held by the API.
const GO_ZERO_SECONDS: i64 = -62_135_596_800;
/// 9999-12-31T23:59:59Z: Go refuses to marshal later times.
const YEAR_9999_END: i64 = 253_402_300_799;
/// Margin for the times the check adds to the event's own (up to a few days).
const MARGIN: i64 = 10 * 86_400;

/// The engine timings a check runs with. Bounded by what the CRD accepts (`duration()` in CEL, at
/// most about 292 years) and what `parse_duration` accepts (at least 1 s).
#[derive(Clone, Copy, Debug)]
pub struct Timings {
    pub heartbeat: TimeDelta,
    pub finish_after: TimeDelta,
    pub window: TimeDelta,
    pub include_note: bool,
}

impl Default for Timings {
    fn default() -> Self {
        Timings {
            heartbeat: TimeDelta::seconds(60),
            finish_after: TimeDelta::minutes(6),
            window: TimeDelta::minutes(6),
            include_note: false,
        }
    }
}

/// The longest duration the CRD admits (Go's `time.Duration` maximum, which CEL's `duration()` uses).
pub const MAX_DURATION_SECONDS: i64 = 9_223_372_036;

/// Deserializes fuzzer bytes as a core/v1 Event (JSON) and checks it with the default timings and with
/// the note in the key.
pub fn check_json(data: &[u8]) {
    let Ok(ev) = serde_json::from_slice::<Event>(data) else {
        return;
    };
    check_event(&ev, Timings::default());
    check_event(
        &ev,
        Timings {
            include_note: true,
            ..Timings::default()
        },
    );
}

fn seconds(ts: Timestamp) -> i64 {
    ts.as_second()
}

/// Whether every time the event carries is one the API server could hold.
fn times_representable(ev: &Event) -> bool {
    let mut times = Vec::new();
    times.extend(ev.event_time.as_ref().map(|t| t.0));
    times.extend(ev.first_timestamp.as_ref().map(|t| t.0));
    times.extend(ev.last_timestamp.as_ref().map(|t| t.0));
    times.extend(ev.metadata.creation_timestamp.as_ref().map(|t| t.0));
    if let Some(s) = &ev.series {
        times.extend(s.last_observed_time.as_ref().map(|t| t.0));
    }
    times.iter().all(|t| {
        let s = seconds(*t);
        s > GO_ZERO_SECONDS + MARGIN && s < YEAR_9999_END - MARGIN
    })
}

fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// The apiserver's `IsDNS1123Subdomain`: at most 253, dot-separated `[a-z0-9]([-a-z0-9]*[a-z0-9])?`
/// (no limit per part).
pub fn is_dns_subdomain(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|l| {
            !l.is_empty()
                && l.bytes()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-')
                && !l.starts_with('-')
                && !l.ends_with('-')
        })
}

/// The apiserver's `IsQualifiedName`: `[prefix/]name`, prefix a DNS subdomain, name at most 63 of
/// `[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?`.
pub fn is_qualified_name(s: &str) -> bool {
    let (prefix, name) = match s.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, s),
    };
    let alnum = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
    !name.is_empty()
        && name.len() <= 63
        && alnum(name.chars().next())
        && alnum(name.chars().last())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
        && prefix.is_none_or(is_dns_subdomain)
}

fn is_label_value(s: &str) -> bool {
    s.is_empty()
        || (s.len() <= 63
            && s.chars().next().is_some_and(|c| c.is_ascii_alphanumeric())
            && s.chars().last().is_some_and(|c| c.is_ascii_alphanumeric())
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c)))
}

fn time_ok(t: &k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime) -> bool {
    let s = seconds(t.0);
    // Not Go's zero time (that is "required" to the API server), and one Go can parse.
    (s > GO_ZERO_SECONDS || (s == GO_ZERO_SECONDS && t.0.subsec_nanosecond() != 0))
        && s <= YEAR_9999_END
}

/// The events.k8s.io/v1 create rules (`ValidateEventCreate` with `legacyValidateEvent` for a new-style
/// event). `check_namespace`: whether the raw namespace was a valid one, so the object's must be too.
pub fn create_errors(e: &events::Event, check_namespace: bool) -> Vec<String> {
    let mut errs = Vec::new();
    let mut check = |ok: bool, what: &str| {
        if !ok {
            errs.push(what.to_owned());
        }
    };
    let s = |o: &Option<String>| o.clone().unwrap_or_default();
    let name = s(&e.metadata.name);
    let ns = s(&e.metadata.namespace);
    check(is_dns_subdomain(&name), "metadata.name");
    if check_namespace {
        check(is_dns_label(&ns), "metadata.namespace");
    }
    for (k, v) in e.metadata.labels.iter().flatten() {
        check(is_qualified_name(k) && is_label_value(v), "metadata.labels");
    }
    check(
        annotation_bytes(e) <= 256 * 1024,
        "metadata.annotations size",
    );
    check(e.event_time.as_ref().is_some_and(time_ok), "eventTime");
    match &e.series {
        Some(series) => {
            check(series.count >= 2, "series.count >= 2");
            check(
                time_ok(&series.last_observed_time),
                "series.lastObservedTime",
            );
        }
        None => check(false, "series"),
    }
    check(
        matches!(e.type_.as_deref(), Some("Normal" | "Warning")),
        "type",
    );
    let regarding_ns = e
        .regarding
        .as_ref()
        .and_then(|r| r.namespace.clone())
        .unwrap_or_default();
    check(
        !check_namespace || !regarding_ns.is_empty() || ns == "default" || ns == "kube-system",
        "namespace for a cluster-scoped regarding",
    );
    check(
        is_qualified_name(&s(&e.reporting_controller)),
        "reportingController",
    );
    let ri = s(&e.reporting_instance);
    check(!ri.is_empty() && ri.len() <= 128, "reportingInstance");
    let action = s(&e.action);
    check(!action.is_empty() && action.len() <= 128, "action");
    let reason = s(&e.reason);
    check(!reason.is_empty() && reason.len() <= 128, "reason");
    check(s(&e.note).len() <= 1024, "note");
    check(
        e.deprecated_count.is_none()
            && e.deprecated_source.is_none()
            && e.deprecated_first_timestamp.is_none()
            && e.deprecated_last_timestamp.is_none(),
        "deprecated fields unset",
    );
    errs
}

/// The size of an object's annotations as the apiserver limits it: keys and values, in bytes.
pub fn annotation_bytes(e: &events::Event) -> usize {
    e.metadata
        .annotations
        .iter()
        .flatten()
        .map(|(k, v)| k.len() + v.len())
        .sum()
}

/// The fields `ValidateEventUpdate` makes immutable.
type Immutable = (
    Option<k8s_openapi::api::core::v1::ObjectReference>,
    Option<k8s_openapi::api::core::v1::ObjectReference>,
    Option<String>,
    Option<String>,
    Option<String>,
    Option<String>,
    Option<String>,
    Option<String>,
    Option<String>,
    Option<String>,
    Option<i64>,
);

/// The fields `ValidateEventUpdate` makes immutable, for comparing writes of one object.
pub fn immutable(e: &events::Event) -> Immutable {
    (
        e.regarding.clone(),
        e.related.clone(),
        e.reason.clone(),
        e.note.clone(),
        e.type_.clone(),
        e.action.clone(),
        e.reporting_controller.clone(),
        e.reporting_instance.clone(),
        e.metadata.name.clone(),
        e.metadata.namespace.clone(),
        e.event_time.as_ref().map(|t| t.0.as_microsecond()),
    )
}

fn fixed_now() -> DateTime<Utc> {
    DateTime::from_timestamp(1_780_000_000, 0).unwrap_or_default()
}

fn engine(t: Timings) -> Engine {
    let settings = Settings {
        heartbeat_interval: t.heartbeat,
        finish_after: t.finish_after,
        series_window: t.window,
        include_note: t.include_note,
        ..Settings::default()
    };
    Engine::new(PolicySet::uniform(settings), EngineConfig::default())
}

/// Checks one raw event (see the module docs). Panics on a violated invariant.
pub fn check_event(ev: &Event, timings: Timings) {
    let Ok(obs) = key::normalise(ev) else {
        return;
    };
    assert!(obs.count >= 1, "count {}", obs.count);
    assert!(
        obs.first <= obs.last,
        "first {} > last {}",
        obs.first,
        obs.last
    );
    assert!(!obs.namespace.is_empty());
    if !times_representable(ev) {
        return;
    }
    // The API refuses a raw event about a cluster-scoped object outside `default` and
    // `kube-system` (`legacyValidateEvent`), and the series object lives in the raw event's
    // namespace: the namespace rules apply to raw events the API would have taken.
    let namespace_valid = is_dns_label(obs.namespace)
        && (!obs.key.regarding.namespace.is_empty()
            || matches!(obs.namespace, "default" | "kube-system"));
    // As if the event had just been written, and as seen by an operator whose clock is elsewhere.
    for now in [obs.last, fixed_now()] {
        run(&obs, now, timings, namespace_valid);
    }
}

fn run(obs: &Observation, now: DateTime<Utc>, t: Timings, namespace_valid: bool) {
    let mut engine = engine(t);
    let mut intents: Vec<Intent> = Vec::new();
    engine.observe(now, obs);
    // A second raw object of the same key, one occurrence now: the key's loop goes on.
    let mut second = obs.clone();
    second.raw = RawId(obs.raw.0 ^ 0x9e37_79b9_7f4a_7c15);
    second.count = 1;
    second.first = now;
    second.last = now;
    second.resource_version = obs.resource_version.map(|v| v.saturating_add(1));
    engine.observe(now, &second);
    // The first object again, one more occurrence.
    let mut again = obs.clone();
    again.count = obs.count.saturating_add(1);
    again.last = obs.last.max(now);
    engine.observe(now, &again);
    intents.extend(engine.take_intents());
    // A heartbeat's worth of time, then one more occurrence, then quiet long enough to finish.
    let later = now + t.heartbeat.min(t.window / 2).max(TimeDelta::seconds(1));
    engine.tick(later);
    second.count = 2;
    second.last = later;
    engine.observe(later, &second);
    engine.tick(later);
    intents.extend(engine.take_intents());
    let end = later + t.finish_after.max(t.window) + TimeDelta::hours(2);
    engine.tick(end);
    intents.extend(engine.take_intents());
    let end = end + t.finish_after.max(t.window) + TimeDelta::hours(2);
    engine.tick(end);
    intents.extend(engine.take_intents());

    // 2 and 3: valid objects, immutable fields stable per object.
    let mut by_name: BTreeMap<String, (Immutable, Intent)> = BTreeMap::new();
    for intent in &intents {
        let obj = to_event(&intent.series);
        let errs = create_errors(&obj, namespace_valid);
        assert!(errs.is_empty(), "{errs:?} in {obj:#?}\nfrom {obs:#?}");
        let imm = immutable(&obj);
        let name = object::name_of(&intent.series);
        if let Some((first, _)) = by_name.get(&name) {
            assert_eq!(first, &imm, "an immutable field changed in {name}");
        }
        by_name.insert(name, (imm, intent.clone()));
        if intent.series.state == SeriesState::Ongoing {
            round_trip(&obj, intent, t);
        }
    }

    // 4: conservation. Far past every window, nothing is pending or active.
    assert_eq!(engine.active_series(), 0, "series left active");
    let stats = engine.stats().clone();
    let in_series: u64 = by_name
        .values()
        .map(|(_, last)| {
            assert!(
                matches!(last.kind, WriteKind::Finish(_)),
                "last write of {} is {:?}",
                object::name_of(&last.series),
                last.kind
            );
            last.series.count
        })
        .sum();
    assert_eq!(
        stats.occurrences,
        in_series
            + stats.lone
            + stats.dropped_filtered
            + stats.dropped_stale
            + engine.pending_occurrences(),
        "occurrences not conserved: {stats:?}, in series {in_series}"
    );
}

/// 5: an Ongoing write reads back as the same series and re-maps to the same object.
fn round_trip(obj: &events::Event, intent: &Intent, t: Timings) {
    // Every object the operator writes passes the checks a restart applies to it.
    let check = object::Check {
        now: intent.series.written_at,
        tolerance: chrono::TimeDelta::MAX,
    };
    let p = object::decode(obj, check).unwrap_or_else(|e| panic!("{e}: {obj:#?}"));
    let s = &intent.series;
    assert_eq!(p.id, s.id);
    assert_eq!(obj.metadata.name, Some(object::name_of(s)));
    assert_eq!(p.state, SeriesState::Ongoing);
    let count = s.count.clamp(2, i32::MAX as u64);
    assert_eq!(p.count, count, "count read back");
    let now = s.written_at;
    let mut restored = engine(t);
    restored.begin_recovery();
    restored.restore(now, p);
    let active = restored.active(now);
    assert_eq!(active.len(), 1, "the restored series is active");
    let again = to_event(&active[0]);
    assert_eq!(
        immutable(&again),
        immutable(obj),
        "mapping a restored series changed an immutable field"
    );
    assert_eq!(again.series.as_ref().map(|s| s.count), Some(count as i32));
    let errs = create_errors(&again, false);
    assert!(errs.is_empty(), "{errs:?} after a restore");
}

/// A policy spec as a user might write it: converting it never panics; an accepted one has
/// settings within the documented ranges, a refused one names the field at fault.
pub fn check_policy(spec: &EventSeriesPolicySpec) {
    match to_policy("fuzz", spec) {
        Ok(p) => {
            let s = &p.settings;
            let (min, max) = (
                chrono::TimeDelta::seconds(1),
                chrono::TimeDelta::days(36_500),
            );
            for d in [s.heartbeat_interval, s.finish_after, s.series_window] {
                assert!(d >= min && d <= max, "{d} accepted from {spec:?}");
            }
            assert!(s.max_active_series >= 1);
            assert!(
                (1..=s.max_active_series).contains(&s.max_active_series_per_namespace)
                    || s.max_active_series_per_namespace == usize::MAX
            );
        }
        Err(e) => {
            let text = e.to_string();
            assert!(text.starts_with("spec."), "the field is not named: {text}");
        }
    }
}
