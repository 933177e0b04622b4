//! A standby's writes the leader has made: the own-object watch reports each object the leader
//! wrote, and a pending write it covers is dropped.

use super::{Queue, Target, Verb, Version};
use crate::object;
use chrono::{DateTime, Utc};
use event_series_core::intent::{Intent, SeriesState, StoredSeries, WriteKind};
use k8s_openapi::api::events::v1::Event;
use std::time::Instant;

/// A series object as another replica wrote it: what a standby learns from the own-object watch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Observed {
    pub target: Target,
    /// The series' start, so that an object of an earlier series of the key acknowledges nothing.
    pub first: DateTime<Utc>,
    pub count: u64,
    pub last: DateTime<Utc>,
    pub state: SeriesState,
    /// Which of the series' names the object has.
    pub variant: u8,
    /// Its resourceVersion, the precondition of this replica's next update of it.
    pub version: Option<Version>,
}

impl Observed {
    /// What `ev`, a series object that checked out as `stored`, tells the writer.
    pub fn of(ev: &Event, stored: &StoredSeries) -> Option<Observed> {
        let (base, variant) = object::split_variant(ev.metadata.name.as_deref()?);
        Some(Observed {
            target: Target {
                namespace: stored.namespace.clone(),
                name: base.to_owned(),
            },
            first: stored.first,
            count: stored.count,
            last: stored.last,
            state: stored.state,
            variant,
            version: Version::of(ev.metadata.resource_version.as_deref()),
        })
    }

    /// Whether the object already holds what `intent` would write (the same series, no newer count
    /// or occurrence, and a finish only if it is Finished), so that writing it would add nothing.
    pub fn covers(&self, intent: &Intent) -> bool {
        let s = &intent.series;
        let finishing =
            s.state == SeriesState::Finished || matches!(intent.kind, WriteKind::Finish(_));
        s.first == self.first
            && self.count >= s.count
            && self.last >= s.last
            && (!finishing || self.state == SeriesState::Finished)
    }
}

impl Queue {
    /// The object of `seen.target` was seen written by another replica (this one stands by). A
    /// pending write it covers (no newer count or occurrence, and a finish only by a Finished object)
    /// is dropped: the leader made it. One it does not cover becomes an update of that object, at
    /// the name it has. Whether a pending write was dropped.
    pub fn acknowledge(&mut self, seen: &Observed) -> bool {
        self.versions.learn(&seen.target, seen.version.clone());
        let Some((target, p)) = self.pending.get_key_value(&seen.target) else {
            return false;
        };
        if p.in_flight || p.intent.series.first != seen.first {
            return false;
        }
        let covered = seen.covers(&p.intent);
        let target = target.clone();
        if !covered {
            if let Some(p) = self.pending.get_mut(&target) {
                p.variant = p.variant.max(seen.variant);
                p.verb = Verb::Patch;
            }
            return false;
        }
        if let Some(p) = self.remove(&target) {
            let lane = if p.deferred {
                &mut self.deferred
            } else {
                &mut self.waiting
            };
            lane.remove(&target.namespace, &target);
        }
        if self.pending.is_empty() {
            self.waiting_since = None;
        }
        true
    }

    /// The object of `target` is at `version` now, as an answer to this replica's request said.
    pub fn learn(&mut self, target: &Target, version: Option<Version>) {
        self.versions.learn(target, version);
    }

    /// The writer may write again (it took the Lease): what was pending waits from now, not from
    /// when it was queued, so that a write held back while standing by is not taken as stuck.
    pub fn resume(&mut self, now: Instant) {
        if self.waiting_since.is_some() {
            self.waiting_since = Some(now);
        }
    }
}
