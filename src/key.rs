//! Key normalisation: a raw core/v1 Event, legacy or new style, becomes an [`Observation`] that borrows
//! from it, with the isomorphic key of SPEC "Grouping".
//!
//! Nothing here allocates on the hot path: the key is a set of borrowed strings, hashed into a
//! [`KeyId`] that the engine uses to find the series. An owned [`SeriesKey`] is built only when a key is
//! seen for the first time.

use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::{Event, ObjectReference};
use k8s_openapi::jiff::Timestamp;
use std::fmt;
use std::sync::Arc;
use xxhash_rust::xxh3::{Xxh3, xxh3_64};

/// The fields an object reference compares on (SPEC: apiVersion, kind, namespace, name, uid, fieldPath).
///
/// Generic over the string type so that the borrowed view of a raw event (`ObjectRef<&str>`) and the
/// owned copy a series keeps (`ObjectRef<String>`) share one definition and one hash.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ObjectRef<S> {
    pub api_version: S,
    pub kind: S,
    pub namespace: S,
    pub name: S,
    pub uid: S,
    pub field_path: S,
}

/// The isomorphic key of a series: two occurrences with equal keys belong to the same series.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SeriesKey<S = String> {
    pub regarding: ObjectRef<S>,
    pub related: Option<ObjectRef<S>>,
    pub action: S,
    pub reason: S,
    pub reporting_controller: S,
    pub reporting_instance: S,
    pub type_: S,
}

/// A borrowed key, as read from a raw event.
pub type KeyRef<'a> = SeriesKey<&'a str>;

/// A 128-bit hash of a [`SeriesKey`] (and the note, when the policy includes it). Stable across
/// processes and versions (xxh3), because it is persisted in the `eventseries.dev/key` label and used to
/// match series objects with raw events after a restart.
///
/// Held as two `u64` halves (high first, so the order is that of the `u128`): a `u128` is 16-byte
/// aligned, which would pad every engine table entry that holds one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct KeyId([u64; 2]);

impl KeyId {
    pub const fn new(v: u128) -> KeyId {
        KeyId([(v >> 64) as u64, v as u64])
    }

    pub const fn get(self) -> u128 {
        ((self.0[0] as u128) << 64) | self.0[1] as u128
    }
}

impl fmt::Display for KeyId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:032x}", self.get())
    }
}

impl std::str::FromStr for KeyId {
    type Err = std::num::ParseIntError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        u128::from_str_radix(s, 16).map(KeyId::new)
    }
}

/// Identity of one raw Event object (a hash of its uid), for delta counting.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RawId(pub u64);

impl fmt::Display for RawId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:016x}", self.0)
    }
}

impl std::str::FromStr for RawId {
    type Err = std::num::ParseIntError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        u64::from_str_radix(s, 16).map(RawId)
    }
}

impl RawId {
    /// The id of a raw event: its uid, or namespace/name when the uid is missing (never the case for
    /// objects read from an API server, but cheap to be safe about).
    pub fn of(namespace: &str, name: &str, uid: &str) -> RawId {
        if uid.is_empty() {
            let mut h = Xxh3::new();
            feed(&mut h, namespace);
            feed(&mut h, name);
            RawId(h.digest())
        } else {
            RawId(xxh3_64(uid.as_bytes()))
        }
    }
}

fn feed(h: &mut Xxh3, s: &str) {
    h.update(&(s.len() as u64).to_le_bytes());
    h.update(s.as_bytes());
}

impl<S: AsRef<str>> ObjectRef<S> {
    fn parts(&self) -> [&str; 6] {
        [
            self.api_version.as_ref(),
            self.kind.as_ref(),
            self.namespace.as_ref(),
            self.name.as_ref(),
            self.uid.as_ref(),
            self.field_path.as_ref(),
        ]
    }

    fn feed(&self, h: &mut Xxh3) {
        for s in self.parts() {
            feed(h, s);
        }
    }
}

impl<S: AsRef<str>> SeriesKey<S> {
    /// The key's id; `note` is `Some` only when the policy sets `isomorphism.includeNote`.
    pub fn id(&self, note: Option<&str>) -> KeyId {
        let mut h = Xxh3::new();
        self.regarding.feed(&mut h);
        match &self.related {
            Some(r) => {
                h.update(&[1]);
                r.feed(&mut h);
            }
            None => h.update(&[0]),
        }
        for s in [
            &self.action,
            &self.reason,
            &self.reporting_controller,
            &self.reporting_instance,
            &self.type_,
        ] {
            feed(&mut h, s.as_ref());
        }
        match note {
            Some(n) => {
                h.update(&[1]);
                feed(&mut h, n);
            }
            None => h.update(&[0]),
        }
        KeyId::new(h.digest128())
    }
}

/// Number of string fields in a key: six for regarding, six for related, five scalars; then the note.
const FIELDS: usize = 18;

/// An owned [`SeriesKey`] and the note of its first occurrence, packed into one shared allocation: a
/// series keeps them as long as it lives, eighteen separate `String`s would cost over 400 bytes of
/// headers per series before any text, and a separate `Arc` around a boxed text another allocation.
/// The format is [`encode`]'s; cloning shares it.
#[derive(Clone, PartialEq, Eq)]
pub struct KeyBuf(Arc<[u8]>);

const RELATED: u8 = 1;
const WIDE: u8 = 2;

/// Packs a key and note into `out` (appended): one flags byte (bit 0: `related` is set; bit 1: wide
/// offsets), the end offset of each field as a little-endian `u16` (`u32` when the text is longer
/// than 64 KiB), then the fields' text back to back. [`PackedKey`] reads it back.
pub fn encode<S: AsRef<str>>(key: &SeriesKey<S>, note: &str, out: &mut Vec<u8>) {
    let mut parts: [&str; FIELDS] = [""; FIELDS];
    parts[..6].copy_from_slice(&key.regarding.parts());
    if let Some(r) = &key.related {
        parts[6..12].copy_from_slice(&r.parts());
    }
    parts[12..].copy_from_slice(&[
        key.action.as_ref(),
        key.reason.as_ref(),
        key.reporting_controller.as_ref(),
        key.reporting_instance.as_ref(),
        key.type_.as_ref(),
        note,
    ]);
    let text: usize = parts.iter().map(|p| p.len()).sum();
    let wide = text > usize::from(u16::MAX);
    let width = if wide { 4 } else { 2 };
    out.reserve(1 + width * FIELDS + text);
    out.push(u8::from(key.related.is_some()) * RELATED + u8::from(wide) * WIDE);
    let mut end = 0u32;
    for part in parts {
        end = end.saturating_add(u32::try_from(part.len()).unwrap_or(u32::MAX));
        if wide {
            out.extend_from_slice(&end.to_le_bytes());
        } else {
            // `text` fits in a u16, so every end does.
            out.extend_from_slice(&(end as u16).to_le_bytes());
        }
    }
    for part in parts {
        out.extend_from_slice(part.as_bytes());
    }
}

impl KeyBuf {
    pub fn new<S: AsRef<str>>(key: &SeriesKey<S>, note: &str) -> KeyBuf {
        let mut buf = Vec::new();
        encode(key, note, &mut buf);
        KeyBuf(Arc::from(buf))
    }

    /// A copy of a packed key (as [`encode`] wrote it).
    pub fn from_packed(key: PackedKey<'_>) -> KeyBuf {
        KeyBuf(Arc::from(key.0))
    }

    pub fn packed(&self) -> PackedKey<'_> {
        PackedKey(&self.0)
    }

    /// The key as borrowed strings, for hashing and for writing the series object.
    pub fn view(&self) -> KeyRef<'_> {
        self.packed().view()
    }

    /// The note (message) of the series' first occurrence.
    pub fn note(&self) -> &str {
        self.packed().note()
    }

    /// Heap bytes of text the key and note carry.
    pub fn text_len(&self) -> usize {
        self.packed().text_len()
    }
}

/// A key and note in [`encode`]'s format, borrowed from wherever they are stored. Reading a malformed
/// one yields empty fields, never a panic.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct PackedKey<'a>(pub &'a [u8]);

impl<'a> PackedKey<'a> {
    pub fn bytes(self) -> &'a [u8] {
        self.0
    }

    fn flags(self) -> u8 {
        self.0.first().copied().unwrap_or_default()
    }

    fn width(self) -> usize {
        if self.flags() & WIDE != 0 { 4 } else { 2 }
    }

    fn header(self) -> usize {
        1 + self.width() * FIELDS
    }

    fn end(self, i: usize) -> usize {
        let w = self.width();
        match self.0.get(1 + w * i..1 + w * (i + 1)) {
            Some(&[a, b]) => usize::from(u16::from_le_bytes([a, b])),
            Some(&[a, b, c, d]) => u32::from_le_bytes([a, b, c, d]) as usize,
            _ => 0,
        }
    }

    fn field(self, i: usize) -> &'a str {
        let start = if i == 0 { 0 } else { self.end(i - 1) };
        let header = self.header();
        self.0
            .get(header + start..header + self.end(i))
            .and_then(|b| std::str::from_utf8(b).ok())
            .unwrap_or_default()
    }

    fn object(self, at: usize) -> ObjectRef<&'a str> {
        ObjectRef {
            api_version: self.field(at),
            kind: self.field(at + 1),
            namespace: self.field(at + 2),
            name: self.field(at + 3),
            uid: self.field(at + 4),
            field_path: self.field(at + 5),
        }
    }

    pub fn view(self) -> KeyRef<'a> {
        SeriesKey {
            regarding: self.object(0),
            related: (self.flags() & RELATED != 0).then(|| self.object(6)),
            action: self.field(12),
            reason: self.field(13),
            reporting_controller: self.field(14),
            reporting_instance: self.field(15),
            type_: self.field(16),
        }
    }

    pub fn note(self) -> &'a str {
        self.field(17)
    }

    pub fn text_len(self) -> usize {
        self.0.len().saturating_sub(self.header())
    }
}

impl fmt::Debug for KeyBuf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.packed().fmt(f)
    }
}

impl fmt::Debug for PackedKey<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyBuf")
            .field("key", &self.view())
            .field("note", &self.note())
            .finish()
    }
}

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
}

/// An [`Observation`] that owns its text, in one allocation for the key and note. The first list after a
/// start is buffered in this form until it can be replayed in time order: a decoded Event with its
/// metadata costs several KiB, this about 300 bytes, which is what keeps a restart at 100,000 raw
/// events from a memory peak of hundreds of MiB.
#[derive(Clone, Debug)]
pub struct OwnedObservation {
    raw: RawId,
    resource_version: Option<u64>,
    namespace: Box<str>,
    key: KeyBuf,
    count: u64,
    first: DateTime<Utc>,
    last: DateTime<Utc>,
}

impl OwnedObservation {
    pub fn new(obs: &Observation<'_>) -> OwnedObservation {
        OwnedObservation {
            raw: obs.raw,
            resource_version: obs.resource_version,
            namespace: obs.namespace.into(),
            key: KeyBuf::new(&obs.key, obs.note),
            count: obs.count,
            first: obs.first,
            last: obs.last,
        }
    }

    pub fn view(&self) -> Observation<'_> {
        Observation {
            raw: self.raw,
            resource_version: self.resource_version,
            namespace: &self.namespace,
            key: self.key.view(),
            note: self.key.note(),
            count: self.count,
            first: self.first,
            last: self.last,
        }
    }

    /// The order of replay: when the occurrences happened (see `recovery::sort_for_replay`).
    pub fn replay_order(&self) -> (DateTime<Utc>, DateTime<Utc>) {
        (self.last, self.first)
    }
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
pub(crate) fn s(o: &Option<String>) -> &str {
    o.as_deref().unwrap_or("")
}

fn nonempty(o: &Option<String>) -> Option<&str> {
    o.as_deref().filter(|s| !s.is_empty())
}

pub(crate) fn objref(r: &ObjectReference) -> ObjectRef<&str> {
    ObjectRef {
        api_version: s(&r.api_version),
        kind: s(&r.kind),
        namespace: s(&r.namespace),
        name: s(&r.name),
        uid: s(&r.uid),
        field_path: s(&r.field_path),
    }
}

/// Converts a Kubernetes timestamp to the engine's clock type.
pub fn to_chrono(t: Timestamp) -> DateTime<Utc> {
    DateTime::from_timestamp(t.as_second(), t.subsec_nanosecond().max(0) as u32).unwrap_or_default()
}

/// Reads a raw core/v1 Event (SPEC "Grouping" and "Input").
///
/// - regarding = `involvedObject`; reportingController = `reportingComponent`, else `source.component`;
///   reportingInstance = `reportingInstance`, else `source.host`.
/// - count = `series.count` when the event has a series, else `count`; at least 1.
/// - first = `eventTime`, else `firstTimestamp`, else `creationTimestamp`; last =
///   `series.lastObservedTime`, else `lastTimestamp`, else first. `last` is never before `first`.
pub fn observe(ev: &Event) -> Result<Observation<'_>, NormaliseError> {
    let meta = &ev.metadata;
    let name = nonempty(&meta.name).ok_or(NormaliseError::MissingName)?;
    let namespace = nonempty(&meta.namespace).ok_or(NormaliseError::MissingNamespace)?;
    let source = ev.source.as_ref();
    let reporting_controller = nonempty(&ev.reporting_component)
        .or_else(|| source.and_then(|s| nonempty(&s.component)))
        .unwrap_or("");
    let reporting_instance = nonempty(&ev.reporting_instance)
        .or_else(|| source.and_then(|s| nonempty(&s.host)))
        .unwrap_or("");
    let key = SeriesKey {
        regarding: objref(&ev.involved_object),
        related: ev.related.as_ref().map(objref),
        action: s(&ev.action),
        reason: s(&ev.reason),
        reporting_controller,
        reporting_instance,
        type_: s(&ev.type_),
    };
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
    Ok(Observation {
        raw: RawId::of(namespace, name, s(&meta.uid)),
        resource_version: meta
            .resource_version
            .as_deref()
            .and_then(|v| v.parse().ok()),
        namespace,
        key,
        note: s(&ev.message),
        count,
        first,
        last,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
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
    fn an_owned_observation_reads_back_as_the_observation_it_was_made_from() {
        let mut ev = legacy();
        ev.related = Some(ObjectReference {
            kind: Some("Node".into()),
            name: Some("node-1".into()),
            ..Default::default()
        });
        ev.action = Some("Pulling".into());
        ev.message = Some("ünïcode ✓".into());
        let obs = observe(&ev).unwrap();
        let owned = OwnedObservation::new(&obs);
        assert_eq!(owned.view(), obs);
        assert_eq!(owned.view().key.id(None), obs.key.id(None));
        // Without `related`, the key must not grow an empty one.
        let plain = legacy();
        let plain = observe(&plain).unwrap();
        assert_eq!(OwnedObservation::new(&plain).view(), plain);
    }

    #[test]
    fn legacy_event_uses_source_and_count() {
        let ev = legacy();
        let o = observe(&ev).unwrap();
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
        let o = observe(&ev).unwrap();
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
        let o = observe(&ev).unwrap();
        assert_eq!(o.count, 1);
        assert_eq!(o.first, o.last);
    }

    #[test]
    fn bad_input_is_an_error_not_a_panic() {
        let mut ev = legacy();
        ev.metadata.namespace = None;
        assert_eq!(observe(&ev).unwrap_err(), NormaliseError::MissingNamespace);
        let mut ev = legacy();
        ev.first_timestamp = None;
        ev.last_timestamp = None;
        assert_eq!(observe(&ev).unwrap_err(), NormaliseError::NoTimestamp);
        let mut ev = legacy();
        ev.count = Some(-3);
        assert_eq!(observe(&ev).unwrap().count, 1);
        let mut ev = legacy();
        ev.last_timestamp = Some(Time(ts("2025-01-01T00:00:00Z")));
        let o = observe(&ev).unwrap();
        assert!(o.first <= o.last);
    }

    #[test]
    fn key_ignores_note_unless_asked_and_compares_every_ref_field() {
        let a = legacy();
        let mut b = legacy();
        b.message = Some("another message".into());
        let (oa, ob) = (observe(&a).unwrap(), observe(&b).unwrap());
        assert_eq!(oa.key.id(None), ob.key.id(None));
        assert_ne!(oa.key.id(Some(oa.note)), ob.key.id(Some(ob.note)));

        let mut c = legacy();
        c.involved_object.field_path = Some("spec.containers{other}".into());
        assert_ne!(oa.key.id(None), observe(&c).unwrap().key.id(None));
        let mut d = legacy();
        d.involved_object.resource_version = Some("100".into());
        assert_eq!(oa.key.id(None), observe(&d).unwrap().key.id(None));
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
            observe(&a).unwrap().key.id(None),
            observe(&b).unwrap().key.id(None)
        );
    }

    #[test]
    fn owned_key_hashes_like_the_borrowed_one() {
        let ev = legacy();
        let o = observe(&ev).unwrap();
        let owned = KeyBuf::new(&o.key, o.note);
        assert_eq!(owned.view(), o.key);
        assert_eq!(owned.note(), o.note);
        assert_eq!(owned.view().id(None), o.key.id(None));
        let id = o.key.id(None);
        assert_eq!(id.to_string().parse::<KeyId>().unwrap(), id);
    }

    #[test]
    fn keys_longer_than_64_kib_keep_every_field() {
        let mut ev = legacy();
        let long = "x".repeat(70_000);
        ev.message = Some(long.clone());
        ev.involved_object.name = Some("y".repeat(300));
        let o = observe(&ev).unwrap();
        assert!(o.key.related.is_none());
        let owned = KeyBuf::new(&o.key, o.note);
        assert_eq!(owned.view(), o.key);
        assert_eq!(owned.note(), long);
        let k = &o.key;
        let scalars = [
            k.action,
            k.reason,
            k.reporting_controller,
            k.reporting_instance,
            k.type_,
        ];
        let text: usize = k
            .regarding
            .parts()
            .iter()
            .chain(&scalars)
            .map(|p| p.len())
            .sum();
        assert_eq!(owned.text_len(), text + long.len());
        let short = KeyBuf::new(&observe(&legacy()).unwrap().key, "n");
        assert!(short.text_len() < 1_000);
        assert_eq!(short.note(), "n");
    }
}
