//! A standby's writes the leader has made: the own-object watch reports each object the leader
//! wrote, and a pending write it covers is dropped.

use super::{Queue, Target, Verb};
use chrono::{DateTime, Utc};
use event_series_core::intent::{SeriesState, WriteKind};
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
}

impl Queue {
    /// The object of `seen.target` was seen written by another replica (this one stands by). A
    /// pending write it covers (no newer count or occurrence, and a finish only by a Finished object)
    /// is dropped: the leader made it. One it does not cover becomes an update of that object, at
    /// the name it has. Whether a pending write was dropped.
    pub fn acknowledge(&mut self, seen: &Observed) -> bool {
        let Some((target, p)) = self.pending.get_key_value(&seen.target) else {
            return false;
        };
        let s = &p.intent.series;
        if p.in_flight || s.first != seen.first {
            return false;
        }
        let finishing =
            s.state == SeriesState::Finished || matches!(p.intent.kind, WriteKind::Finish(_));
        let covered = seen.count >= s.count
            && seen.last >= s.last
            && (!finishing || seen.state == SeriesState::Finished);
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

    /// The writer may write again (it took the Lease): what was pending waits from now, not from
    /// when it was queued, so that a write held back while standing by is not taken as stuck.
    pub fn resume(&mut self, now: Instant) {
        if self.waiting_since.is_some() {
            self.waiting_since = Some(now);
        }
    }
}
