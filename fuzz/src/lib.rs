//! Fuzz targets for event normalisation (`key::normalise`) and mapping (`object::to_event`), through the
//! engine. The invariants are the test-support crate's [`check`], which the `faults` suite also uses to
//! replay saved inputs.

pub use event_series_test_support::check;

use arbitrary::Arbitrary;
use chrono::TimeDelta;
use k8s_openapi::api::core::v1::{Event, EventSeries, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;

/// Strings the API and the mapping rules care about, so that the fuzzer reaches them quickly.
const PICKS: &[&str] = &[
    "kubelet",
    "default-scheduler",
    "example.com/my-controller",
    "Example.COM/x y",
    "v1",
    "Pod",
    "Node",
    "default",
    "kube-system",
    "team-a",
    "BackOff",
    "Warning",
    "Normal",
    "Error",
    "spec.containers{app}",
    "a/b/c",
    "/",
    ".",
    "-",
    "_",
    "..",
    "ü",
    "🚀",
    "é",
    "\u{0}",
    " ",
    "A",
    "x",
];

/// A string field: absent, empty, one of [`PICKS`] (possibly repeated, for the length limits), or any.
#[derive(Arbitrary, Debug)]
pub enum Text {
    Absent,
    Empty,
    Pick(u8),
    Repeat(u8, u16),
    Concat(u8, u8, u8),
    Any(String),
}

impl Text {
    fn get(&self) -> Option<String> {
        let pick = |i: &u8| PICKS[*i as usize % PICKS.len()];
        match self {
            Text::Absent => None,
            Text::Empty => Some(String::new()),
            Text::Pick(i) => Some(pick(i).to_owned()),
            Text::Repeat(i, n) => Some(pick(i).repeat(*n as usize % 1500)),
            Text::Concat(a, b, c) => Some(format!("{}{}{}", pick(a), pick(b), pick(c))),
            Text::Any(s) => Some(s.clone()),
        }
    }
}

#[derive(Arbitrary, Debug)]
pub struct Reference {
    api_version: Text,
    kind: Text,
    namespace: Text,
    name: Text,
    uid: Text,
    field_path: Text,
}

impl Reference {
    fn get(&self) -> ObjectReference {
        ObjectReference {
            api_version: self.api_version.get(),
            kind: self.kind.get(),
            namespace: self.namespace.get(),
            name: self.name.get(),
            uid: self.uid.get(),
            field_path: self.field_path.get(),
            resource_version: None,
        }
    }
}

/// A time: absent, or seconds around a recent instant (most inputs), or anywhere Go can marshal.
#[derive(Arbitrary, Debug)]
pub enum When {
    Absent,
    Near(i32, u32),
    Anywhere(i64, u32),
}

impl When {
    fn get(&self) -> Option<Timestamp> {
        const BASE: i64 = 1_780_000_000;
        const MIN: i64 = -62_135_596_800 + 1;
        const MAX: i64 = 253_402_300_799;
        let (secs, nanos) = match self {
            When::Absent => return None,
            When::Near(d, n) => (BASE + *d as i64, *n),
            When::Anywhere(s, n) => (MIN + s.rem_euclid(MAX - MIN), *n),
        };
        Timestamp::new(secs, (nanos % 1_000_000_000) as i32).ok()
    }
}

/// Engine timings as a policy could set them: seconds, at least 1, at most the CRD's maximum.
#[derive(Arbitrary, Debug)]
pub enum Duration {
    Default,
    Short(u16),
    Long(u64),
}

impl Duration {
    fn get(&self, default: TimeDelta) -> TimeDelta {
        match self {
            Duration::Default => default,
            Duration::Short(s) => TimeDelta::seconds(1 + *s as i64),
            Duration::Long(s) => {
                TimeDelta::seconds(1 + (*s % check::MAX_DURATION_SECONDS as u64) as i64)
            }
        }
    }
}

/// A raw core/v1 Event, field by field, and the timings to check it with.
#[derive(Arbitrary, Debug)]
pub struct Input {
    name: Text,
    namespace: Text,
    uid: Text,
    resource_version: Option<u64>,
    regarding: Reference,
    related: Option<Reference>,
    action: Text,
    reason: Text,
    message: Text,
    type_: Text,
    reporting_component: Text,
    reporting_instance: Text,
    source: Option<(Text, Text)>,
    count: Option<i32>,
    series: Option<(Option<i32>, When)>,
    event_time: When,
    first_timestamp: When,
    last_timestamp: When,
    creation_timestamp: When,
    heartbeat: Duration,
    finish_after: Duration,
    window: Duration,
    include_note: bool,
}

impl Input {
    pub fn event(&self) -> Event {
        Event {
            metadata: ObjectMeta {
                name: self.name.get(),
                namespace: self.namespace.get(),
                uid: self.uid.get(),
                resource_version: self.resource_version.map(|v| v.to_string()),
                creation_timestamp: self.creation_timestamp.get().map(Time),
                ..Default::default()
            },
            involved_object: self.regarding.get(),
            related: self.related.as_ref().map(Reference::get),
            action: self.action.get(),
            reason: self.reason.get(),
            message: self.message.get(),
            type_: self.type_.get(),
            reporting_component: self.reporting_component.get(),
            reporting_instance: self.reporting_instance.get(),
            source: self.source.as_ref().map(|(c, h)| EventSource {
                component: c.get(),
                host: h.get(),
            }),
            count: self.count,
            series: self.series.as_ref().map(|(count, last)| EventSeries {
                count: *count,
                last_observed_time: last.get().map(MicroTime),
            }),
            event_time: self.event_time.get().map(MicroTime),
            first_timestamp: self.first_timestamp.get().map(Time),
            last_timestamp: self.last_timestamp.get().map(Time),
        }
    }

    pub fn timings(&self) -> check::Timings {
        let d = check::Timings::default();
        check::Timings {
            heartbeat: self.heartbeat.get(d.heartbeat),
            finish_after: self.finish_after.get(d.finish_after),
            window: self.window.get(d.window),
            include_note: self.include_note,
        }
    }
}

/// An EventSeriesPolicy spec with arbitrary durations (often near the accepted syntax) and bounds.
#[derive(Arbitrary, Debug)]
pub struct PolicyInput {
    pub durations: [DurationText; 3],
    pub max_active_series: i64,
    pub per_namespace: Option<i64>,
    pub include_note: bool,
}

/// A duration field: numbers and units put together, or any text.
#[derive(Arbitrary, Debug)]
pub enum DurationText {
    Parts(Vec<(u64, u8)>),
    Any(String),
}

impl DurationText {
    fn text(&self) -> String {
        const UNITS: [&str; 9] = ["ns", "us", "µs", "ms", "s", "m", "h", "d", ""];
        match self {
            DurationText::Parts(parts) => parts
                .iter()
                .map(|(n, u)| format!("{n}{}", UNITS[*u as usize % UNITS.len()]))
                .collect(),
            DurationText::Any(s) => s.clone(),
        }
    }
}

/// Converts the input to a spec and checks it (`check::check_policy`).
pub fn check_policy(input: &PolicyInput) {
    let [h, f, w] = &input.durations;
    let spec = event_series::config::EventSeriesPolicySpec {
        heartbeat_interval: h.text(),
        finish_after: f.text(),
        series_window: w.text(),
        max_active_series: input.max_active_series,
        max_active_series_per_namespace: input.per_namespace,
        isomorphism: event_series::config::crd::Isomorphism {
            include_note: input.include_note,
        },
        ..Default::default()
    };
    check::check_policy(&spec);
}
