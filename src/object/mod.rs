//! The series object: the contract between the operator and the events.k8s.io/v1 Events it writes.
//!
//! Everything about how a series is stored lives here: the object's name, its labels and annotations,
//! how a [`Snapshot`] becomes an object the API accepts ([`encode`], with the field rules of
//! [`event_series_core::key::fields`]), and how an object is read back after a restart ([`decode()`]).
//!
//! What a series object carries for an exact rebuild:
//! - label `app.kubernetes.io/managed-by=event-series`, which keeps it out of the raw-event watch;
//! - label `eventseries.dev/state`: Ongoing or Finished;
//! - label `eventseries.dev/key`: the [`KeyId`], 32 hex digits;
//! - annotation `eventseries.dev/watermark`: resourceVersion up to which every raw event was absorbed;
//! - annotation `eventseries.dev/sources`: `<16 hex raw id>=<count>@<unix µs>` for at most
//!   [`MAX_SOURCES`](event_series_core::intent::MAX_SOURCES) raw objects, comma-separated;
//! - annotation `eventseries.dev/written-at`: when it was written, so that every heartbeat changes it;
//! - `eventTime`, `series.count`, `series.lastObservedTime`, and the key fields themselves.

pub mod decode;
pub mod encode;

pub use decode::{Check, DecodeError, decode};
pub use encode::{guarded, to_event, to_update};

use chrono::{DateTime, Utc};
use event_series_core::intent::{Snapshot, Source};
use event_series_core::key::fields::dns_subdomain;
use event_series_core::key::{KeyId, KeyRef, RawId};
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
/// The layout of the object's labels, annotations and fields ([`FORMAT`]), so that a build can tell
/// an object it can read from one a newer release wrote.
pub const FORMAT_ANNOTATION: &str = "eventseries.dev/format";
/// The format this build writes, and the newest it reads. Every format ever released is read
/// (`tests/fixtures/series-object-v*.json`): 1 is the first (v0.1.0), and an object without the
/// annotation (written by builds before it existed) has the same layout.
pub const FORMAT: u32 = 1;

/// The format `ev` says it has: 1 without the annotation, `None` when it cannot be read.
pub fn format_of(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> Option<u32> {
    match meta
        .annotations
        .as_ref()
        .and_then(|a| a.get(FORMAT_ANNOTATION))
    {
        None => Some(1),
        Some(v) => v.parse().ok(),
    }
}

/// The label selector the raw-event watch uses to leave out the operator's own objects.
pub fn not_managed_selector() -> String {
    format!("{MANAGED_BY_LABEL}!={MANAGED_BY}")
}

/// The label selector that lists the operator's own objects.
pub fn managed_selector() -> String {
    format!("{MANAGED_BY_LABEL}={MANAGED_BY}")
}

const NAME_PREFIX_LIMIT: usize = 200;

/// The object name of a series: readable prefix, then a hash of the key and the start second, so that a
/// repeated create of one series can only ever hit the same name.
pub fn object_name(key: &KeyRef, id: KeyId, first: DateTime<Utc>) -> String {
    let prefix = or_else_owned(
        dns_subdomain(key.regarding.name, NAME_PREFIX_LIMIT),
        "series",
    );
    format!("{prefix}.{:016x}", name_hash(id, first))
}

/// The hash that ends a series' object name (16 hex digits): of the key and the start second.
pub fn name_hash(id: KeyId, first: DateTime<Utc>) -> u64 {
    let mut seed = [0u8; 24];
    seed[..16].copy_from_slice(&id.get().to_le_bytes());
    seed[16..].copy_from_slice(&first.timestamp().to_le_bytes());
    xxh3_64(&seed)
}

fn or_else_owned(s: String, fallback: &str) -> String {
    if s.is_empty() { fallback.to_owned() } else { s }
}

/// The object name a snapshot is written under.
pub fn name_of(s: &Snapshot) -> String {
    variant_name(&base_name_of(s), s.name_variant)
}

/// The series' first deterministic name ([`object_name`]), whatever name its object has.
pub fn base_name_of(s: &Snapshot) -> String {
    object_name(&s.key.view(), s.id, s.first)
}

/// How many alternative names a series may take when objects of others hold the earlier ones (a
/// namespace member who predicts a series' name can create an Event there first). Beyond them the
/// series is not written, and that is logged and counted as a rejected create.
pub const MAX_NAME_VARIANT: u8 = 3;

/// The `variant`-th deterministic name of the series whose first name is `base`: `base`, then
/// `base-1` ... `base-3`. Still a DNS subdomain: `base` ends in hex digits and is at most 217 bytes.
pub fn variant_name(base: &str, variant: u8) -> String {
    match variant {
        0 => base.to_owned(),
        n => format!("{base}-{n}"),
    }
}

/// A name as its first name and its variant: the inverse of [`variant_name`]. A name with no
/// variant suffix (or one beyond [`MAX_NAME_VARIANT`]) is its own first name, variant 0.
pub fn split_variant(name: &str) -> (&str, u8) {
    match name.rsplit_once('-') {
        Some((base, n))
            if n.len() == 1
                && base.rsplit_once('.').is_some_and(|(_, h)| {
                    h.len() == 16 && h.bytes().all(|b| b.is_ascii_hexdigit())
                }) =>
        {
            match n.parse::<u8>() {
                Ok(v @ 1..=MAX_NAME_VARIANT) => (base, v),
                _ => (name, 0),
            }
        }
        _ => (name, 0),
    }
}

/// Whether `ev`, found at one of the series' names, is the series' own object (written by this
/// operator for this key: a repeated create) rather than someone else's.
pub fn is_own_object(ev: &k8s_openapi::api::events::v1::Event, s: &Snapshot) -> bool {
    let Some(labels) = ev.metadata.labels.as_ref() else {
        return false;
    };
    labels.get(MANAGED_BY_LABEL).map(String::as_str) == Some(MANAGED_BY)
        && labels.get(KEY_LABEL) == Some(&s.id.to_string())
        // An object a newer release wrote (a downgrade) is never overwritten in an older format.
        && format_of(&ev.metadata).is_some_and(|f| f <= FORMAT)
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

/// Parses `encode_sources` output; `None` if any entry is malformed (the object is then not adopted:
/// a series object the operator wrote always parses).
pub fn parse_sources(s: &str) -> Option<Vec<Source>> {
    if s.is_empty() {
        return Some(Vec::new());
    }
    s.split(',')
        .map(|entry| {
            let (raw, rest) = entry.split_once('=')?;
            let (count, last) = match rest.split_once('@') {
                Some((c, micros)) => (c, Some(micros.parse::<i64>().ok()?)),
                None => (rest, None),
            };
            let last = match last {
                Some(m) => Some(DateTime::from_timestamp_micros(m)?),
                None => None,
            };
            Some(Source {
                raw: raw.parse::<RawId>().ok()?,
                count: count.parse().ok()?,
                last,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use event_series_core::key::ObjectRef;
    use event_series_core::key::fields::is_dns_subdomain;

    #[test]
    fn names_are_dns_subdomains() {
        let id = KeyId::new(42);
        let t = DateTime::from_timestamp(1_700_000_000, 0).unwrap();
        for name in ["web-0", "Node_1", "", "..", &"A".repeat(400), "a..b", "ü"] {
            let key = KeyRef {
                regarding: ObjectRef {
                    name,
                    ..Default::default()
                },
                ..Default::default()
            };
            let n = object_name(&key, id, t);
            assert!(is_dns_subdomain(&n), "{n:?}");
        }
        let key = KeyRef::default();
        let later = t + chrono::TimeDelta::seconds(1);
        assert_ne!(object_name(&key, id, t), object_name(&key, id, later));
        assert_ne!(
            object_name(&key, id, t),
            object_name(&key, KeyId::new(43), t)
        );
        assert_eq!(object_name(&key, id, t), object_name(&key, id, t));
    }

    #[test]
    fn variant_names_split_back_and_stay_dns_subdomains() {
        let id = KeyId::new(42);
        let t = DateTime::from_timestamp(1_700_000_000, 0).unwrap();
        let key = KeyRef {
            regarding: ObjectRef {
                name: &"a".repeat(400),
                ..Default::default()
            },
            ..Default::default()
        };
        let base = object_name(&key, id, t);
        for v in 0..=MAX_NAME_VARIANT {
            let name = variant_name(&base, v);
            assert!(is_dns_subdomain(&name), "{name:?}");
            assert_eq!(split_variant(&name), (base.as_str(), v));
        }
        // Not variants: beyond the last, two digits, no hash before the dash, an ordinary name.
        for name in [
            format!("{base}-4"),
            format!("{base}-0"),
            format!("{base}-10"),
            "web-1".to_owned(),
            "web.12345-1".to_owned(),
        ] {
            assert_eq!(split_variant(&name), (name.as_str(), 0), "{name:?}");
        }
    }

    #[test]
    fn sources_round_trip_and_garbage_is_refused() {
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
        assert_eq!(parse_sources(&text), Some(src));
        for bad in [
            "zz=1",
            "00000000deadbeef=1,,0000000000000001=2",
            "00000000deadbeef=x",
            "0000000000000002=3@x",
            "0000000000000002=3@99999999999999999999",
        ] {
            assert_eq!(parse_sources(bad), None, "{bad:?}");
        }
        assert_eq!(parse_sources(""), Some(Vec::new()));
    }
}
