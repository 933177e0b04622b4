//! A series object read back after a restart, as a [`StoredSeries`] claim for the engine to check.
//!
//! Anyone allowed to create Events in a namespace can create an object that looks like a series
//! object, so an object is only a claim. It is adopted only if:
//! - its labels and annotations parse (every entry of `eventseries.dev/sources` included);
//! - its `eventseries.dev/key` label is the id of its own namespace and fields (with or without the
//!   note, as `includeNote` may have changed): a copy of another namespace's object, or an edited
//!   one, fails here;
//! - its name is the one derived from that key and its start;
//! - its format (`eventseries.dev/format`) is one this build reads.
//!
//! Times in the future beyond the clock tolerance are clamped to now, so that a far-future
//! `lastObservedTime` cannot keep a series Ongoing forever.

use super::{
    KEY_LABEL, SOURCES_ANNOTATION, STATE_LABEL, WATERMARK_ANNOTATION, WRITTEN_AT_ANNOTATION,
    object_name, parse_sources,
};
use chrono::{DateTime, TimeDelta, Utc};
use event_series_core::intent::{MAX_SOURCES, SeriesState, StoredSeries};
use event_series_core::key::fields::{CONTROLLER_LIMIT, LENGTH_LIMIT, NOTE_LIMIT, reference};
use event_series_core::key::normalise::{Cutter, to_chrono};
use event_series_core::key::{KeyBuf, KeyId, SeriesKey};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

/// Why a series object was not adopted. It is skipped with a log line and counted in
/// `event_series_recovery_rejected_total{reason}`; its raw events then start a new series, which is the
/// safe side (a second object, never a count taken from someone else's claim).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DecodeError {
    #[error("series object has no {0}")]
    Missing(&'static str),
    #[error("series object has an invalid {field}: {value:?}")]
    Invalid { field: &'static str, value: String },
    #[error(
        "label eventseries.dev/key {label} is not the key of the object's own namespace and fields \
         (a copy from another namespace, or an edited object)"
    )]
    KeyMismatch { label: KeyId },
    #[error("name {name:?} is not the one derived from its key and start ({derived:?})")]
    NameMismatch { name: String, derived: String },
    #[error(
        "watermark {watermark} lies beyond the resourceVersion {list} of the list it was read in"
    )]
    FutureWatermark { watermark: u64, list: u64 },
    #[error(
        "eventTime {first} lies beyond the clock tolerance; the object's name is derived from it, \
         so it cannot be clamped without moving the series to another object"
    )]
    FutureStart { first: DateTime<Utc> },
    #[error(
        "written in format {found:?} (annotation eventseries.dev/format), newer than format \
         {newest}, the newest this build reads: a newer release wrote it (a downgrade); it is left \
         untouched, and the series' raw events go to an object of their own"
    )]
    UnknownFormat { found: String, newest: u32 },
}

impl DecodeError {
    /// The `reason` label of `event_series_recovery_rejected_total` (a bounded set).
    pub fn reason(&self) -> &'static str {
        match self {
            DecodeError::Missing(_) => "missing_field",
            DecodeError::Invalid { .. } => "unparsable",
            DecodeError::KeyMismatch { .. } => "key_mismatch",
            DecodeError::NameMismatch { .. } => "name_mismatch",
            DecodeError::FutureWatermark { .. } => "future_watermark",
            DecodeError::FutureStart { .. } => "future_start",
            DecodeError::UnknownFormat { .. } => "unknown_format",
        }
    }

    /// Every reason, so that the metric exports each at 0 from the start.
    pub const REASONS: [&'static str; 7] = [
        "missing_field",
        "unparsable",
        "key_mismatch",
        "name_mismatch",
        "future_watermark",
        "future_start",
        "unknown_format",
    ];
}

/// What a claim is checked against: the operator's clock and how far ahead of it a time may be.
#[derive(Clone, Copy, Debug)]
pub struct Check {
    pub now: DateTime<Utc>,
    pub tolerance: TimeDelta,
}

impl Check {
    /// A time beyond `now + tolerance` is clamped to `now`.
    fn clamp(&self, t: DateTime<Utc>) -> DateTime<Utc> {
        match self.now.checked_add_signed(self.tolerance) {
            Some(limit) if t > limit => self.now,
            _ => t,
        }
    }
}

/// What a series object's annotations say beyond its fields.
struct Annotations {
    watermark: u64,
    sources: Vec<event_series_core::intent::Source>,
    last_write: Option<DateTime<Utc>>,
}

fn invalid(field: &'static str, value: &str) -> DecodeError {
    DecodeError::Invalid {
        field,
        value: event_series_core::key::fields::cut(value, 80).to_owned(),
    }
}

/// The key id and the state the labels claim.
fn labels(meta: &ObjectMeta) -> Result<(KeyId, SeriesState), DecodeError> {
    let label = |k: &'static str| meta.labels.as_ref().and_then(|l| l.get(k));
    let id_text = label(KEY_LABEL).ok_or(DecodeError::Missing("label eventseries.dev/key"))?;
    let id: KeyId = id_text
        .parse()
        .map_err(|_| invalid("label eventseries.dev/key", id_text))?;
    let state = match label(STATE_LABEL).map(String::as_str) {
        Some("Ongoing") => SeriesState::Ongoing,
        Some("Finished") => SeriesState::Finished,
        other => return Err(invalid("label eventseries.dev/state", other.unwrap_or(""))),
    };
    Ok((id, state))
}

fn annotations(meta: &ObjectMeta) -> Result<Annotations, DecodeError> {
    let annotation = |k: &'static str| meta.annotations.as_ref().and_then(|a| a.get(k));
    let watermark = match annotation(WATERMARK_ANNOTATION) {
        Some(w) => w
            .parse()
            .map_err(|_| invalid("annotation eventseries.dev/watermark", w))?,
        None => 0,
    };
    let sources = match annotation(SOURCES_ANNOTATION) {
        Some(s) => parse_sources(s)
            .filter(|s| s.len() <= MAX_SOURCES)
            .ok_or_else(|| invalid("annotation eventseries.dev/sources", s))?,
        None => Vec::new(),
    };
    let last_write = match annotation(WRITTEN_AT_ANNOTATION) {
        Some(w) => Some(
            DateTime::parse_from_rfc3339(w)
                .map_err(|_| invalid("annotation eventseries.dev/written-at", w))?
                .with_timezone(&Utc),
        ),
        None => None,
    };
    Ok(Annotations {
        watermark,
        sources,
        last_write,
    })
}

/// The object's key and note, which must be the key its label names, with no field beyond its
/// limit: the same cuts as normalisation, so a forged object's 1 MB note is not kept either.
fn key<'a>(
    ev: &'a Event,
    namespace: &'a str,
    id: KeyId,
) -> Result<(SeriesKey<&'a str>, &'a str), DecodeError> {
    let regarding = ev
        .regarding
        .as_ref()
        .ok_or(DecodeError::Missing("regarding"))?;
    let c = Cutter::default();
    let key = SeriesKey {
        namespace: c.cut(namespace, reference::NAMESPACE),
        regarding: c.object_ref(regarding),
        related: ev.related.as_ref().map(|r| c.object_ref(r)),
        action: c.opt(&ev.action, LENGTH_LIMIT),
        reason: c.opt(&ev.reason, LENGTH_LIMIT),
        reporting_controller: c.opt(&ev.reporting_controller, CONTROLLER_LIMIT),
        reporting_instance: c.opt(&ev.reporting_instance, LENGTH_LIMIT),
        type_: c.opt(&ev.type_, LENGTH_LIMIT),
    };
    let note = c.opt(&ev.note, NOTE_LIMIT);
    if c.any() || (key.id(None) != id && key.id(Some(note)) != id) {
        return Err(DecodeError::KeyMismatch { label: id });
    }
    Ok((key, note))
}

/// Reads and checks one of the operator's own series objects.
pub fn decode(ev: &Event, check: Check) -> Result<StoredSeries, DecodeError> {
    let meta = &ev.metadata;
    if super::format_of(meta).is_none_or(|f| f > super::FORMAT) {
        let found = meta
            .annotations
            .as_ref()
            .and_then(|a| a.get(super::FORMAT_ANNOTATION))
            .map_or("", String::as_str);
        return Err(DecodeError::UnknownFormat {
            found: event_series_core::key::fields::cut(found, 20).to_owned(),
            newest: super::FORMAT,
        });
    }
    let (id, state) = labels(meta)?;
    let name = meta
        .name
        .as_deref()
        .ok_or(DecodeError::Missing("metadata.name"))?;
    let namespace = meta
        .namespace
        .as_deref()
        .ok_or(DecodeError::Missing("metadata.namespace"))?;
    let first = ev
        .event_time
        .as_ref()
        .map(|t| to_chrono(t.0))
        .ok_or(DecodeError::Missing("eventTime"))?;
    let (count, last) = match &ev.series {
        Some(s) => (s.count.max(1) as u64, to_chrono(s.last_observed_time.0)),
        None => (1, first),
    };
    let claims = annotations(meta)?;
    let (key, note) = key(ev, namespace, id)?;
    let derived = object_name(&key, id, first);
    let (name, name_variant) = super::split_variant(name);
    if derived != name {
        return Err(DecodeError::NameMismatch {
            name: event_series_core::key::fields::cut(name, 80).to_owned(),
            derived,
        });
    }
    // The operator never starts a series beyond its clock's tolerance, and the name is bound to
    // the start: a later time is a forgery (or a clock that went back), refused rather than
    // clamped into a second object for the same series.
    if check.clamp(first) != first {
        return Err(DecodeError::FutureStart { first });
    }
    Ok(StoredSeries {
        id,
        namespace: key.namespace.to_owned(),
        key: KeyBuf::new(&key, note),
        count,
        first,
        last: check.clamp(last).max(first),
        state,
        watermark: claims.watermark,
        sources: claims
            .sources
            .into_iter()
            .map(|mut s| {
                s.last = s.last.map(|t| check.clamp(t));
                s
            })
            .collect(),
        last_write: claims.last_write.map(|t| check.clamp(t)),
        name_variant,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn objects_without_our_labels_are_refused() {
        let ev = Event::default();
        let check = Check {
            now: Utc::now(),
            tolerance: TimeDelta::minutes(10),
        };
        assert_eq!(
            decode(&ev, check).unwrap_err(),
            DecodeError::Missing("label eventseries.dev/key")
        );
    }
}
