//! The byte budget of the key store ([`crate::engine::EngineConfig::key_bytes`]).
//!
//! Counts bound the tables (`maxActiveSeries`, the candidates), but not what each entry costs: a key
//! with every field at its API limit takes about 4.6 KB, so 60,000 candidates a tenant creates with
//! such events would hold some 280 MB of keys, more than the Deployment's memory limit. Beyond the
//! budget, entries are given up the way the count bounds give them up, from whoever holds the most:
//! first candidates (the least recently seen of the namespace holding the most candidates, in the
//! policy slot holding the most; their occurrences count as lone), then series (the least recently
//! active of the namespace holding the most series, written Finished with their count and counted
//! in `Stats::evicted_by_bytes`). A quiet namespace with a few short keys is never the one that
//! holds the most.

use super::Engine;
use crate::intent::FinishCause;
use chrono::{DateTime, Utc};

impl Engine {
    /// Gives up candidates, then series, until the live keys fit the budget again.
    pub(super) fn bound_key_bytes(&mut self, now: DateTime<Utc>) {
        while self.keys.usage().0 > self.config.key_bytes {
            if !self.give_up_candidate() && !self.give_up_series(now) {
                return;
            }
        }
    }

    /// Whether a candidate was given up.
    fn give_up_candidate(&mut self) -> bool {
        let Some(idx) = (0..self.slots.len())
            .filter(|&i| self.slots[i].candidates.len() > 0)
            .max_by_key(|&i| self.slots[i].candidates.len())
        else {
            return false;
        };
        let max = self.policies.settings(idx).max_candidates();
        super::candidates::evict_candidate(
            &mut self.slots[idx],
            &mut self.keys,
            &mut self.stats,
            max,
            None,
        );
        true
    }

    /// Whether a series was given up.
    fn give_up_series(&mut self, now: DateTime<Utc>) -> bool {
        let Some(idx) = (0..self.slots.len())
            .filter(|&i| self.slots[i].series.len() > 0)
            .max_by_key(|&i| self.slots[i].series.len())
        else {
            return false;
        };
        let Some((id, s)) = self.slots[idx].series.pop_oldest_of_largest(None) else {
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
}
