//! The series' wake-ups: one live timer per series, in a min-heap by due time. A series re-armed
//! leaves its older timer in the heap; that one is stale and skipped when it comes due, which is
//! cheaper than removing it from the middle of the heap.

use super::storage::{Micros, micros};
use super::tables::SHRINK_FLOOR;
use crate::key::KeyId;
use chrono::{DateTime, Utc};
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// One pending wake-up of a series, in namespace `ns`. The slot that holds the series is looked up
/// when it fires.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct Timer {
    pub due: Micros,
    pub id: KeyId,
    pub ns: u32,
}

#[derive(Default)]
pub(super) struct Timers {
    heap: BinaryHeap<Reverse<Timer>>,
}

impl Timers {
    /// Schedules a wake-up; returns the due time for the series to keep as its live timer.
    pub fn arm(&mut self, due: DateTime<Utc>, id: KeyId, ns: u32) -> Micros {
        let due = micros(due);
        self.heap.push(Reverse(Timer { due, id, ns }));
        due
    }

    /// The earliest timer due at `now`, removed from the heap.
    pub fn pop_due(&mut self, now: DateTime<Utc>) -> Option<Timer> {
        let Reverse(top) = *self.heap.peek()?;
        if top.due > micros(now) {
            return None;
        }
        self.heap.pop();
        Some(top)
    }

    /// Drops every timer (the series are re-armed by their owner).
    pub fn clear(&mut self) {
        self.heap.clear();
    }

    /// Gives back the capacity of a burst once the heap is a quarter full.
    pub fn shrink(&mut self) {
        if self.heap.capacity() >= SHRINK_FLOOR && self.heap.len() * 4 < self.heap.capacity() {
            self.heap.shrink_to(self.heap.len() * 2);
        }
    }

    pub fn memory_usage(&self) -> usize {
        self.heap.capacity() * std::mem::size_of::<Reverse<Timer>>()
    }
}
