//! A series object read back after a restart, as a [`StoredSeries`] claim for the engine to check.

use super::{
    KEY_LABEL, SOURCES_ANNOTATION, STATE_LABEL, WATERMARK_ANNOTATION, WRITTEN_AT_ANNOTATION,
    decode_sources, object_name,
};
use crate::intent::{SeriesState, StoredSeries};
use crate::key::normalise::{object_ref, or_empty, to_chrono};
use crate::key::{KeyBuf, KeyId, SeriesKey};
use chrono::{DateTime, Utc};
use k8s_openapi::api::events::v1::Event;
use std::sync::Arc;

/// Why a series object could not be restored. It is skipped with a log line and a metric; its raw
/// events then start a new series, which is the safe side (a second object, never a lost count).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DecodeError {
    #[error("series object has no {0}")]
    Missing(&'static str),
    #[error("series object has an invalid {field}: {value:?}")]
    Invalid { field: &'static str, value: String },
}

/// Reads one of the operator's own series objects.
pub fn decode(ev: &Event) -> Result<StoredSeries, DecodeError> {
    let meta = &ev.metadata;
    let label = |k: &'static str| meta.labels.as_ref().and_then(|l| l.get(k));
    let annotation = |k: &'static str| meta.annotations.as_ref().and_then(|a| a.get(k));
    let id_text = label(KEY_LABEL).ok_or(DecodeError::Missing("label eventseries.dev/key"))?;
    let id: KeyId = id_text.parse().map_err(|_| DecodeError::Invalid {
        field: "label eventseries.dev/key",
        value: id_text.clone(),
    })?;
    let state = match label(STATE_LABEL).map(String::as_str) {
        Some("Ongoing") => SeriesState::Ongoing,
        Some("Finished") => SeriesState::Finished,
        other => {
            return Err(DecodeError::Invalid {
                field: "label eventseries.dev/state",
                value: other.unwrap_or("").to_owned(),
            });
        }
    };
    let name = meta
        .name
        .clone()
        .ok_or(DecodeError::Missing("metadata.name"))?;
    let namespace = meta
        .namespace
        .clone()
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
    let regarding = ev
        .regarding
        .as_ref()
        .ok_or(DecodeError::Missing("regarding"))?;
    let key = SeriesKey {
        regarding: object_ref(regarding),
        related: ev.related.as_ref().map(object_ref),
        action: or_empty(&ev.action),
        reason: or_empty(&ev.reason),
        reporting_controller: or_empty(&ev.reporting_controller),
        reporting_instance: or_empty(&ev.reporting_instance),
        type_: or_empty(&ev.type_),
    };
    let watermark = match annotation(WATERMARK_ANNOTATION) {
        Some(w) => w.parse().map_err(|_| DecodeError::Invalid {
            field: "annotation eventseries.dev/watermark",
            value: w.clone(),
        })?,
        None => 0,
    };
    let last_write = annotation(WRITTEN_AT_ANNOTATION)
        .and_then(|w| DateTime::parse_from_rfc3339(w).ok())
        .map(|w| w.with_timezone(&Utc));
    let stored_name = (object_name(&key, id, first) != name).then(|| Arc::from(name));
    Ok(StoredSeries {
        id,
        stored_name,
        namespace,
        key: KeyBuf::new(&key, or_empty(&ev.note)),
        count,
        first,
        last: last.max(first),
        state,
        watermark,
        sources: annotation(SOURCES_ANNOTATION)
            .map(|s| decode_sources(s))
            .unwrap_or_default(),
        last_write,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn objects_without_our_labels_are_refused() {
        let ev = Event::default();
        assert_eq!(
            decode(&ev).unwrap_err(),
            DecodeError::Missing("label eventseries.dev/key")
        );
    }
}
