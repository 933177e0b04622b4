//! How the engine stores its state: compact times, LRU tables in one allocation each, the records of
//! a candidate, a series and a dormant key, the slots that group them by policy, and the namespaces.
//! Also the housekeeping that gives memory back after a burst.

use super::Engine;
use crate::config::SlotIdx;
use crate::intent::{MAX_SOURCES, Source};
use crate::key::store::Stored;
use crate::key::{KeyId, RawId};
use chrono::{DateTime, Utc};
use schnellru::{LruMap, UnlimitedCompact};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

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

/// An LRU map stored in one hash table, entries linked by `u32` indices: no allocation per entry, so
/// many series are a few large allocations that a restart or a burst cannot fragment.
pub(super) type Table<K, V> = LruMap<K, V, UnlimitedCompact>;

pub(super) fn table<K: std::hash::Hash + PartialEq, V>() -> Table<K, V> {
    LruMap::new(UnlimitedCompact)
}

/// Tables below this capacity are never shrunk.
pub(super) const SHRINK_FLOOR: usize = 4096;

/// A table never shrinks by itself: after a burst of candidates it would keep the burst's capacity
/// (entries included) for good. Once it is a quarter full, its entries move to a fresh table, oldest
/// first, so the LRU order is kept; amortised over the removals that emptied it.
pub(super) fn shrink<K: std::hash::Hash + PartialEq, V>(t: &mut Table<K, V>) {
    if t.guaranteed_capacity() < SHRINK_FLOOR || t.len() * 4 > t.guaranteed_capacity() {
        return;
    }
    let mut fresh = table();
    while let Some((k, v)) = t.pop_oldest() {
        fresh.insert(k, v);
    }
    *t = fresh;
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
    /// Index into [`Namespaces`].
    pub ns: u32,
    pub count: u64,
    pub first: Micros,
    pub last: Micros,
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

    pub fn add(&mut self, raw: RawId, raw_count: u64, delta: u64, t: Micros) {
        self.count += delta;
        self.last = self.last.max(t);
        record(&mut self.sources, raw, raw_count, t);
    }
}

/// An Ongoing series.
#[derive(Clone, Debug)]
pub(super) struct Series {
    pub tally: Tally,
    pub next_heartbeat: Micros,
    /// Due time of the series' one live timer; other timers for the key are stale.
    pub timer_due: Micros,
    /// Rebuilt from its object. While recovering, its stored `last` is older than the occurrences
    /// the raw events still hold for it, so no gap is judged against it: had the live engine seen a
    /// gap, the object would have been written Finished.
    pub restored: bool,
}

impl Series {
    pub fn next_heartbeat(&self) -> DateTime<Utc> {
        time(self.next_heartbeat)
    }
}

/// A key whose occurrences were all alone, remembered without counts for `dormant_retention`: the raw
/// objects already counted, so that a series the key forms later lists them among its sources and a
/// restart does not count them again.
#[derive(Clone, Debug)]
pub(super) struct Dormant {
    pub ns: u32,
    pub last: Micros,
    pub sources: Sources,
}

/// The keys governed by one policy. The LRU order of `candidates` and `dormant` is the order of their
/// latest occurrence, which is how they expire (no timers needed).
pub(super) struct Slot {
    pub series: Table<KeyId, Series>,
    pub candidates: Table<KeyId, Tally>,
    pub dormant: Table<KeyId, Dormant>,
}

impl Slot {
    pub fn new() -> Slot {
        Slot {
            series: table(),
            candidates: table(),
            dormant: table(),
        }
    }

    fn memory_usage(&self) -> usize {
        self.series.memory_usage() + self.candidates.memory_usage() + self.dormant.memory_usage()
    }
}

struct Namespace {
    name: Arc<str>,
    labels: BTreeMap<String, String>,
    slot: SlotIdx,
}

/// Every namespace seen, by index (series refer to theirs by index), with the slot its labels
/// resolve to.
#[derive(Default)]
pub(super) struct Namespaces {
    list: Vec<Namespace>,
    index: HashMap<Arc<str>, u32>,
}

impl Namespaces {
    pub fn find(&self, ns: &str) -> Option<(u32, SlotIdx)> {
        let i = *self.index.get(ns)?;
        Some((i, self.list[i as usize].slot))
    }

    pub fn add(&mut self, ns: &str, labels: BTreeMap<String, String>, slot: SlotIdx) -> u32 {
        let name: Arc<str> = Arc::from(ns);
        let i = u32::try_from(self.list.len()).unwrap_or(u32::MAX);
        self.list.push(Namespace {
            name: name.clone(),
            labels,
            slot,
        });
        self.index.insert(name, i);
        i
    }

    /// Records new labels and slot; true when the slot changed.
    pub fn relabel(&mut self, i: u32, labels: BTreeMap<String, String>, slot: SlotIdx) -> bool {
        let n = &mut self.list[i as usize];
        let moved = n.slot != slot;
        n.labels = labels;
        n.slot = slot;
        moved
    }

    /// Resolves every namespace's slot again.
    pub fn resolve_all(&mut self, resolve: impl Fn(&BTreeMap<String, String>) -> SlotIdx) {
        for n in &mut self.list {
            n.slot = resolve(&n.labels);
        }
    }

    pub fn slot_of(&self, ns: u32) -> SlotIdx {
        self.list.get(ns as usize).map_or(0, |n| n.slot)
    }

    pub fn name(&self, ns: u32) -> Arc<str> {
        self.list
            .get(ns as usize)
            .map_or_else(|| Arc::from(""), |n| n.name.clone())
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
            shrink(&mut slot.series);
            shrink(&mut slot.candidates);
            shrink(&mut slot.dormant);
        }
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
