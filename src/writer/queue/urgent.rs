//! Heartbeats and finishes that have waited too long go first, whatever namespace they are in.
//!
//! The writer serves namespaces in turn, so a quiet namespace gets its turn among every namespace
//! with writes due: with N namespaces flooding (each within its share of the pending bound), one
//! write in N+1. A namespace with many series would then have its heartbeats fall behind, and its
//! objects outlive their event TTL. So a heartbeat or a finish still pending [`URGENT_AFTER`] after
//! it was asked for is taken before the round-robin, oldest first. That cannot starve the others:
//! the engine paces heartbeats at a share of the writer's rate, and a series finishes once.
//! Backoff still holds: a write is urgent only once it is also due.

use super::{Pending, Queue, Target};
use event_series_core::intent::WriteKind;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long a heartbeat or a finish may wait for its namespace's turn.
pub const URGENT_AFTER: Duration = Duration::from_secs(30);

/// The urgent writes: (when urgent and due, the pending write's schedule epoch, target). An entry
/// whose epoch is no longer its write's is stale and skipped.
#[derive(Default)]
pub(super) struct Urgent {
    heap: BinaryHeap<Reverse<(Instant, u64, Arc<Target>)>>,
}

/// Whether `kind` keeps an object alive or ends it: what may not wait behind a flood.
fn keeps_alive(kind: WriteKind) -> bool {
    matches!(kind, WriteKind::Heartbeat | WriteKind::Finish(_))
}

impl Pending {
    /// A heartbeat or a finish asked for at `now`: urgent from `now + URGENT_AFTER` unless it already
    /// waits as one.
    pub(super) fn owes_urgently(&mut self, kind: WriteKind, now: Instant) {
        if keeps_alive(kind) && self.urgent_at.is_none() {
            self.urgent_at = Some(now + URGENT_AFTER);
        }
    }
}

impl Pending {
    /// A write carrying its heartbeat or finish landed while a newer state arrived: urgent again
    /// from now only if the newer state owes one too.
    pub(super) fn urgent_again(&mut self, now: Instant) {
        let owes = self.owed.heartbeat.is_some() || self.owed.finish.is_some();
        self.urgent_at = owes.then(|| now + URGENT_AFTER);
    }
}

impl Queue {
    /// `target`'s write was (re)scheduled for `at` with schedule `epoch`: if it owes a heartbeat or
    /// a finish, it is taken first once both urgent and due.
    pub(super) fn schedule_urgent(&mut self, target: &Arc<Target>, at: Instant, epoch: u64) {
        if let Some(urgent_at) = self.pending.get(target).and_then(|p| p.urgent_at) {
            self.urgent
                .heap
                .push(Reverse((at.max(urgent_at), epoch, target.clone())));
        }
    }

    /// Up to `limit` urgent writes due at `now`, oldest first, taken out of their lanes.
    pub(super) fn take_urgent(&mut self, now: Instant, limit: usize) -> Vec<Arc<Target>> {
        let mut taken = Vec::new();
        while taken.len() < limit
            && let Some(Reverse((at, epoch, _))) = self.urgent.heap.peek()
            && *at <= now
        {
            let epoch = *epoch;
            let Some(Reverse((_, _, target))) = self.urgent.heap.pop() else {
                break;
            };
            let Some(p) = self.pending.get(&target) else {
                continue;
            };
            if p.in_flight || p.epoch != epoch || p.urgent_at.is_none() {
                continue;
            }
            let lane = if p.deferred {
                &mut self.deferred
            } else {
                &mut self.waiting
            };
            lane.remove(&target.namespace, &target);
            taken.push(target);
        }
        taken
    }

    /// Drops stale entries once they are most of the heap.
    pub(super) fn shrink_urgent(&mut self) {
        let pending = &self.pending;
        let live = |e: &Reverse<(Instant, u64, Arc<Target>)>| {
            let Reverse((_, epoch, target)) = e;
            pending
                .get(target)
                .is_some_and(|p| p.epoch == *epoch && p.urgent_at.is_some())
        };
        if self.urgent.heap.len() > 1024 {
            self.urgent.heap.retain(live);
            self.urgent.heap.shrink_to_fit();
        }
    }
}
