//! The series object: the contract between the operator and the events.k8s.io/v1 Events it writes.
//!
//! Everything about how a series is stored lives here: the object's name, its labels and annotations,
//! how a [`Snapshot`] becomes an object the API accepts ([`encode`], with the field rules of
//! [`fields`]), and how an object is read back after a restart ([`decode`]).
//!
//! What a series object carries for an exact rebuild:
//! - label `app.kubernetes.io/managed-by=event-series`, which keeps it out of the raw-event watch;
//! - label `eventseries.dev/state`: Ongoing or Finished;
//! - label `eventseries.dev/key`: the [`KeyId`], 32 hex digits;
//! - annotation `eventseries.dev/watermark`: resourceVersion up to which every raw event was absorbed;
//! - annotation `eventseries.dev/sources`: `<16 hex raw id>=<count>@<unix µs>` for at most
//!   [`MAX_SOURCES`](crate::intent::MAX_SOURCES) raw objects, comma-separated;
//! - annotation `eventseries.dev/written-at`: when it was written, so that every heartbeat changes it;
//! - `eventTime`, `series.count`, `series.lastObservedTime`, and the key fields themselves.

pub mod decode;
pub mod encode;
pub mod fields;

pub use decode::{DecodeError, decode};
pub use encode::to_event;

use crate::intent::{Snapshot, Source};
use crate::key::{KeyId, KeyRef, ObjectRef, RawId};
use chrono::{DateTime, Utc};
use fields::dns_subdomain;
use xxhash_rust::xxh3::xxh3_64;

pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";
pub const MANAGED_BY: &str = "event-series";
pub const STATE_LABEL: &str = "eventseries.dev/state";
/// The series' [`KeyId`]: how raw events find their series object after a restart.
pub const KEY_LABEL: &str = "eventseries.dev/key";
/// Highest raw-event resourceVersion fully absorbed when the object was written.
pub const WATERMARK_ANNOTATION: &str = "eventseries.dev/watermark";
/// `<raw id>=<count>@<unix µs>,…` for the series' most recently updated raw objects.
pub const SOURCES_ANNOTATION: &str = "eventseries.dev/sources";
/// When the object was last written; changes on every heartbeat, so the write refreshes the TTL.
pub const WRITTEN_AT_ANNOTATION: &str = "eventseries.dev/written-at";

/// The label selector the raw-event watch uses to leave out the operator's own objects.
pub fn not_managed_selector() -> String {
    format!("{MANAGED_BY_LABEL}!={MANAGED_BY}")
}

/// The label selector that lists the operator's own objects.
pub fn managed_selector() -> String {
    format!("{MANAGED_BY_LABEL}={MANAGED_BY}")
}

const NAME_PREFIX_LIMIT: usize = 200;

/// The namespace the series object lives in: the raw event's, except that the events API accepts a
/// cluster-scoped `regarding` only in `default` or `kube-system`.
pub fn namespace<'a>(raw_namespace: &'a str, regarding: &ObjectRef<&str>) -> &'a str {
    if regarding.namespace.is_empty() && !matches!(raw_namespace, "default" | "kube-system") {
        "default"
    } else {
        raw_namespace
    }
}

/// The object name of a series: readable prefix, then a hash of the key and the start second, so that a
/// repeated create of one series can only ever hit the same name.
pub fn object_name(key: &KeyRef, id: KeyId, first: DateTime<Utc>) -> String {
    let mut seed = id.get().to_le_bytes().to_vec();
    seed.extend_from_slice(&first.timestamp().to_le_bytes());
    let prefix = or_else_owned(
        dns_subdomain(key.regarding.name, NAME_PREFIX_LIMIT),
        "series",
    );
    format!("{prefix}.{:016x}", xxh3_64(&seed))
}

fn or_else_owned(s: String, fallback: &str) -> String {
    if s.is_empty() { fallback.to_owned() } else { s }
}

/// The object name a snapshot is written under.
pub fn name_of(s: &Snapshot) -> String {
    match &s.stored_name {
        Some(name) => name.to_string(),
        None => object_name(&s.key.view(), s.id, s.first),
    }
}

/// The `eventseries.dev/sources` annotation.
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
}
