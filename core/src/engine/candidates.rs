//! Keys not (yet) in a series: a candidate holds the occurrences of a key seen once within its
//! window; a dormant key remembers, without counts, the raw objects already counted for a key whose
//! occurrences were all alone.
//!
//! Both are bounded per slot by `Settings::max_candidates`. A candidate beyond the bound is given up
//! by the namespace holding the most candidates, its least recently seen first (into the dormant
//! table, its occurrences counted as lone), so a flood of one-off keys in one namespace cannot keep
//! a quiet namespace's loop from ever reaching its second occurrence. A dormant key beyond the bound
//! goes out entirely, the least recently seen first.

use super::budget::Keys;
use super::counting::Placement;
use super::storage::{Dormant, Slot, Sources, Tally, record, time};
use super::{Engine, Landing, Stats};
use crate::key::{KeyId, Observation};
use crate::settings::SlotIdx;
use chrono::{DateTime, TimeDelta, Utc};

impl Engine {
    /// Adds placed occurrences to the key's candidate, making one if needed; returns the candidate's
    /// count (two or more: it becomes a series).
    pub(super) fn add_to_candidate(
        &mut self,
        at: &Landing,
        obs: &Observation,
        p: &Placement,
    ) -> u64 {
        let (id, t, window) = (at.id, at.t, at.window);
        let max = self.policies.settings(at.slot).max_candidates();
        let slot = &mut self.slots[at.slot];
        match slot.candidates.get(at.ns, &id) {
            Some(c)
                if t <= c.last.saturating_add(window) && t >= c.first.saturating_sub(window) =>
            {
                c.first = c.first.min(p.first);
                c.add(obs.raw, obs.count, p.count, t, at.seen);
                c.count
            }
            Some(c) => {
                // A new run of a key whose earlier occurrences were alone; the sources stay.
                self.stats.lone += c.count;
                c.count = 0;
                c.first = p.first;
                c.last = t;
                c.add(obs.raw, obs.count, p.count, t, at.seen);
                c.count
            }
            None => {
                // The sources move to the candidate; a finished series stays known beside it, for
                // an occurrence of it written late (see `lifecycle`, reopening).
                let sources = match slot.dormant.peek_mut(&id) {
                    Some(d) if d.ended.is_some() => std::mem::take(&mut d.sources),
                    Some(_) => slot
                        .dormant
                        .remove(&id)
                        .map(|d| d.sources)
                        .unwrap_or_default(),
                    None => Sources::new(),
                };
                if slot.candidates.len() >= max {
                    evict_candidate(slot, &mut self.keys, &mut self.stats, max, Some(at.ns));
                }
                let mut tally = Tally {
                    key: self.keys.insert(at.ns, &obs.key, obs.note),
                    ns: at.ns,
                    count: 0,
                    first: p.first,
                    last: t,
                    seen: at.seen,
                    sources,
                };
                tally.add(obs.raw, obs.count, p.count, t, at.seen);
                let count = tally.count;
                slot.candidates.insert(id, tally);
                count
            }
        }
    }

    /// Records a raw object's count on its key without counting anything (a stale observation), so
    /// that a series the key forms later lists it among its sources. A key not known yet whose
    /// occurrence is older than `dormant_retention` by more than the clock tolerance gets no record:
    /// housekeeping would forget it at once, as a process that saw it live has. (A restart lists
    /// the whole stored history, 10^6 events; each of its ended loops would otherwise be a dormant
    /// record until the recovery ends, tens of MiB the running process no longer holds.) The
    /// margin: a listed occurrence is timed by the emitter's clock, a watched one was recorded at
    /// its arrival, up to the tolerance later (an emitter behind, a write late); the live record
    /// of it may still be kept.
    pub(super) fn remember(&mut self, now: DateTime<Utc>, at: &Landing, obs: &Observation) {
        let (id, ns, t) = (at.id, at.ns, at.t);
        let max = self.policies.settings(at.slot).max_candidates();
        let forget = self.config.dormant_retention + self.config.clock_tolerance;
        let slot = &mut self.slots[at.slot];
        if let Some(c) = slot.candidates.peek_mut(ns, &id) {
            record(&mut c.sources, obs.raw, obs.count, t);
            return;
        }
        if slot.dormant.peek(&id).is_none() {
            if time(at.seen) + forget <= now {
                return;
            }
            if slot.dormant.len() >= max {
                slot.dormant.pop_oldest();
            }
        }
        let Some(d) = slot.dormant.get_or_insert(id, || Dormant {
            ns,
            last: at.seen,
            sources: Sources::new(),
            ended: None,
            used: 0,
        }) else {
            return;
        };
        d.last = d.last.max(at.seen);
        record(&mut d.sources, obs.raw, obs.count, t);
    }

    /// Candidates whose window has passed with no second occurrence become dormant; their
    /// occurrences were lone.
    pub(super) fn expire_candidates(&mut self, now: DateTime<Utc>) {
        for (idx, slot) in self.slots.iter_mut().enumerate() {
            let settings = self.policies.settings(idx);
            let (window, max) = (settings.series_window, settings.max_candidates());
            for (id, c) in slot
                .candidates
                .pop_expired(|c| beyond(c.seen(), window) <= now)
            {
                self.stats.lone += c.count;
                make_dormant(slot, &mut self.keys, id, c, max);
            }
        }
    }

    /// Brings a slot's candidates and dormant keys within its bound (after a policy change lowered
    /// it), the least recently seen first, each counted like any eviction.
    pub(super) fn bound_candidates(&mut self, slot_idx: SlotIdx) {
        let max = self.policies.settings(slot_idx).max_candidates();
        let slot = &mut self.slots[slot_idx];
        while slot.candidates.len() > max {
            evict_candidate(slot, &mut self.keys, &mut self.stats, max, None);
        }
        while slot.dormant.len() > max {
            slot.dormant.pop_oldest();
        }
    }
}

/// The least recently seen candidate of the namespace holding the most (on a tie, `newcomer`'s)
/// becomes dormant; its occurrences count as lone.
pub(super) fn evict_candidate(
    slot: &mut Slot,
    keys: &mut Keys,
    stats: &mut Stats,
    max: usize,
    newcomer: Option<u32>,
) {
    if let Some((old, evicted)) = slot.candidates.pop_oldest_of_largest(newcomer) {
        given_up(slot, keys, stats, max, (old, evicted));
    }
}

/// The least recently seen candidate of namespace `ns` becomes dormant; its occurrences count as
/// lone. Whether the namespace had one.
pub(super) fn give_up_candidate_of(
    slot: &mut Slot,
    keys: &mut Keys,
    stats: &mut Stats,
    max: usize,
    ns: u32,
) -> bool {
    let Some(popped) = slot.candidates.pop_oldest_of(ns) else {
        return false;
    };
    given_up(slot, keys, stats, max, popped);
    true
}

fn given_up(slot: &mut Slot, keys: &mut Keys, stats: &mut Stats, max: usize, c: (KeyId, Tally)) {
    stats.lone += c.1.count;
    stats.candidates_evicted += 1;
    make_dormant(slot, keys, c.0, c.1, max);
}

fn make_dormant(slot: &mut Slot, keys: &mut Keys, id: KeyId, c: Tally, max: usize) {
    keys.remove(c.ns, c.key);
    let d = Dormant {
        ns: c.ns,
        last: c.seen,
        sources: c.sources,
        ended: slot.dormant.peek(&id).and_then(|d| d.ended),
        used: 0,
    };
    slot.make_dormant(id, d, max);
}

/// The first instant at which a gap after `last` is longer than `window` (a gap of exactly `window`
/// still belongs to the series, "no gap longer than seriesWindow").
pub(super) fn beyond(last: DateTime<Utc>, window: TimeDelta) -> DateTime<Utc> {
    last + window + TimeDelta::microseconds(1)
}
