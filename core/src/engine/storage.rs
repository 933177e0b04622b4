//! How the engine stores its state: compact times, the records of a candidate, a series and a
//! dormant key, and the slots that group them by policy (the tables are in `tables`, the namespaces
//! in `namespaces`). Also the housekeeping that gives memory back after a burst.

use super::Engine;
use super::tables::{Lru, Table, Used, shrink, table};
use crate::intent::{MAX_SOURCES, Source};
use crate::key::store::Stored;
use crate::key::{KeyId, RawId};
use crate::settings::Settings;
use chrono::{DateTime, Utc};
use std::collections::BTreeMap;

/// Unix microseconds: how the engine stores a time, smaller than a `DateTime<Utc>` and compared
/// without conversion on the path of every occurrence. Raw events carry at most microseconds.
pub(super) type Micros = i64;

/// A [`Micros`] standing for "not known".
pub(super) const UNKNOWN: Micros = i64::MIN;

pub(super) fn micros(t: DateTime<Utc>) -> Micros {
    t.timestamp_micros()
}

pub(super) fn time(m: Micros) -> DateTime<Utc> {
    DateTime::from_timestamp_micros(m).unwrap_or(DateTime::<Utc>::MIN_UTC)
}

/// A [`Source`] as the engine keeps it, with its time as [`Micros`].
#[derive(Clone, Copy, Debug)]
pub(super) struct Src {
    pub raw: RawId,
    pub count: u64,
    /// [`UNKNOWN`] in objects written without it.
    pub last: Micros,
}

impl Src {
    pub fn of(s: &Source) -> Src {
        Src {
            raw: s.raw,
            count: s.count,
            last: s.last.map_or(UNKNOWN, micros),
        }
    }

    pub fn public(&self) -> Source {
        Source {
            raw: self.raw,
            count: self.count,
            last: (self.last != UNKNOWN).then(|| time(self.last)),
        }
    }
}

/// Most series and dormant keys have one raw object for their whole life: it is kept inline, without
/// a heap allocation of its own.
pub(super) type Sources = smallvec::SmallVec<[Src; 1]>;

/// Notes that `raw` has reached `count`, keeping the most recently updated [`MAX_SOURCES`].
pub(super) fn record(sources: &mut Sources, raw: RawId, count: u64, t: Micros) {
    if let Some(i) = sources.iter().position(|s| s.raw == raw) {
        sources.remove(i);
    } else if sources.len() >= MAX_SOURCES {
        sources.remove(0);
    } else {
        // Past the inline one, grow one at a time rather than doubling: few keys have many.
        sources.reserve_exact(1);
    }
    sources.push(Src {
        raw,
        count,
        last: t,
    });
}

/// What a candidate or a series has counted.
#[derive(Clone, Debug)]
pub(super) struct Tally {
    /// The key and the note of the first occurrence, in [`Engine::keys`].
    pub key: Stored,
    /// Index into [`super::namespaces::Namespaces`].
    pub ns: u32,
    pub count: u64,
    /// The first and latest occurrence by the emitter's timestamps (what the object shows, and how
    /// gaps between occurrences of the key are measured: one key has one emitter, one clock).
    pub first: Micros,
    pub last: Micros,
    /// When the latest occurrence was seen on the operator's clock: its arrival for a watched one
    /// (so an emitter whose clock is minutes off is not finished or expired early), its timestamp
    /// for one replayed after a restart. Finishing and expiry are timed by it.
    pub seen: Micros,
    /// Most recently updated last; at most [`MAX_SOURCES`].
    pub sources: Sources,
}

impl Tally {
    pub fn first(&self) -> DateTime<Utc> {
        time(self.first)
    }

    pub fn last(&self) -> DateTime<Utc> {
        time(self.last)
    }

    pub fn seen(&self) -> DateTime<Utc> {
        time(self.seen)
    }

    pub fn add(&mut self, raw: RawId, raw_count: u64, delta: u64, t: Micros, seen: Micros) {
        self.count += delta;
        self.last = self.last.max(t);
        self.seen = self.seen.max(seen);
        record(&mut self.sources, raw, raw_count, t);
    }

    /// The count this tally recorded for a raw object, and its latest occurrence.
    pub fn recorded(&self, raw: RawId) -> Option<(u64, Micros)> {
        recorded(&self.sources, raw)
    }
}

/// An Ongoing series.
#[derive(Clone, Debug)]
pub(super) struct Series {
    pub tally: Tally,
    pub next_heartbeat: Micros,
    /// The count its last write carried: a refresh with nothing new to say is skipped.
    pub written_count: u64,
    /// The next early refresh ([`crate::settings::Settings::refresh_after`]); past the last: none.
    pub refresh_step: u8,
    /// [`crate::intent::Snapshot::name_variant`] of its restored object (0 for a new series).
    pub name_variant: u8,
    /// Due time of the series' one live timer; other timers for the key are stale.
    pub timer_due: Micros,
    /// Rebuilt from its object (`Some` of the count it held), until the recovery ends. While
    /// recovering, its stored `last` is older than the occurrences the raw events still hold for
    /// it, so no gap is judged against it: had the live engine seen a gap, the object would have
    /// been written Finished.
    pub restored: Option<u64>,
}

impl Series {
    pub fn next_heartbeat(&self) -> DateTime<Utc> {
        time(self.next_heartbeat)
    }

    /// When its timer must next wake it: a heartbeat, an early refresh or a quiet finish due.
    pub fn next_wake(&self, settings: &Settings) -> DateTime<Utc> {
        let due = self
            .next_heartbeat()
            .min(self.tally.seen() + settings.finish_after);
        self.next_refresh(settings)
            .map_or(due, |refresh| due.min(refresh))
    }

    /// When its next early refresh falls due, if any is left.
    pub fn next_refresh(&self, settings: &Settings) -> Option<DateTime<Utc>> {
        settings
            .refresh_after(self.refresh_step)
            .map(|after| self.tally.first() + after)
    }

    /// The first early refresh of a series started at `first` that falls due after `t` (steps at
    /// or before it are taken as done: by a write at `t`, or missed while nobody was leading).
    pub fn refresh_step_after(settings: &Settings, first: DateTime<Utc>, t: DateTime<Utc>) -> u8 {
        let mut step = 0;
        while let Some(after) = settings.refresh_after(step)
            && first + after <= t
        {
            step += 1;
        }
        step
    }
}

/// A key with no candidate and no series (its occurrences were all alone, or its series finished),
/// remembered without counts for `dormant_retention`: the raw objects already counted, so that a
/// series the key forms later lists them among its sources, and a raw object forgotten by the
/// raw-count table and seen again, or read again after a restart, is not counted again.
#[derive(Clone, Debug)]
pub(super) struct Dormant {
    pub ns: u32,
    /// When it was last seen, on the operator's clock ([`Tally::seen`]).
    pub last: Micros,
    pub sources: Sources,
    /// The series the key last finished, if its occurrences were not all alone.
    pub ended: Option<Ended>,
    /// Set by the [`Lru`] that holds it.
    pub used: u32,
}

// The tick sits where the record had padding: it costs no memory (on the 64-bit targets built).
#[cfg(target_pointer_width = "64")]
const _: () = assert!(std::mem::size_of::<Dormant>() == 88);

impl Used for Dormant {
    fn used(&self) -> u32 {
        self.used
    }

    fn set_used(&mut self, tick: u32) {
        self.used = tick;
    }
}

/// What a finished series was: enough to write it again under its name, when an occurrence its
/// emitter wrote late turns out to belong to it (see `lifecycle`, reopening).
#[derive(Clone, Copy, Debug)]
pub(super) struct Ended {
    pub first: Micros,
    /// Its latest occurrence by the emitter's clock ([`Tally::last`]).
    pub last: Micros,
    pub count: u64,
    pub name_variant: u8,
}

impl Ended {
    /// Whether an occurrence at `t` (emitter's clock) belongs to this series: no gap longer than
    /// `window` to it, and earlier than `finish_after` after its last occurrence, when the series
    /// was finished. One at or after that is the loop resuming: a new series.
    pub fn holds(&self, t: Micros, window: Micros, finish_after: Micros) -> bool {
        t >= self.first.saturating_sub(window)
            && t <= self.last.saturating_add(window)
            && t < self.last.saturating_add(finish_after)
    }
}

/// The count `sources` recorded for a raw object, and its latest occurrence.
pub(super) fn recorded(sources: &Sources, raw: RawId) -> Option<(u64, Micros)> {
    sources
        .iter()
        .find(|s| s.raw == raw)
        .map(|s| (s.count, s.last))
}

/// What a [`NsTables`] entry belongs to: the index of its namespace.
pub(super) trait InNamespace {
    fn ns(&self) -> u32;
}

impl InNamespace for Tally {
    fn ns(&self) -> u32 {
        self.ns
    }
}

impl InNamespace for Series {
    fn ns(&self) -> u32 {
        self.tally.ns
    }
}

/// Records of one slot kept in one LRU table per namespace, so that a bound gives up entries of the
/// namespace that holds the most (its least recently active first), never a quiet namespace's: a
/// policy's `maxActiveSeries` for series, `Settings::max_candidates` for candidates, and
/// `maxActiveSeriesPerNamespace` finds a namespace's oldest in O(1). A namespace with no entry has
/// no table.
pub(super) struct NsTables<V> {
    by_ns: BTreeMap<u32, Table<KeyId, V>>,
    len: usize,
}

/// The Ongoing series of one slot.
pub(super) type SeriesTables = NsTables<Series>;

impl<V> Default for NsTables<V> {
    fn default() -> Self {
        NsTables {
            by_ns: BTreeMap::new(),
            len: 0,
        }
    }
}

impl<V: InNamespace> NsTables<V> {
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn ns_len(&self, ns: u32) -> usize {
        self.by_ns.get(&ns).map_or(0, |t| t.len())
    }

    /// The entry, marked as the namespace's most recently active.
    pub fn get(&mut self, ns: u32, id: &KeyId) -> Option<&mut V> {
        self.by_ns.get_mut(&ns)?.get(id)
    }

    pub fn peek(&self, ns: u32, id: &KeyId) -> Option<&V> {
        self.by_ns.get(&ns)?.peek(id)
    }

    pub fn peek_mut(&mut self, ns: u32, id: &KeyId) -> Option<&mut V> {
        self.by_ns.get_mut(&ns)?.peek_mut(id)
    }

    pub fn insert(&mut self, id: KeyId, v: V) {
        let t = self.by_ns.entry(v.ns()).or_insert_with(table);
        let before = t.len();
        t.insert(id, v);
        self.len += t.len() - before;
    }

    pub fn remove(&mut self, ns: u32, id: &KeyId) -> Option<V> {
        let t = self.by_ns.get_mut(&ns)?;
        let v = t.remove(id)?;
        self.len -= 1;
        if t.is_empty() {
            self.by_ns.remove(&ns);
        }
        Some(v)
    }

    /// The namespace's least recently active entry.
    pub fn pop_oldest_of(&mut self, ns: u32) -> Option<(KeyId, V)> {
        let t = self.by_ns.get_mut(&ns)?;
        let popped = t.pop_oldest()?;
        self.len -= 1;
        if t.is_empty() {
            self.by_ns.remove(&ns);
        }
        Some(popped)
    }

    /// The least recently active entry of the namespace holding the most; among equals
    /// `newcomer`, the namespace adding an entry, so that a tie never costs a namespace that was
    /// there first (then the lowest index). Linear in the namespaces, and only asked when a bound
    /// is reached.
    pub fn pop_oldest_of_largest(&mut self, newcomer: Option<u32>) -> Option<(KeyId, V)> {
        let largest = self
            .by_ns
            .iter()
            .max_by_key(|(ns, t)| (t.len(), Some(**ns) == newcomer, std::cmp::Reverse(**ns)))
            .map(|(ns, _)| *ns)?;
        self.pop_oldest_of(largest)
    }

    /// Takes out, in each namespace, the oldest entries for which `expired` holds (each
    /// namespace's oldest first). Linear in the namespaces that hold entries.
    pub fn pop_expired(&mut self, mut expired: impl FnMut(&V) -> bool) -> Vec<(KeyId, V)> {
        let mut out = Vec::new();
        self.by_ns.retain(|_, t| {
            while t.peek_oldest().is_some_and(|(_, v)| expired(v)) {
                out.extend(t.pop_oldest());
            }
            !t.is_empty()
        });
        self.len -= out.len();
        out
    }

    pub fn iter(&self) -> impl Iterator<Item = (&KeyId, &V)> {
        self.by_ns.values().flat_map(|t| t.iter())
    }

    pub fn iter_mut(&mut self) -> impl Iterator<Item = (&KeyId, &mut V)> {
        self.by_ns.values_mut().flat_map(|t| t.iter_mut())
    }

    pub fn namespaces(&self) -> impl Iterator<Item = u32> + '_ {
        self.by_ns.keys().copied()
    }

    /// Every entry, each namespace's oldest first, leaving the tables empty.
    pub fn drain(&mut self) -> Vec<(KeyId, V)> {
        let mut out = Vec::with_capacity(self.len);
        for (_, mut t) in std::mem::take(&mut self.by_ns) {
            while let Some(e) = t.pop_oldest() {
                out.push(e);
            }
        }
        self.len = 0;
        out
    }

    pub fn shrink(&mut self) {
        for t in self.by_ns.values_mut() {
            shrink(t);
        }
    }

    fn memory_usage(&self) -> usize {
        self.by_ns.values().map(|t| t.memory_usage()).sum()
    }
}

/// The keys governed by one policy. The LRU order of `candidates` and `dormant` is the order of their
/// latest occurrence, which is how they expire (no timers needed).
pub(super) struct Slot {
    pub series: SeriesTables,
    pub candidates: NsTables<Tally>,
    pub dormant: Lru<KeyId, Dormant>,
}

impl Slot {
    pub fn new() -> Slot {
        Slot {
            series: SeriesTables::default(),
            candidates: NsTables::default(),
            dormant: Lru::new(),
        }
    }

    /// The count already recorded for a raw object on the key's series, candidate or dormant
    /// record, if any.
    pub fn recorded(&self, ns: u32, id: &KeyId, raw: RawId) -> Option<(u64, Micros)> {
        if let Some(s) = self.series.peek(ns, id) {
            return s.tally.recorded(raw);
        }
        if let Some(c) = self.candidates.peek(ns, id) {
            return c.recorded(raw);
        }
        self.dormant
            .peek(id)
            .and_then(|d| recorded(&d.sources, raw))
    }

    /// Makes a key dormant, keeping its sources, within the slot's bound of `max` dormant keys.
    pub fn make_dormant(&mut self, id: KeyId, d: Dormant, max: usize) {
        if self.dormant.peek(&id).is_none() && self.dormant.len() >= max {
            self.dormant.pop_oldest();
        }
        self.dormant.insert(id, d);
    }

    fn memory_usage(&self) -> usize {
        self.series.memory_usage() + self.candidates.memory_usage() + self.dormant.memory_usage()
    }
}

impl Engine {
    /// Memory upkeep, independent of the series lifecycle: forgets dormant keys older than
    /// `dormant_retention`, shrinks tables and the timer heap after a burst, and compacts the key
    /// store. The shell calls it on its own schedule; nothing here makes an intent or counts an
    /// occurrence.
    pub fn housekeep(&mut self, now: DateTime<Utc>) {
        let retention = self.config.dormant_retention;
        for slot in &mut self.slots {
            while slot
                .dormant
                .peek_oldest()
                .is_some_and(|(_, d)| time(d.last) + retention <= now)
            {
                slot.dormant.pop_oldest();
            }
            slot.series.shrink();
            slot.candidates.shrink();
            slot.dormant.shrink();
        }
        self.free_namespaces();
        self.raw.shrink();
        self.timers.shrink();
        if self.keys.wants_compaction() {
            let handles = self.slots.iter_mut().flat_map(|s| {
                let series = s.series.iter_mut().map(|(_, s)| &mut s.tally.key);
                series.chain(s.candidates.iter_mut().map(|(_, c)| &mut c.key))
            });
            self.keys.compact(handles);
        }
    }

    /// Bytes of keys and notes the engine holds, and bytes of the chunks they are stored in.
    pub fn key_bytes(&self) -> (usize, usize) {
        self.keys.usage()
    }

    /// Heap bytes held by the engine's tables, timers and key store (capacity, not content): what
    /// must come back down after a burst.
    pub fn held_bytes(&self) -> usize {
        let tables: usize = self.slots.iter().map(Slot::memory_usage).sum();
        tables + self.raw.memory_usage() + self.timers.memory_usage() + self.keys.usage().1
    }
}
