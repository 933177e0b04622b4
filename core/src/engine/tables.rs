//! The engine's LRU tables: one hash table per map (no allocation per entry), shrunk after a
//! burst, and sharded where a map holds many entries so that its growth never holds two copies of
//! the whole map at once.

use crate::key::{KeyId, RawId};
use schnellru::{LruMap, UnlimitedCompact};

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
    shrink_from(t, SHRINK_FLOOR);
}

fn shrink_from<K: std::hash::Hash + PartialEq, V>(t: &mut Table<K, V>, floor: usize) {
    if t.guaranteed_capacity() < floor || t.len() * 4 > t.guaranteed_capacity() {
        return;
    }
    let mut fresh = table();
    while let Some((k, v)) = t.pop_oldest() {
        fresh.insert(k, v);
    }
    *t = fresh;
}

/// Shards of an [`Lru`]. A hash table grows by doubling, and while it moves its entries the old
/// table and the new one are both alive: for a table of 200,000 entries that is tens of MiB for a
/// moment, on top of whatever else is held then (a restart's buffer of listed events). Split in 16
/// by the key's own hash bits, one growth holds a sixteenth of that.
const SHARDS: usize = 16;

/// What picks an [`Lru`] shard: bits of a key that is already a hash, independent of the table's
/// own hasher.
pub(super) trait Shard {
    fn shard(&self) -> usize;
}

impl Shard for KeyId {
    fn shard(&self) -> usize {
        (self.get() as usize) % SHARDS
    }
}

impl Shard for RawId {
    fn shard(&self) -> usize {
        (self.0 as usize) % SHARDS
    }
}

/// A value of an [`Lru`]: it keeps the tick of its last use, which orders the shards' oldest
/// entries against each other. A `u32` field fits in padding the records already have, so the
/// order costs no memory.
pub(super) trait Used {
    fn used(&self) -> u32;
    fn set_used(&mut self, tick: u32);
}

/// An LRU map of many entries (dormant keys, raw-object counts), kept as [`SHARDS`] [`Table`]s
/// with one recency order across them: the oldest entry is the oldest of the shards' oldest, by
/// the tick each entry was last used at (O(`SHARDS`): asked at a bound, on expiry and when a
/// policy change moves entries).
pub(super) struct Lru<K, V> {
    shards: Vec<Table<K, V>>,
    tick: u32,
}

impl<K: Shard + std::hash::Hash + PartialEq + Copy, V: Used> Lru<K, V> {
    pub fn new() -> Lru<K, V> {
        Lru {
            shards: (0..SHARDS).map(|_| table()).collect(),
            tick: 0,
        }
    }

    /// The next tick (one per lookup that marks an entry used, found or not). When the ticks run
    /// out (after 2^32, then every 2^31), every entry's tick is moved down by 2^31 in place,
    /// keeping the order; entries unused for more than 2^31 ticks then tie as the oldest.
    fn tick(&mut self) -> u32 {
        if self.tick == u32::MAX {
            const HALF: u32 = 1 << 31;
            for t in &mut self.shards {
                for (_, v) in t.iter_mut() {
                    v.set_used(v.used().saturating_sub(HALF));
                }
            }
            self.tick = HALF;
        }
        self.tick += 1;
        self.tick
    }

    /// Summed over the shards rather than kept: a shard that cannot grow (out of memory) gives up
    /// entries of its own on an insert, which a kept count would miss.
    pub fn len(&self) -> usize {
        self.shards.iter().map(|t| t.len()).sum()
    }

    /// The entry, marked as the most recently used.
    pub fn get(&mut self, k: &K) -> Option<&mut V> {
        let tick = self.tick();
        let v = self.shards[k.shard()].get(k)?;
        v.set_used(tick);
        Some(v)
    }

    pub fn peek(&self, k: &K) -> Option<&V> {
        self.shards[k.shard()].peek(k)
    }

    pub fn peek_mut(&mut self, k: &K) -> Option<&mut V> {
        self.shards[k.shard()].peek_mut(k)
    }

    /// Inserts or replaces the entry, as the most recently used.
    pub fn insert(&mut self, k: K, mut v: V) {
        v.set_used(self.tick());
        self.shards[k.shard()].insert(k, v);
    }

    /// The entry, inserted from `f` when missing, marked as the most recently used. `None` only
    /// when the table cannot grow (out of memory).
    pub fn get_or_insert(&mut self, k: K, f: impl FnOnce() -> V) -> Option<&mut V> {
        let tick = self.tick();
        let v = self.shards[k.shard()].get_or_insert(k, f)?;
        v.set_used(tick);
        Some(v)
    }

    pub fn remove(&mut self, k: &K) -> Option<V> {
        self.shards[k.shard()].remove(k)
    }

    fn oldest_shard(&self) -> Option<usize> {
        self.shards
            .iter()
            .enumerate()
            .filter_map(|(i, t)| t.peek_oldest().map(|(_, v)| (v.used(), i)))
            .min()
            .map(|(_, i)| i)
    }

    pub fn peek_oldest(&self) -> Option<(&K, &V)> {
        self.shards[self.oldest_shard()?].peek_oldest()
    }

    pub fn pop_oldest(&mut self) -> Option<(K, V)> {
        let i = self.oldest_shard()?;
        self.shards[i].pop_oldest()
    }

    /// Every entry, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (&K, &V)> {
        self.shards.iter().flat_map(|t| t.iter())
    }

    /// Shrinks each shard that is at most a quarter full (see [`shrink`]).
    pub fn shrink(&mut self) {
        for t in &mut self.shards {
            shrink_from(t, SHRINK_FLOOR / SHARDS);
        }
    }

    pub fn memory_usage(&self) -> usize {
        self.shards.iter().map(|t| t.memory_usage()).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A value that carries its tick, as the engine's records do.
    #[derive(Debug, PartialEq)]
    struct V(u64, u32);

    impl Used for V {
        fn used(&self) -> u32 {
            self.1
        }

        fn set_used(&mut self, tick: u32) {
            self.1 = tick;
        }
    }

    fn filled(n: u64) -> Lru<RawId, V> {
        // Consecutive ids fall in consecutive shards: the order must hold across shards.
        let mut t = Lru::new();
        for i in 0..n {
            t.insert(RawId(i), V(i, 0));
        }
        t
    }

    fn drained(t: &mut Lru<RawId, V>) -> Vec<u64> {
        std::iter::from_fn(|| t.pop_oldest().map(|(_, v)| v.0)).collect()
    }

    #[test]
    fn the_oldest_is_the_least_recently_used_across_shards() {
        let mut t = filled(100);
        assert_eq!(t.len(), 100);
        // Used again: 0 and 17 become the newest; peeking or changing in place does not.
        assert_eq!(t.get(&RawId(0)).map(|v| v.0), Some(0));
        assert_eq!(
            t.get_or_insert(RawId(17), || V(999, 0)).map(|v| v.0),
            Some(17)
        );
        assert_eq!(t.peek(&RawId(1)).map(|v| v.0), Some(1));
        if let Some(v) = t.peek_mut(&RawId(2)) {
            v.0 = 2;
        }
        let mut expected: Vec<u64> = (1..100).filter(|v| *v != 17).collect();
        expected.extend([0, 17]);
        assert_eq!(drained(&mut t), expected);
        assert_eq!(t.len(), 0);
    }

    #[test]
    fn the_order_survives_the_ticks_running_out() {
        let mut t = Lru::new();
        t.tick = u32::MAX - 50;
        for i in 0..40 {
            t.insert(RawId(i), V(i, 0));
        }
        for i in (0..40).step_by(2) {
            t.get(&RawId(i));
        }
        assert!(t.tick < u32::MAX - 50, "the ticks were moved down");
        let mut expected: Vec<u64> = (1..40).step_by(2).collect();
        expected.extend((0..40).step_by(2));
        assert_eq!(drained(&mut t), expected);
    }

    #[test]
    fn len_counts_what_is_held() {
        let mut t = Lru::new();
        t.insert(RawId(1), V(1, 0));
        t.insert(RawId(1), V(2, 0));
        assert_eq!(t.get_or_insert(RawId(1), || V(3, 0)).map(|v| v.0), Some(2));
        assert_eq!(t.get_or_insert(RawId(2), || V(4, 0)).map(|v| v.0), Some(4));
        assert_eq!(t.len(), 2);
        assert_eq!(t.peek_oldest().map(|(k, _)| *k), Some(RawId(1)));
        assert_eq!(t.remove(&RawId(1)).map(|v| v.0), Some(2));
        assert!(t.remove(&RawId(1)).is_none());
        assert_eq!(t.len(), 1);
        assert_eq!(t.iter().count(), 1);
    }

    #[test]
    fn a_shrunk_table_keeps_its_entries_and_their_order() {
        let mut t = filled(100_000);
        let full = t.memory_usage();
        while t.len() > 1_000 {
            t.pop_oldest();
        }
        t.shrink();
        assert!(
            t.memory_usage() * 4 < full,
            "{} of {full}",
            t.memory_usage()
        );
        assert_eq!(drained(&mut t), (99_000..100_000).collect::<Vec<_>>());
    }

    #[test]
    fn one_growth_holds_a_shard_not_the_table() {
        // The whole table in one allocation would double at once; here the largest single
        // allocation is one shard's.
        let t = filled(200_000);
        let largest = t.shards.iter().map(|s| s.memory_usage()).max().unwrap_or(0);
        assert!(
            largest * 8 < t.memory_usage(),
            "{largest} of {}",
            t.memory_usage()
        );
    }
}
