//! Counting occurrences: raw Event objects report cumulative counts (`count`, `series.count`); the
//! engine remembers the count it last absorbed from each raw object and adds only the difference.
//!
//! An equal or lower count adds nothing. A raw object first seen with count N adds N (less what a
//! restored series already recorded for it, see `restore`). N occurrences that provably had a gap
//! longer than `seriesWindow` between each other (spread over more than N−1 windows) count as lone
//! occurrences, not as a series: the live engine saw each of them alone.

use super::Stats;
use super::storage::Micros;
use super::tables::{Lru, Used};
use crate::key::{Observation, RawId};

#[derive(Clone, Copy, Debug)]
struct RawState {
    count: u64,
    last: Micros,
    /// The relist in which the object was last seen.
    generation: u32,
    /// Set by the [`Lru`] that holds it.
    used: u32,
}

// The tick sits where the record had padding: it costs no memory (on the 64-bit targets built).
#[cfg(target_pointer_width = "64")]
const _: () = assert!(std::mem::size_of::<RawState>() == 24);

impl Used for RawState {
    fn used(&self) -> u32 {
        self.used
    }

    fn set_used(&mut self, tick: u32) {
        self.used = tick;
    }
}

/// What one observation adds.
pub(super) struct Delta {
    pub added: u64,
    /// The count it was measured against (0 for a raw object seen for the first time).
    pub baseline: u64,
    /// The latest occurrence already counted from this raw object, when known.
    pub since: Option<Micros>,
}

/// The count last absorbed from each raw object, at most `capacity` of them (the least recently
/// updated is forgotten first; seen again, it counts as new).
pub(super) struct RawCounts {
    table: Lru<RawId, RawState>,
    capacity: usize,
    generation: u32,
}

impl RawCounts {
    pub fn new(capacity: usize) -> RawCounts {
        RawCounts {
            table: Lru::new(),
            capacity: capacity.max(1),
            generation: 0,
        }
    }

    /// How many occurrences `obs`, whose latest the engine timed at `t`, adds. For a raw object not
    /// seen before, `baseline` says what was already counted from it (the count and its latest
    /// occurrence, possibly above `obs.count`), zero outside a restart. The latest is remembered as timed, as the series
    /// objects record it: an emitter whose clock is beyond the tolerance has its occurrences moved
    /// to their arrival, and its next ones are placed after that, whether this process or a
    /// restart reading the series objects measures them.
    pub fn delta(
        &mut self,
        obs: &Observation,
        t: Micros,
        baseline: impl FnOnce() -> (u64, Option<Micros>),
        stats: &mut Stats,
    ) -> Delta {
        if let Some(r) = self.table.get(&obs.raw) {
            r.generation = self.generation;
            let delta = Delta {
                added: obs.count.saturating_sub(r.count),
                baseline: r.count,
                since: Some(r.last),
            };
            r.count = r.count.max(obs.count);
            r.last = r.last.max(t);
            return delta;
        }
        let (baseline, since) = baseline();
        if self.table.len() >= self.capacity && self.table.pop_oldest().is_some() {
            stats.raw_evicted += 1;
        }
        self.table.insert(
            obs.raw,
            RawState {
                // A baseline above the count (a series object newer than the list) stays: the
                // change that brings the raw object there was counted already.
                count: obs.count.max(baseline),
                // What was counted before (a restored source) was timed then: a raw object of an
                // emitter beyond the tolerance, listed with nothing new, keeps that later time.
                last: since.map_or(t, |s| s.max(t)),
                generation: self.generation,
                used: 0,
            },
        );
        Delta {
            added: obs.count.saturating_sub(baseline),
            baseline,
            since,
        }
    }

    /// A raw object was deleted (TTL expiry): its count no longer needs remembering.
    pub fn forget(&mut self, raw: RawId) {
        self.table.remove(&raw);
    }

    /// A full relist begins: objects not seen again before [`RawCounts::end_relist`] are gone.
    pub fn begin_relist(&mut self) {
        self.generation = self.generation.wrapping_add(1);
    }

    pub fn end_relist(&mut self) {
        let current = self.generation;
        let stale: Vec<RawId> = self
            .table
            .iter()
            .filter(|(_, r)| r.generation != current)
            .map(|(id, _)| *id)
            .collect();
        for id in stale {
            self.table.remove(&id);
        }
    }

    pub fn shrink(&mut self) {
        self.table.shrink();
    }

    pub fn memory_usage(&self) -> usize {
        self.table.memory_usage()
    }
}

/// Where the occurrences of a delta lie, and how many of them can still belong to a series.
pub(super) struct Placement {
    /// Occurrences that may join a series or a candidate.
    pub count: u64,
    /// Occurrences provably alone (counted in `Stats::lone`).
    pub lone: u64,
    /// The earliest of the `count` occurrences.
    pub first: Micros,
}

/// Places `d.added` occurrences whose latest is at `t`: a new raw object's lie between its first
/// occurrence and `t`, a known one's after the previous latest. When they are spread over more than
/// the windows that separate them, all but the last were alone.
pub(super) fn place(d: &Delta, obs_first: Micros, t: Micros, window: Micros) -> Placement {
    let (first, start, gaps) = match d.baseline {
        0 => {
            let first = obs_first.min(t);
            (first, Some(first), d.added.saturating_sub(1))
        }
        _ => (t, d.since, d.added),
    };
    // A span too long to represent (a huge count under a huge window) is no spread.
    let spread = start.is_some_and(|start| {
        i64::try_from(gaps).is_ok_and(|g| {
            g >= 1
                && window
                    .checked_mul(g)
                    .is_some_and(|span| t.saturating_sub(start) > span)
        })
    });
    if d.added >= 2 && spread {
        Placement {
            count: 1,
            lone: d.added - 1,
            first: t,
        }
    } else {
        Placement {
            count: d.added,
            lone: 0,
            first,
        }
    }
}
