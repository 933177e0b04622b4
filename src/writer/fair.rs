//! Fair scheduling of due writes across namespaces, with no I/O and the clock injected.
//!
//! Each namespace has a min-heap of its waiting writes' due times. The namespaces with a write due
//! now are served in turn (round-robin, one write each), each its earliest first, so one
//! namespace's backlog (a tenant's flood) cannot delay another's writes. The other namespaces wait
//! in a min-heap of their earliest due times, which finds the next due write in O(log n) whatever
//! the backlog.
//!
//! Both kinds of heap are [`Lazy`]: an entry is never updated in place; rescheduling pushes a new
//! entry with a new epoch, and an entry whose epoch is no longer its item's is skipped when it
//! surfaces. That one check is [`Lazy::is_current`].
//!
//! ```text
//!   schedule ──▶ waiting (heap of its namespace) ──due──▶ ready (round-robin) ──take_due──▶ taken
//!                     ▲ namespace's earliest in `tops`        │ nothing more due now
//!                     └───────────────────────────────────────┘
//! ```
//!
//! A namespace with nothing waiting leaves the tables.

use std::cmp::Reverse;
use std::collections::hash_map::Entry;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::hash::Hash;
use std::time::Instant;

/// A min-heap by due time in which each item has at most one current entry; stale entries are
/// dropped lazily when they reach the top.
struct Lazy<T> {
    heap: BinaryHeap<Reverse<(Instant, u64, T)>>,
    /// Each waiting item's current epoch.
    live: HashMap<T, u64>,
    epochs: u64,
}

impl<T: Clone + Eq + Hash + Ord> Lazy<T> {
    fn new() -> Lazy<T> {
        Lazy {
            heap: BinaryHeap::new(),
            live: HashMap::new(),
            epochs: 0,
        }
    }

    /// Whether a heap entry is the current one of its item: the one "still current" check.
    fn is_current(live: &HashMap<T, u64>, item: &T, epoch: u64) -> bool {
        live.get(item) == Some(&epoch)
    }

    /// Puts `item` in at `at`, replacing its earlier entry if it had one.
    fn push(&mut self, item: T, at: Instant) {
        self.epochs += 1;
        self.live.insert(item.clone(), self.epochs);
        self.heap.push(Reverse((at, self.epochs, item)));
    }

    /// Takes `item` out wherever it is.
    fn remove(&mut self, item: &T) {
        self.live.remove(item);
    }

    /// The earliest current entry, stale ones dropped on the way.
    fn peek(&mut self) -> Option<(Instant, &T)> {
        while let Some(Reverse((_, epoch, item))) = self.heap.peek() {
            if Self::is_current(&self.live, item, *epoch) {
                break;
            }
            self.heap.pop();
        }
        self.heap.peek().map(|Reverse((at, _, item))| (*at, item))
    }

    fn pop(&mut self) -> Option<(Instant, T)> {
        self.peek()?;
        let Reverse((at, _, item)) = self.heap.pop()?;
        self.live.remove(&item);
        Some((at, item))
    }

    fn is_empty(&self) -> bool {
        self.live.is_empty()
    }

    fn shrink(&mut self) {
        if self.heap.len() > 2 * self.live.len() {
            let live = &self.live;
            self.heap
                .retain(|Reverse((_, epoch, item))| Self::is_current(live, item, *epoch));
        }
        self.heap.shrink_to(self.live.len() * 2);
        self.live.shrink_to(self.live.len() * 2);
    }
}

/// One namespace's waiting writes.
struct Namespace<K> {
    due: Lazy<K>,
    /// In the round-robin of namespaces with a write due (else its earliest is in `tops`).
    ready: bool,
}

/// Waiting items of type `K` (a series object), each in one namespace, handed out when due with the
/// namespaces served in turn.
pub struct Fair<K> {
    namespaces: HashMap<String, Namespace<K>>,
    /// Namespaces with a write due, in the order they are served.
    ready: VecDeque<String>,
    /// Each other namespace's earliest due time.
    tops: Lazy<String>,
}

impl<K: Clone + Eq + Hash + Ord> Default for Fair<K> {
    fn default() -> Self {
        Fair {
            namespaces: HashMap::new(),
            ready: VecDeque::new(),
            tops: Lazy::new(),
        }
    }
}

impl<K: Clone + Eq + Hash + Ord> Fair<K> {
    /// `item` of namespace `ns` waits until `at` (replacing any earlier schedule of it).
    pub fn schedule(&mut self, ns: &str, item: K, at: Instant) {
        let n = match self.namespaces.entry(ns.to_owned()) {
            Entry::Occupied(e) => e.into_mut(),
            Entry::Vacant(e) => e.insert(Namespace {
                due: Lazy::new(),
                ready: false,
            }),
        };
        n.due.push(item, at);
        if !n.ready {
            self.settle(ns.to_owned());
        }
    }

    /// `item` no longer waits.
    pub fn remove(&mut self, ns: &str, item: &K) {
        if let Some(n) = self.namespaces.get_mut(ns) {
            n.due.remove(item);
            if !n.ready {
                self.settle(ns.to_owned());
            }
        }
    }

    /// A namespace outside the round-robin: its earliest in `tops`, or it leaves when nothing waits.
    fn settle(&mut self, ns: String) {
        let Some(n) = self.namespaces.get_mut(&ns) else {
            return;
        };
        n.ready = false;
        match n.due.peek() {
            Some((at, _)) => self.tops.push(ns, at),
            None => {
                self.tops.remove(&ns);
                self.namespaces.remove(&ns);
            }
        }
    }

    /// Namespaces whose earliest write is due at `now` join the round-robin.
    fn promote(&mut self, now: Instant) {
        while let Some((at, _)) = self.tops.peek() {
            if at > now {
                return;
            }
            let Some((_, ns)) = self.tops.pop() else {
                return;
            };
            if let Some(n) = self.namespaces.get_mut(&ns) {
                n.ready = true;
                self.ready.push_back(ns);
            }
        }
    }

    /// When the next waiting item is due (`None`: nothing waits).
    pub fn next_due(&mut self) -> Option<Instant> {
        while let Some(ns) = self.ready.front() {
            if let Some((at, _)) = self.namespaces.get_mut(ns).and_then(|n| n.due.peek()) {
                return Some(at);
            }
            if let Some(ns) = self.ready.pop_front() {
                self.settle(ns);
            }
        }
        self.tops.peek().map(|(at, _)| at)
    }

    /// Up to `limit` items due at `now`, no longer waiting: one per namespace in turn, each
    /// namespace's earliest first.
    pub fn take_due(&mut self, now: Instant, limit: usize) -> Vec<K> {
        self.promote(now);
        let mut taken = Vec::new();
        while taken.len() < limit {
            let Some(ns) = self.ready.pop_front() else {
                break;
            };
            let Some(n) = self.namespaces.get_mut(&ns) else {
                continue;
            };
            if n.due.peek().is_some_and(|(at, _)| at <= now)
                && let Some((_, item)) = n.due.pop()
            {
                taken.push(item);
            }
            if n.due.peek().is_some_and(|(at, _)| at <= now) {
                self.ready.push_back(ns);
            } else {
                self.settle(ns);
            }
        }
        taken
    }

    /// Whether nothing waits and no table holds anything.
    pub fn is_empty(&self) -> bool {
        self.namespaces.is_empty() && self.ready.is_empty() && self.tops.is_empty()
    }

    /// Gives back the memory of a burst.
    pub fn shrink(&mut self) {
        for n in self.namespaces.values_mut() {
            n.due.shrink();
        }
        self.namespaces.shrink_to(self.namespaces.len() * 2);
        self.ready.shrink_to(self.namespaces.len() * 2);
        self.tops.shrink();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn ms(t0: Instant, n: u64) -> Instant {
        t0 + Duration::from_millis(n)
    }

    #[test]
    fn a_lazy_heap_keeps_one_current_entry_per_item() {
        let t0 = Instant::now();
        let mut h = Lazy::new();
        h.push("a", ms(t0, 5));
        h.push("b", ms(t0, 3));
        h.push("a", ms(t0, 1)); // rescheduled earlier: the entry at 5 is stale
        h.push("b", ms(t0, 9)); // rescheduled later: the entry at 3 is stale
        assert_eq!(h.pop(), Some((ms(t0, 1), "a")));
        assert_eq!(h.pop(), Some((ms(t0, 9), "b")));
        assert_eq!(h.pop(), None, "stale entries never surface");
        h.push("c", t0);
        h.remove(&"c");
        assert!(h.is_empty());
        assert_eq!(h.peek(), None);
    }

    #[test]
    fn a_namespace_with_a_backlog_takes_turns_with_the_others() {
        let t0 = Instant::now();
        let mut f = Fair::default();
        for i in 0..100 {
            f.schedule("flood", i, t0);
        }
        f.schedule("quiet", 1000, ms(t0, 1));
        let now = ms(t0, 1);
        let first = f.take_due(now, 3);
        assert!(first.contains(&1000), "served in turn: {first:?}");
        assert_eq!(first.len(), 3);
    }

    #[test]
    fn within_a_namespace_the_earliest_comes_first_and_future_items_wait() {
        let t0 = Instant::now();
        let mut f = Fair::default();
        f.schedule("a", 1, ms(t0, 30));
        f.schedule("a", 2, ms(t0, 10));
        f.schedule("a", 3, ms(t0, 20));
        assert_eq!(f.next_due(), Some(ms(t0, 10)));
        assert_eq!(f.take_due(ms(t0, 20), 10), [2, 3]);
        assert_eq!(f.next_due(), Some(ms(t0, 30)));
        assert_eq!(f.take_due(ms(t0, 29), 10), Vec::<i32>::new());
        assert_eq!(f.take_due(ms(t0, 30), 10), [1]);
        assert!(f.is_empty(), "a namespace with nothing waiting leaves");
    }

    #[test]
    fn a_rescheduled_or_removed_item_is_handed_out_once_at_its_new_time() {
        let t0 = Instant::now();
        let mut f = Fair::default();
        f.schedule("a", 1, t0);
        f.schedule("a", 2, t0);
        f.schedule("a", 1, ms(t0, 50));
        f.remove("a", &2);
        assert_eq!(f.take_due(ms(t0, 10), 10), Vec::<i32>::new());
        assert_eq!(f.next_due(), Some(ms(t0, 50)));
        assert_eq!(f.take_due(ms(t0, 50), 10), [1]);
        assert_eq!(f.next_due(), None);
        assert!(f.is_empty());
    }

    #[test]
    fn a_ready_namespace_whose_items_were_removed_leaves_the_round_robin() {
        let t0 = Instant::now();
        let mut f = Fair::default();
        f.schedule("a", 1, t0);
        f.schedule("a", 2, t0);
        f.schedule("b", 3, t0);
        assert_eq!(f.take_due(t0, 1), [1]);
        f.remove("a", &2);
        assert_eq!(f.take_due(t0, 10), [3]);
        assert_eq!(f.next_due(), None);
        assert!(f.is_empty());
    }
}
