//! The byte budget of the key store ([`crate::engine::EngineConfig::key_bytes`]).
//!
//! Counts bound the tables (`maxActiveSeries`, the candidates), but not what each entry costs: a key
//! with every field at its API limit takes about 4.6 KB, so 60,000 candidates a tenant creates with
//! such events would hold some 280 MB of keys, more than the Deployment's memory limit. Beyond the
//! budget, entries are given up by the namespace holding the most bytes of keys, its candidates and
//! series together: first its candidates (the least recently seen first; their occurrences count
//! as lone), then its series (the least recently active first, written Finished with their count
//! and counted in `Stats::evicted_by_bytes`). Counting bytes rather than entries is what makes a
//! flood pay for itself: a tenant whose every Event counts two at once holds only series, each at
//! every field limit, and by count it would hold no candidate, so the candidate given up would be
//! some other namespace's new loop. A namespace holding no more than its share of the budget
//! (the budget over the namespaces holding keys) is never the one holding the most while the
//! budget is exceeded, so it never pays for another's keys.
//!
//! [`Keys`] keeps each namespace's bytes beside the store, ordered by bytes, so finding the largest
//! and keeping the order costs O(log namespaces) per key stored or removed.

use super::Engine;
use super::candidates::give_up_candidate_of;
use crate::intent::FinishCause;
use crate::key::SeriesKey;
use crate::key::packed::PackedKey;
use crate::key::store::{KeyStore, Stored};
use chrono::{DateTime, Utc};
use std::collections::BTreeSet;

/// The key store, with the bytes each namespace holds in it.
#[derive(Default)]
pub(super) struct Keys {
    store: KeyStore,
    /// Bytes of keys each namespace holds, by its index.
    by_ns: Vec<usize>,
    /// `(bytes, namespace)` of every namespace holding keys: the one holding the most is last.
    order: BTreeSet<(usize, u32)>,
}

impl Keys {
    /// Packs and stores a key and note of namespace `ns`.
    pub fn insert<S: AsRef<str>>(&mut self, ns: u32, key: &SeriesKey<S>, note: &str) -> Stored {
        let before = self.store.usage().0;
        let stored = self.store.insert(key, note);
        self.add(ns, self.store.usage().0 - before);
        stored
    }

    /// Stores an already packed key of namespace `ns` (a copy).
    pub fn insert_packed(&mut self, ns: u32, key: PackedKey<'_>) -> Stored {
        let before = self.store.usage().0;
        let stored = self.store.insert_packed(key);
        self.add(ns, self.store.usage().0 - before);
        stored
    }

    /// Releases a key of namespace `ns`; its handle is stale from now on.
    pub fn remove(&mut self, ns: u32, k: Stored) {
        let before = self.store.usage().0;
        self.store.remove(k);
        self.sub(ns, before - self.store.usage().0);
    }

    pub fn get(&self, k: Stored) -> PackedKey<'_> {
        self.store.get(k)
    }

    /// Bytes of live keys, and bytes held by chunks.
    pub fn usage(&self) -> (usize, usize) {
        self.store.usage()
    }

    pub fn wants_compaction(&self) -> bool {
        self.store.wants_compaction()
    }

    /// Rewrites every live key into fresh chunks ([`KeyStore::compact`]): each keeps its size, so
    /// the bytes of each namespace stay as they are.
    pub fn compact<'a>(&mut self, handles: impl Iterator<Item = &'a mut Stored>) {
        self.store.compact(handles);
    }

    /// The namespace holding the most bytes of keys (on a tie, the highest index).
    pub fn largest(&self) -> Option<u32> {
        self.order.last().map(|&(_, ns)| ns)
    }

    /// Bytes of keys namespace `ns` holds.
    pub fn of(&self, ns: u32) -> usize {
        self.by_ns.get(ns as usize).copied().unwrap_or(0)
    }

    fn add(&mut self, ns: u32, bytes: usize) {
        let i = ns as usize;
        if self.by_ns.len() <= i {
            self.by_ns.resize(i + 1, 0);
        }
        self.set(ns, self.by_ns[i] + bytes);
    }

    fn sub(&mut self, ns: u32, bytes: usize) {
        self.set(ns, self.of(ns).saturating_sub(bytes));
    }

    fn set(&mut self, ns: u32, bytes: usize) {
        let Some(held) = self.by_ns.get_mut(ns as usize) else {
            return;
        };
        self.order.remove(&(*held, ns));
        *held = bytes;
        if bytes > 0 {
            self.order.insert((bytes, ns));
        }
    }
}

impl Engine {
    /// Gives up entries of the namespace holding the most bytes of keys, its candidates first, then
    /// its series, until the live keys fit the budget again.
    pub(super) fn bound_key_bytes(&mut self, now: DateTime<Utc>) {
        while self.keys.usage().0 > self.config.key_bytes {
            let Some(ns) = self.keys.largest() else {
                return;
            };
            if !self.give_up_candidate(ns) && !self.give_up_series(now, ns) {
                return;
            }
        }
    }

    /// Whether a candidate of namespace `ns` was given up.
    fn give_up_candidate(&mut self, ns: u32) -> bool {
        let Some(idx) = (0..self.slots.len()).find(|&i| self.slots[i].candidates.ns_len(ns) > 0)
        else {
            return false;
        };
        let max = self.policies.settings(idx).max_candidates();
        give_up_candidate_of(
            &mut self.slots[idx],
            &mut self.keys,
            &mut self.stats,
            max,
            ns,
        )
    }

    /// Whether a series of namespace `ns` was given up.
    fn give_up_series(&mut self, now: DateTime<Utc>, ns: u32) -> bool {
        let Some(idx) = (0..self.slots.len()).find(|&i| self.slots[i].series.ns_len(ns) > 0) else {
            return false;
        };
        let Some((id, s)) = self.slots[idx].series.pop_oldest_of(ns) else {
            return false;
        };
        self.stats.evicted_by_bytes += 1;
        self.finish(now, idx, id, s, FinishCause::Evicted);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{observation_in, t0};
    use crate::engine::{Engine, EngineConfig};
    use crate::intent::{FinishCause, WriteKind};
    use crate::settings::{PolicySet, Settings};
    use chrono::TimeDelta;

    const BUDGET: usize = 64 << 10;

    fn engine() -> Engine {
        let config = EngineConfig {
            key_bytes: BUDGET,
            ..EngineConfig::default()
        };
        Engine::new(PolicySet::uniform(Settings::default()), config)
    }

    /// A tenant's keys at their field limits, as series and as candidates, beside a quiet
    /// namespace's short loop: the keys stay within the budget, the flood gives up its own, and
    /// the quiet loop keeps its one series with every occurrence.
    #[test]
    fn keys_at_their_limits_stay_within_the_budget_and_cost_only_their_namespace() {
        let mut engine = engine();
        let mut quiet = 2;
        engine.observe(t0(), &observation_in("quiet", "web-0", quiet));
        let long: Vec<String> = (0..400).map(|i| format!("{i:0>253}")).collect();
        let note = "n".repeat(1024);
        for (i, name) in long.iter().enumerate() {
            let at = t0() + TimeDelta::seconds(i as i64 / 10);
            let mut o = observation_in("flood", name, 1 + (i % 2) as u64);
            o.note = &note;
            o.first = at;
            o.last = at;
            engine.observe(at, &o);
            if i % 50 == 0 {
                quiet += 1;
                let mut q = observation_in("quiet", "web-0", quiet);
                q.last = at;
                engine.observe(at, &q);
            }
            assert!(
                engine.keys.usage().0 <= BUDGET,
                "{} bytes of keys after {i}",
                engine.keys.usage().0
            );
        }
        let stats = engine.stats().clone();
        assert!(
            stats.candidates_evicted > 0 && stats.evicted_by_bytes > 0,
            "{stats:?}"
        );
        let intents = engine.take_intents();
        let quiet_writes: Vec<_> = intents
            .iter()
            .filter(|i| &*i.series.namespace == "quiet")
            .collect();
        assert_eq!(quiet_writes.len(), 1, "one create: {quiet_writes:?}");
        let evicted: Vec<_> = intents
            .iter()
            .filter(|i| i.kind == WriteKind::Finish(FinishCause::Evicted))
            .collect();
        assert_eq!(evicted.len() as u64, stats.evicted_by_bytes);
        assert!(evicted.iter().all(|i| &*i.series.namespace == "flood"));
        // The quiet series, finished when its loop ends, holds every occurrence.
        engine.tick(t0() + TimeDelta::hours(1));
        let finish = engine
            .take_intents()
            .into_iter()
            .find(|i| &*i.series.namespace == "quiet")
            .expect("the quiet series finishes");
        assert_eq!(finish.series.count, quiet);
    }

    /// The bytes of keys each namespace holds, as [`super::Keys`] keeps them.
    fn held(engine: &Engine) -> std::collections::BTreeMap<u32, usize> {
        let mut held = std::collections::BTreeMap::new();
        for slot in &engine.slots {
            let series = slot.series.iter().map(|(_, s)| &s.tally);
            for t in series.chain(slot.candidates.iter().map(|(_, c)| c)) {
                *held.entry(t.ns).or_default() += 4 + engine.keys.get(t.key).bytes().len();
            }
        }
        held
    }

    fn assert_accounted(engine: &Engine) {
        let held = held(engine);
        for (ns, bytes) in &held {
            assert_eq!(engine.keys.of(*ns), *bytes, "namespace {ns}");
        }
        assert_eq!(held.values().sum::<usize>(), engine.keys.usage().0);
        let largest = held
            .iter()
            .max_by_key(|&(ns, b)| (*b, *ns))
            .map(|(ns, _)| *ns);
        assert_eq!(engine.keys.largest(), largest);
    }

    /// Through candidates, series, their ends, evictions, a deleted namespace and a compaction,
    /// each namespace's bytes are those of the keys its entries hold.
    #[test]
    fn each_namespace_is_charged_the_bytes_of_its_own_keys() {
        let mut engine = engine();
        let names: Vec<String> = (0..300).map(|i| format!("pod-{i:0>200}")).collect();
        for (i, name) in names.iter().enumerate() {
            let ns = ["a", "b", "c"][i % 3];
            let at = t0() + TimeDelta::seconds(i as i64);
            let mut o = observation_in(ns, name, 1 + (i % 4 / 3) as u64);
            (o.first, o.last) = (at, at);
            engine.observe(at, &o);
            assert_accounted(&engine);
        }
        engine.namespace_removed("b");
        assert_accounted(&engine);
        engine.tick(t0() + TimeDelta::hours(1));
        engine.housekeep(t0() + TimeDelta::hours(1));
        assert_accounted(&engine);
        assert_eq!(engine.keys.usage().0, 0);
        assert_eq!(engine.keys.largest(), None);
    }

    /// Two namespaces each within their share of the budget (a third of it) keep every candidate
    /// while a third one fills the budget with series at every field limit, each counting two at
    /// once and so never a candidate. (Before, the namespaces holding the most candidates paid.)
    #[test]
    fn a_namespace_within_its_share_keeps_its_candidates_beside_a_flood() {
        let mut engine = engine();
        for ns in ["a", "b"] {
            for pod in ["web-0", "web-1", "web-2"] {
                engine.observe(t0(), &observation_in(ns, pod, 1));
            }
        }
        let long: Vec<String> = (0..200).map(|i| format!("{i:0>253}")).collect();
        let note = "n".repeat(1024);
        for (i, name) in long.iter().enumerate() {
            let mut o = observation_in("flood", name, 2);
            o.note = &note;
            engine.observe(t0(), &o);
            for ns in ["a", "b"] {
                let (idx, _) = engine.namespaces.find(ns).expect("known");
                assert!(engine.keys.of(idx) < BUDGET / 3);
                assert_eq!(engine.slots[0].candidates.ns_len(idx), 3, "{ns} after {i}");
            }
        }
        let stats = engine.stats();
        assert!(stats.evicted_by_bytes > 0, "{stats:?}");
        assert_eq!(stats.candidates_evicted, 0, "{stats:?}");
    }
}
