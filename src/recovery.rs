//! Object → series: reading the operator's own events.k8s.io/v1 Events back after a restart.
//!
//! What a series object carries for an exact rebuild (bounded to well under 1 KiB):
//! - label `eventseries.dev/key`: the [`KeyId`], 32 hex digits;
//! - label `eventseries.dev/state`: Ongoing or Finished;
//! - annotation `eventseries.dev/watermark`: resourceVersion up to which every raw event was absorbed;
//! - annotation `eventseries.dev/sources`: `<raw id>=<count>` for at most
//!   [`MAX_SOURCES`](crate::engine::MAX_SOURCES) raw objects, each `<16 hex>=<count>@<unix µs>`
//!   (about 45 bytes, so at most about 750 bytes);
//! - `eventTime`, `series.count`, `series.lastObservedTime`, and the key fields themselves.

use crate::engine::{PersistedSeries, SeriesState, Source};
use crate::key::{KeyBuf, KeyId, OwnedObservation, RawId, SeriesKey, objref, s, to_chrono};
use crate::mapping::{
    KEY_LABEL, SOURCES_ANNOTATION, STATE_LABEL, WATERMARK_ANNOTATION, WRITTEN_AT_ANNOTATION,
};
use chrono::{DateTime, Utc};
use k8s_openapi::api::events::v1::Event;

/// Why a series object could not be restored. It is skipped with a log line and a metric; its raw
/// events then start a new series, which is the safe side (a second object, never a lost count).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum RecoveryError {
    #[error("series object has no {0}")]
    Missing(&'static str),
    #[error("series object has an invalid {field}: {value:?}")]
    Invalid { field: &'static str, value: String },
}

/// Puts listed raw events in the order their occurrences happened. A list arrives in name order; fed
/// in time order, candidates and gaps form exactly as they did when the events were watched live.
pub fn sort_for_replay(observations: &mut [OwnedObservation]) {
    observations.sort_by_key(OwnedObservation::replay_order);
}

pub fn encode_sources(sources: &[Source]) -> String {
    let mut out = String::with_capacity(sources.len() * 28);
    for (i, s) in sources.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(&format!("{}={}", s.raw, s.count));
        if let Some(last) = s.last {
            out.push_str(&format!("@{}", last.timestamp_micros()));
        }
    }
    out
}

/// Parses `encode_sources` output; malformed entries are skipped (they only cost exactness for one raw
/// object, never a crash).
pub fn decode_sources(s: &str) -> Vec<Source> {
    s.split(',')
        .filter_map(|entry| {
            let (raw, rest) = entry.split_once('=')?;
            let (count, last) = match rest.split_once('@') {
                Some((c, micros)) => (c, Some(micros.trim().parse::<i64>().ok()?)),
                None => (rest, None),
            };
            Some(Source {
                raw: raw.trim().parse::<RawId>().ok()?,
                count: count.trim().parse().ok()?,
                last: last.and_then(DateTime::from_timestamp_micros),
            })
        })
        .collect()
}

/// Reads one of the operator's own series objects.
pub fn parse(ev: &Event) -> Result<PersistedSeries, RecoveryError> {
    let meta = &ev.metadata;
    let label = |k: &'static str| meta.labels.as_ref().and_then(|l| l.get(k));
    let annotation = |k: &'static str| meta.annotations.as_ref().and_then(|a| a.get(k));
    let id_text = label(KEY_LABEL).ok_or(RecoveryError::Missing("label eventseries.dev/key"))?;
    let id: KeyId = id_text.parse().map_err(|_| RecoveryError::Invalid {
        field: "label eventseries.dev/key",
        value: id_text.clone(),
    })?;
    let state = match label(STATE_LABEL).map(String::as_str) {
        Some("Ongoing") => SeriesState::Ongoing,
        Some("Finished") => SeriesState::Finished,
        other => {
            return Err(RecoveryError::Invalid {
                field: "label eventseries.dev/state",
                value: other.unwrap_or("").to_owned(),
            });
        }
    };
    let name = meta
        .name
        .clone()
        .ok_or(RecoveryError::Missing("metadata.name"))?;
    let namespace = meta
        .namespace
        .clone()
        .ok_or(RecoveryError::Missing("metadata.namespace"))?;
    let first = ev
        .event_time
        .as_ref()
        .map(|t| to_chrono(t.0))
        .ok_or(RecoveryError::Missing("eventTime"))?;
    let (count, last) = match &ev.series {
        Some(s) => (s.count.max(1) as u64, to_chrono(s.last_observed_time.0)),
        None => (1, first),
    };
    let regarding = ev
        .regarding
        .as_ref()
        .ok_or(RecoveryError::Missing("regarding"))?;
    let key = SeriesKey {
        regarding: objref(regarding),
        related: ev.related.as_ref().map(objref),
        action: s(&ev.action),
        reason: s(&ev.reason),
        reporting_controller: s(&ev.reporting_controller),
        reporting_instance: s(&ev.reporting_instance),
        type_: s(&ev.type_),
    };
    let watermark = match annotation(WATERMARK_ANNOTATION) {
        Some(w) => w.parse().map_err(|_| RecoveryError::Invalid {
            field: "annotation eventseries.dev/watermark",
            value: w.clone(),
        })?,
        None => 0,
    };
    let last_write = annotation(WRITTEN_AT_ANNOTATION)
        .and_then(|w| DateTime::parse_from_rfc3339(w).ok())
        .map(|w| w.with_timezone(&Utc));
    Ok(PersistedSeries {
        id,
        name,
        namespace,
        key: KeyBuf::new(&key, s(&ev.note)),
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
    fn sources_round_trip_and_tolerate_garbage() {
        let src = vec![
            Source {
                raw: RawId(0xdead_beef),
                count: 7,
                last: DateTime::from_timestamp_micros(1_800_000_000_123_456),
            },
            Source {
                raw: RawId(u64::MAX),
                count: 1,
                last: None,
            },
        ];
        let text = encode_sources(&src);
        assert_eq!(
            text,
            "00000000deadbeef=7@1800000000123456,ffffffffffffffff=1"
        );
        assert_eq!(decode_sources(&text), src);
        assert_eq!(
            decode_sources("zz=1,,00000000deadbeef=x,0000000000000001=2,0000000000000002=3@x")
                .len(),
            1
        );
        assert!(decode_sources("").is_empty());
    }

    #[test]
    fn objects_without_our_labels_are_refused() {
        let ev = Event::default();
        assert_eq!(
            parse(&ev).unwrap_err(),
            RecoveryError::Missing("label eventseries.dev/key")
        );
    }
}
