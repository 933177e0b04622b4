//! Observations kept to be replayed later, in time order: the first list of a restart (see the
//! binary's `restart` module), which arrives in name order.

use super::packed::{self, PackedKey};
use super::{Observation, RawId};
use chrono::{DateTime, Utc};
use std::ops::Range;

/// Observations held for a replay, packed into two growing buffers: one record per observation and
/// one byte buffer for every key and note. One small allocation per observation, interleaved with
/// the engine's own allocations made meanwhile, left the heap fragmented after the replay freed
/// them (each replay of a restart raised the peak resident size); large buffers are mapped apart
/// from the heap and go back to the OS whole.
#[derive(Default)]
pub struct ReplayBuffer {
    records: Vec<Record>,
    keys: Vec<u8>,
}

struct Record {
    raw: RawId,
    resource_version: Option<u64>,
    count: u64,
    first: DateTime<Utc>,
    last: DateTime<Utc>,
    /// `written` and `created` in seconds (the API's precision; [`NONE`] for none).
    written: i64,
    created: i64,
    /// Its key and note in [`packed::encode`]'s format, within `keys`.
    key: Range<usize>,
}

/// No time, in a record's seconds.
const NONE: i64 = i64::MIN;

fn secs(t: Option<DateTime<Utc>>) -> i64 {
    t.map_or(NONE, |t| t.timestamp())
}

fn time(secs: i64) -> Option<DateTime<Utc>> {
    (secs != NONE)
        .then(|| DateTime::from_timestamp(secs, 0))
        .flatten()
}

impl ReplayBuffer {
    /// Keeps a copy of `obs` (its cuts were counted when it was read).
    pub fn push(&mut self, obs: &Observation<'_>) {
        let start = self.keys.len();
        packed::encode(&obs.key, obs.note, &mut self.keys);
        self.records.push(Record {
            raw: obs.raw,
            resource_version: obs.resource_version,
            count: obs.count,
            first: obs.first,
            last: obs.last,
            written: secs(obs.written),
            created: secs(obs.created),
            key: start..self.keys.len(),
        });
    }

    /// Bytes the observations take (what a budget counts); the buffers' spare capacity is not
    /// touched, so it costs no resident memory.
    pub fn bytes(&self) -> usize {
        self.records.len() * std::mem::size_of::<Record>() + self.keys.len()
    }

    pub fn len(&self) -> usize {
        self.records.len()
    }

    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// Puts the observations in the order a watch would have delivered them: by when the API
    /// server last wrote them (else their latest occurrence), then their latest and first
    /// occurrence; ties keep the order they were pushed in (a stable sort). (By the emitters'
    /// timestamps alone, a write held up for seconds, or an emitter whose clock is behind, would
    /// be replayed before occurrences the watch delivered first.)
    pub fn sort_for_replay(&mut self) {
        self.records
            .sort_by_key(|r| (time(r.written).unwrap_or(r.last), r.last, r.first));
    }

    /// The observations, in the buffer's order.
    pub fn iter(&self) -> impl Iterator<Item = Observation<'_>> {
        self.records.iter().map(|r| {
            let packed = PackedKey(self.keys.get(r.key.clone()).unwrap_or_default());
            let key = packed.view();
            Observation {
                raw: r.raw,
                resource_version: r.resource_version,
                namespace: key.namespace,
                key,
                note: packed.note(),
                count: r.count,
                first: r.first,
                last: r.last,
                written: time(r.written),
                created: time(r.created),
                truncated: false,
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key::normalise;
    use k8s_openapi::api::core::v1::{Event, ObjectReference};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
        FieldsV1, ManagedFieldsEntry, ObjectMeta, Time,
    };
    use k8s_openapi::serde_json;

    fn at(s: i64) -> Time {
        let t = DateTime::from_timestamp(1_800_000_000 + s, 0).unwrap();
        Time(k8s_openapi::jiff::Timestamp::new(t.timestamp(), 0).unwrap())
    }

    fn event(name: &str, reason: &str, note: &str, last_secs: i64) -> Event {
        Event {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("shop".into()),
                uid: Some(format!("u-{name}")),
                resource_version: Some("42".into()),
                ..Default::default()
            },
            involved_object: ObjectReference {
                kind: Some("Pod".into()),
                name: Some(format!("pod-{name}")),
                namespace: Some("shop".into()),
                ..Default::default()
            },
            reason: Some(reason.into()),
            message: Some(note.into()),
            count: Some(3),
            first_timestamp: Some(at(0)),
            last_timestamp: Some(at(last_secs)),
            ..Default::default()
        }
    }

    #[test]
    fn gives_back_each_observation_as_read_in_time_order() {
        let events = [
            event("a", "BackOff", "back-off restarting", 30),
            event("b", "Unhealthy", &"x".repeat(70_000), 10),
            event("c", "BackOff", "", 30),
        ];
        let read: Vec<Observation<'_>> = events.iter().map(|e| normalise(e).unwrap()).collect();
        let mut buffer = ReplayBuffer::default();
        for obs in &read {
            buffer.push(obs);
        }
        assert_eq!(buffer.len(), 3);
        // The note was cut to 1 KiB when it was read.
        assert!((1024..4096).contains(&buffer.bytes()), "{}", buffer.bytes());
        buffer.sort_for_replay();
        let replayed: Vec<Observation<'_>> = buffer.iter().collect();
        // b happened first; a and c at the same time keep the order they were listed in.
        let expected = [&read[1], &read[0], &read[2]];
        for (got, want) in replayed.iter().zip(expected) {
            assert_eq!(
                got,
                &Observation {
                    truncated: false,
                    ..want.clone()
                }
            );
        }
        assert_eq!(replayed.len(), 3);
    }

    /// A write held up for 40 s (or an emitter whose clock is behind) is replayed where the API
    /// server wrote it, after an occurrence it wrote earlier, though its own timestamp is older.
    #[test]
    fn replays_in_the_order_the_api_server_wrote_the_objects() {
        let entry = |manager: &str, field: &str, s: i64| ManagedFieldsEntry {
            manager: Some(manager.into()),
            operation: Some("Update".into()),
            time: Some(at(s)),
            fields_v1: Some(FieldsV1(serde_json::json!({ field: {} }))),
            ..Default::default()
        };
        let mut late = event("late", "BackOff", "", 10);
        late.metadata.managed_fields = Some(vec![entry("kubelet", "f:count", 50)]);
        // Labelled by someone else at 100 s: no occurrence, and no move in the replay.
        let mut on_time = event("on-time", "BackOff", "", 30);
        on_time.metadata.managed_fields = Some(vec![
            entry("kubelet", "f:lastTimestamp", 30),
            entry("kubectl-label", "f:metadata", 100),
        ]);
        let events = [late, on_time];
        let read: Vec<Observation<'_>> = events.iter().map(|e| normalise(e).unwrap()).collect();
        assert_eq!(read[0].written.map(|t| t.timestamp()), Some(1_800_000_050));
        let mut buffer = ReplayBuffer::default();
        read.iter().for_each(|o| buffer.push(o));
        buffer.sort_for_replay();
        let names: Vec<&str> = buffer.iter().map(|o| o.key.regarding.name).collect();
        assert_eq!(names, ["pod-on-time", "pod-late"]);
    }
}
