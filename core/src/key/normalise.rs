//! Normalisation: a raw core/v1 Event, legacy or new style, read as an [`Observation`] that borrows
//! from it ("Input" and "Grouping").

use super::fields::{self, CONTROLLER_LIMIT, LENGTH_LIMIT, NOTE_LIMIT, reference};
use super::{KeyRef, ObjectRef, RawId, SeriesKey};
use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::{Event, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry;
use k8s_openapi::jiff::Timestamp;
use std::cell::Cell;

/// One raw Event object as the engine sees it: the cumulative number of occurrences it reports and when
/// they happened. The engine turns successive observations of the same object into deltas.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Observation<'a> {
    pub raw: RawId,
    /// The object's resourceVersion as a number (etcd revision), if it parses; used for restart
    /// bookkeeping only.
    pub resource_version: Option<u64>,
    /// Namespace of the raw event; the series object is written there.
    pub namespace: &'a str,
    pub key: KeyRef<'a>,
    pub note: &'a str,
    /// Occurrences this raw object reports in total: `series.count`, else `count`, at least 1.
    pub count: u64,
    /// The first occurrence the object reports.
    pub first: DateTime<Utc>,
    /// The latest occurrence the object reports.
    pub last: DateTime<Utc>,
    /// When the API server last wrote an occurrence into the object, on its own clock (the latest
    /// time of the `managedFields` entries that own `count`, `lastTimestamp`, `series` or
    /// `eventTime`, to the second): what a list says of when a watch would have delivered it,
    /// whatever the emitter's clock says. A write of labels or annotations does not move it.
    pub written: Option<DateTime<Utc>>,
    /// When the API server created a legacy object (`creationTimestamp`, its clock; `None` for a
    /// new-style one): with `first`, it tells an object that client-go's `tools/record` created
    /// again after the event TTL deleted it (see the engine's `new_occurrences`).
    pub created: Option<DateTime<Utc>>,
    /// A string field was longer than its limit and was cut (see [`fields`]).
    pub truncated: bool,
}

/// Why a raw event could not be read. Such an event is skipped with a log line and a metric.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum NormaliseError {
    #[error("event has no metadata.name")]
    MissingName,
    #[error("event has no metadata.namespace")]
    MissingNamespace,
    #[error(
        "event carries no timestamp at all (eventTime, series, first/lastTimestamp, creationTimestamp)"
    )]
    NoTimestamp,
}

impl NormaliseError {
    /// Short label for the `dropped_total{reason}` metric.
    pub fn reason(&self) -> &'static str {
        match self {
            NormaliseError::MissingName => "missing_name",
            NormaliseError::MissingNamespace => "missing_namespace",
            NormaliseError::NoTimestamp => "no_timestamp",
        }
    }
}

/// An optional API string as `&str`, empty when unset.
pub fn or_empty(o: &Option<String>) -> &str {
    o.as_deref().unwrap_or("")
}

fn nonempty(o: &Option<String>) -> Option<&str> {
    o.as_deref().filter(|s| !s.is_empty())
}

/// Cuts strings to their limits and remembers whether any was cut.
#[derive(Default)]
pub struct Cutter(Cell<bool>);

impl Cutter {
    pub fn cut<'a>(&self, s: &'a str, max: usize) -> &'a str {
        let c = fields::cut(s, max);
        if c.len() < s.len() {
            self.0.set(true);
        }
        c
    }

    pub fn opt<'a>(&self, s: &'a Option<String>, max: usize) -> &'a str {
        self.cut(or_empty(s), max)
    }

    pub fn any(&self) -> bool {
        self.0.get()
    }

    /// An object reference with each field cut to its limit.
    pub fn object_ref<'a>(&self, r: &'a ObjectReference) -> ObjectRef<&'a str> {
        ObjectRef {
            api_version: self.opt(&r.api_version, reference::API_VERSION),
            kind: self.opt(&r.kind, reference::KIND),
            namespace: self.opt(&r.namespace, reference::NAMESPACE),
            name: self.opt(&r.name, reference::NAME),
            uid: self.opt(&r.uid, reference::UID),
            field_path: self.opt(&r.field_path, reference::FIELD_PATH),
        }
    }
}

/// Converts a Kubernetes timestamp to the engine's clock type.
pub fn to_chrono(t: Timestamp) -> DateTime<Utc> {
    DateTime::from_timestamp(t.as_second(), t.subsec_nanosecond().max(0) as u32).unwrap_or_default()
}

/// Whether a `managedFields` entry owns a field that an occurrence writes.
fn owns_occurrences(m: &ManagedFieldsEntry) -> bool {
    const FIELDS: [&str; 4] = ["f:count", "f:lastTimestamp", "f:series", "f:eventTime"];
    m.fields_v1
        .as_ref()
        .is_some_and(|f| FIELDS.iter().any(|k| f.0.get(k).is_some()))
}

/// Reads a raw core/v1 Event ("Grouping" and "Input").
///
/// - every string is cut to its limit ([`fields`]) here, before anything is stored: the note to 1,024
///   bytes, the rest to their API limits; [`Observation::truncated`] says whether anything was cut.
/// - regarding = `involvedObject`; reportingController = `reportingComponent`, else `source.component`;
///   reportingInstance = `reportingInstance`, else `source.host`.
/// - count = `series.count` when the event has a series, else `count`; at least 1.
/// - first = `eventTime`, else `firstTimestamp`, else `creationTimestamp`; last =
///   `series.lastObservedTime`, else `lastTimestamp`, else first. `last` is never before `first`.
/// - written = the latest `managedFields[].time` (set by the API server on every write that changes
///   a field) of an entry owning an occurrence's fields, if any; created = `creationTimestamp` of a
///   legacy event.
pub fn normalise(ev: &Event) -> Result<Observation<'_>, NormaliseError> {
    let meta = &ev.metadata;
    let name = nonempty(&meta.name).ok_or(NormaliseError::MissingName)?;
    let namespace = nonempty(&meta.namespace).ok_or(NormaliseError::MissingNamespace)?;
    let source = ev.source.as_ref();
    let c = Cutter::default();
    let namespace = c.cut(namespace, reference::NAMESPACE);
    let reporting_controller = nonempty(&ev.reporting_component)
        .or_else(|| source.and_then(|s| nonempty(&s.component)))
        .unwrap_or("");
    let reporting_instance = nonempty(&ev.reporting_instance)
        .or_else(|| source.and_then(|s| nonempty(&s.host)))
        .unwrap_or("");
    let key = SeriesKey {
        namespace,
        regarding: c.object_ref(&ev.involved_object),
        related: ev.related.as_ref().map(|r| c.object_ref(r)),
        action: c.opt(&ev.action, LENGTH_LIMIT),
        reason: c.opt(&ev.reason, LENGTH_LIMIT),
        reporting_controller: c.cut(reporting_controller, CONTROLLER_LIMIT),
        reporting_instance: c.cut(reporting_instance, LENGTH_LIMIT),
        type_: c.opt(&ev.type_, LENGTH_LIMIT),
    };
    let note = c.opt(&ev.message, NOTE_LIMIT);
    let series = ev.series.as_ref();
    let count = series
        .and_then(|s| s.count)
        .or(ev.count)
        .map(|c| c.max(1) as u64)
        .unwrap_or(1);
    let first = ev
        .event_time
        .as_ref()
        .map(|t| t.0)
        .or(ev.first_timestamp.as_ref().map(|t| t.0))
        .or(meta.creation_timestamp.as_ref().map(|t| t.0))
        .map(to_chrono);
    let last = series
        .and_then(|s| s.last_observed_time.as_ref())
        .map(|t| t.0)
        .or(ev.last_timestamp.as_ref().map(|t| t.0))
        .map(to_chrono);
    let (first, last) = match (first, last) {
        (Some(f), Some(l)) => (f.min(l), l.max(f)),
        (Some(f), None) => (f, f),
        (None, Some(l)) => (l, l),
        (None, None) => return Err(NormaliseError::NoTimestamp),
    };
    let written = meta
        .managed_fields
        .iter()
        .flatten()
        .filter(|m| owns_occurrences(m))
        .filter_map(|m| m.time.as_ref())
        .map(|t| to_chrono(t.0))
        .max();
    let legacy = ev.series.is_none() && ev.event_time.is_none();
    Ok(Observation {
        raw: RawId::of(namespace, name, or_empty(&meta.uid)),
        resource_version: meta
            .resource_version
            .as_deref()
            .and_then(|v| v.parse().ok()),
        namespace,
        key,
        note,
        count,
        first,
        last,
        written,
        created: meta
            .creation_timestamp
            .as_ref()
            .filter(|_| legacy)
            .map(|t| to_chrono(t.0)),
        truncated: c.any(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key::{KeyBuf, KeyId};
    use k8s_openapi::api::core::v1::{EventSeries, EventSource};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, Time};

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn legacy() -> Event {
        Event {
            metadata: ObjectMeta {
                name: Some("web-0.17a".into()),
                namespace: Some("shop".into()),
                uid: Some("u-1".into()),
                resource_version: Some("1234".into()),
                ..Default::default()
            },
            involved_object: ObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Pod".into()),
                namespace: Some("shop".into()),
                name: Some("web-0".into()),
                uid: Some("pod-uid".into()),
                field_path: Some("spec.containers{app}".into()),
                resource_version: Some("99".into()),
            },
            reason: Some("BackOff".into()),
            message: Some("Back-off restarting failed container".into()),
            type_: Some("Warning".into()),
            source: Some(EventSource {
                component: Some("kubelet".into()),
                host: Some("node-1".into()),
            }),
            count: Some(7),
            first_timestamp: Some(Time(ts("2026-01-01T00:00:00Z"))),
            last_timestamp: Some(Time(ts("2026-01-01T00:01:00Z"))),
            ..Default::default()
        }
    }

    #[test]
    fn a_buffered_observation_reads_back_as_the_observation_it_was_made_from() {
        let mut ev = legacy();
        ev.related = Some(ObjectReference {
            kind: Some("Node".into()),
            name: Some("node-1".into()),
            ..Default::default()
        });
        ev.action = Some("Pulling".into());
        ev.message = Some("ünïcode ✓".into());
        let obs = normalise(&ev).unwrap();
        // Without `related`, the key must not grow an empty one.
        let plain = legacy();
        let plain = normalise(&plain).unwrap();
        let mut buffer = crate::key::ReplayBuffer::default();
        buffer.push(&obs);
        buffer.push(&plain);
        let back: Vec<Observation<'_>> = buffer.iter().collect();
        assert_eq!(back, [obs.clone(), plain]);
        assert_eq!(back[0].key.id(None), obs.key.id(None));
    }

    #[test]
    fn legacy_event_uses_source_and_count() {
        let ev = legacy();
        let o = normalise(&ev).unwrap();
        assert_eq!(o.key.reporting_controller, "kubelet");
        assert_eq!(o.key.reporting_instance, "node-1");
        assert_eq!(o.key.regarding.name, "web-0");
        assert_eq!(o.count, 7);
        assert_eq!(o.resource_version, Some(1234));
        assert_eq!(o.first.to_rfc3339(), "2026-01-01T00:00:00+00:00");
        assert_eq!(o.last.to_rfc3339(), "2026-01-01T00:01:00+00:00");
        assert_eq!(o.raw, RawId::of("shop", "web-0.17a", "u-1"));
    }

    #[test]
    fn new_style_event_uses_reporting_fields_and_series() {
        let mut ev = legacy();
        ev.reporting_component = Some("example.com/ctl".into());
        ev.reporting_instance = Some("ctl-7".into());
        ev.count = None;
        ev.first_timestamp = None;
        ev.last_timestamp = None;
        ev.event_time = Some(MicroTime(ts("2026-01-01T00:00:00.5Z")));
        ev.series = Some(EventSeries {
            count: Some(12),
            last_observed_time: Some(MicroTime(ts("2026-01-01T00:05:00.25Z"))),
        });
        let o = normalise(&ev).unwrap();
        assert_eq!(o.key.reporting_controller, "example.com/ctl");
        assert_eq!(o.key.reporting_instance, "ctl-7");
        assert_eq!(o.count, 12);
        assert_eq!(o.first.timestamp_subsec_millis(), 500);
        assert_eq!(o.last.timestamp_subsec_millis(), 250);
    }

    #[test]
    fn singleton_new_style_event_counts_one() {
        let mut ev = legacy();
        ev.count = None;
        ev.first_timestamp = None;
        ev.last_timestamp = None;
        ev.event_time = Some(MicroTime(ts("2026-01-01T00:00:00Z")));
        let o = normalise(&ev).unwrap();
        assert_eq!(o.count, 1);
        assert_eq!(o.first, o.last);
    }

    #[test]
    fn bad_input_is_an_error_not_a_panic() {
        let mut ev = legacy();
        ev.metadata.namespace = None;
        assert_eq!(
            normalise(&ev).unwrap_err(),
            NormaliseError::MissingNamespace
        );
        let mut ev = legacy();
        ev.first_timestamp = None;
        ev.last_timestamp = None;
        assert_eq!(normalise(&ev).unwrap_err(), NormaliseError::NoTimestamp);
        let mut ev = legacy();
        ev.count = Some(-3);
        assert_eq!(normalise(&ev).unwrap().count, 1);
        let mut ev = legacy();
        ev.last_timestamp = Some(Time(ts("2025-01-01T00:00:00Z")));
        let o = normalise(&ev).unwrap();
        assert!(o.first <= o.last);
    }

    #[test]
    fn key_ignores_note_unless_asked_and_compares_every_ref_field() {
        let a = legacy();
        let mut b = legacy();
        b.message = Some("another message".into());
        let (oa, ob) = (normalise(&a).unwrap(), normalise(&b).unwrap());
        assert_eq!(oa.key.id(None), ob.key.id(None));
        assert_ne!(oa.key.id(Some(oa.note)), ob.key.id(Some(ob.note)));

        let mut c = legacy();
        c.involved_object.field_path = Some("spec.containers{other}".into());
        assert_ne!(oa.key.id(None), normalise(&c).unwrap().key.id(None));
        let mut d = legacy();
        d.involved_object.resource_version = Some("100".into());
        assert_eq!(oa.key.id(None), normalise(&d).unwrap().key.id(None));
    }

    #[test]
    fn key_fields_do_not_run_into_each_other() {
        let mut a = legacy();
        a.reason = Some("Back".into());
        a.action = Some("Off".into());
        let mut b = legacy();
        b.reason = Some("BackO".into());
        b.action = Some("ff".into());
        assert_ne!(
            normalise(&a).unwrap().key.id(None),
            normalise(&b).unwrap().key.id(None)
        );
    }

    #[test]
    fn owned_key_hashes_like_the_borrowed_one() {
        let ev = legacy();
        let o = normalise(&ev).unwrap();
        let owned = KeyBuf::new(&o.key, o.note);
        assert_eq!(owned.view(), o.key);
        assert_eq!(owned.note(), o.note);
        assert_eq!(owned.view().id(None), o.key.id(None));
        let id = o.key.id(None);
        assert_eq!(id.to_string().parse::<KeyId>().unwrap(), id);
    }

    #[test]
    fn every_string_is_cut_to_its_limit_before_it_is_stored() {
        let mut ev = legacy();
        ev.message = Some("é".repeat(600_000));
        ev.reason = Some("R".repeat(300));
        ev.involved_object.name = Some("y".repeat(300));
        ev.involved_object.field_path = Some("f".repeat(1 << 20));
        ev.source = Some(EventSource {
            component: Some("c".repeat(1000)),
            host: Some("h".repeat(1000)),
        });
        let o = normalise(&ev).unwrap();
        assert!(o.truncated);
        assert_eq!(o.note.len(), 1024);
        assert_eq!(o.key.reason.len(), 128);
        assert_eq!(o.key.regarding.name.len(), 253);
        assert_eq!(o.key.regarding.field_path.len(), 512);
        assert_eq!(o.key.reporting_controller.len(), 317);
        assert_eq!(o.key.reporting_instance.len(), 128);
        assert!(KeyBuf::new(&o.key, o.note).text_len() < 4096);
        assert!(!normalise(&legacy()).unwrap().truncated);
    }

    #[test]
    fn keys_longer_than_64_kib_keep_every_field() {
        let ev = legacy();
        let long = "x".repeat(70_000);
        let o = normalise(&ev).unwrap();
        assert!(o.key.related.is_none());
        let owned = KeyBuf::new(&o.key, &long);
        assert_eq!(owned.view(), o.key);
        assert_eq!(owned.note(), long);
        let k = &o.key;
        let scalars = [
            k.action,
            k.reason,
            k.reporting_controller,
            k.reporting_instance,
            k.type_,
            k.namespace,
        ];
        let text: usize = k
            .regarding
            .parts()
            .iter()
            .chain(&scalars)
            .map(|p| p.len())
            .sum();
        assert_eq!(owned.text_len(), text + long.len());
        let short = KeyBuf::new(&normalise(&legacy()).unwrap().key, "n");
        assert!(short.text_len() < 1_000);
        assert_eq!(short.note(), "n");
    }
}
