//! The series engine: a pure state machine. Occurrences and clock ticks in, write intents out.
//!
//! No I/O and no clock of its own: every input carries `now`. That is what lets a test run a 24-hour
//! crash loop in milliseconds, and what makes a restart reproducible from what the API server holds.
//!
//! # States of a key
//!
//! ```text
//!            1st occurrence              2nd within seriesWindow
//!  (absent) ───────────────▶ Candidate ──────────────────────────▶ Series (Ongoing) ◀─┐ occurrences:
//!     ▲                       │      ▲                                │ │  │          └ no write
//!     │     seriesWindow      │      │ next occurrence                │ │  └ heartbeatInterval:
//!     │     passes (lone)     ▼      │                                │ │    Heartbeat
//!     └──── retention ───── Dormant ─┘                                │ └ a gap > seriesWindow: Finish,
//!           passes                                                    │   the occurrence is a Candidate
//!     ▲                                                               │ finishAfter quiet, or evicted
//!     └───────────────────────────────────────────────────────────────┘ by maxActiveSeries: Finish
//! ```
//!
//! Intents: `Create` when a series starts, `Heartbeat` every `heartbeatInterval` (the first one spread by
//! a per-key offset of up to a quarter interval, so series created together do not heartbeat together),
//! `Finish` once at the end (state Finished). Occurrences between writes cost no intent at all. A
//! Dormant key holds no count, only which raw objects were already counted (see `restore`), and
//! what its last series was: an occurrence its emitter wrote late that belongs to that series by
//! its own timestamp reopens it (Dormant → Series under the same name, written again when it
//! finishes; see `lifecycle`, `reopen`), instead of standing alone.
//!
//! # Where each part lives
//!
//! | concern | module |
//! |---|---|
//! | deltas per raw object, lone occurrences | `counting` |
//! | candidates and dormant keys | `candidates` |
//! | Ongoing, heartbeat, Finished; [`Engine::tick`] | `lifecycle` |
//! | rebuild from stored series objects | `restore` |
//! | wake-ups | `timers` |
//! | records, slots; [`Engine::housekeep`] | `storage` |
//! | LRU tables, sharded where large | `tables` |
//! | namespaces, their labels and slots; [`Engine::namespace_removed`] | `namespaces` |
//!
//! # Bounds
//!
//! Per governing policy: at most `maxActiveSeries` series, and at most `maxActiveSeriesPerNamespace`
//! in one namespace. A new series beyond a bound finishes another early (written Finished with its
//! count, nothing is lost): the least recently active one of its own namespace for the namespace
//! bound, of the namespace holding the most series for the policy bound, so a flood in one
//! namespace never gives up a quiet namespace's series. `Settings::max_candidates` candidates (beyond
//! it the namespace holding the most gives up its least recently seen, whose occurrences count in
//! `Stats::lone`) and as many dormant keys (the least recently seen is dropped). The raw-count
//! table holds at most [`EngineConfig::raw_capacity`] objects (least recently updated evicted); an
//! evicted object seen again is measured against the count its key's series, candidate or dormant
//! record noted for it, so it is not counted again. Every eviction is
//! counted in [`Stats`]. The keys themselves are held within [`EngineConfig::key_bytes`] (see
//! `budget`): beyond it the namespace holding the most bytes of keys gives up its candidates,
//! then its series.
//!
//! # Clocks
//!
//! An occurrence is timed by its own timestamp when that lies within
//! [`EngineConfig::clock_tolerance`] of the operator's clock, and by its arrival otherwise. Gaps
//! between occurrences of one key compare the emitter's timestamps (one key, one emitter, one
//! clock); finishing, candidate expiry and staleness compare when occurrences were *seen* on the
//! operator's clock, so an emitter minutes behind or ahead still gets its series. A listed
//! occurrence was seen when the API server wrote it (`Observation::written`), as the watch saw it.

mod budget;
mod candidates;
mod clocks;
mod config;
mod counting;
mod lifecycle;
mod loops;
mod namespaces;
mod pacing;
mod restore;
mod storage;
mod tables;
mod timers;

use crate::intent::{Intent, SeriesState, Snapshot, WriteKind};
use crate::key::{KeyId, Observation, RawId};
use crate::settings::{PolicySet, Settings, SlotIdx};
use chrono::{DateTime, TimeDelta, Utc};
pub use config::{EngineConfig, Stats};
use counting::RawCounts;
pub use loops::LoopView;
use namespaces::Namespaces;
use restore::Recovery;
use std::collections::BTreeMap;
use storage::{Micros, Slot, micros};
use timers::Timers;

/// Where one observation lands: its key, the slot and namespace that govern it, when its latest
/// occurrence happened, and the governing `seriesWindow`, all as the engine stores them.
#[derive(Clone, Copy, Debug)]
struct Landing {
    id: KeyId,
    slot: SlotIdx,
    ns: u32,
    /// When it happened, by the emitter's timestamp (see the module docs, Clocks).
    t: Micros,
    /// When it was seen on the operator's clock.
    seen: Micros,
    window: Micros,
}

pub struct Engine {
    config: EngineConfig,
    policies: PolicySet,
    namespaces: Namespaces,
    /// One per slot of `policies`.
    slots: Vec<Slot>,
    raw: RawCounts,
    keys: budget::Keys,
    timers: Timers,
    /// When heartbeats fall due, at most `heartbeat_rate` a second.
    pacer: pacing::Pacer,
    watermark: u64,
    pending_watermark: u64,
    /// The lifecycle clock: the time of the last tick. An occurrence is stale when it is older than
    /// one window before this clock, not before its arrival: occurrences held up in a silent
    /// connection arrive late, while the shell holds the clock back (`tick` is only called with
    /// times up to which the input is known complete).
    clock: Option<Micros>,
    /// `Some` between `begin_recovery` and `end_recovery`.
    recovery: Option<Recovery>,
    /// Between `begin_relist` and `end_relist`: a list's items are timed as a restart's are.
    relisting: bool,
    intents: Vec<Intent>,
    stats: Stats,
    /// The last tick held a finish back because the input was not known complete up to its due
    /// time (see [`Engine::finishes_held`]).
    finishes_held: bool,
}

impl Engine {
    pub fn new(policies: PolicySet, config: EngineConfig) -> Engine {
        Engine {
            config,
            slots: (0..policies.slots()).map(|_| Slot::new()).collect(),
            policies,
            namespaces: Namespaces::default(),
            raw: RawCounts::new(config.raw_capacity),
            keys: budget::Keys::default(),
            timers: Timers::default(),
            pacer: pacing::Pacer::new(config.heartbeat_rate, config.heartbeat_ceiling),
            watermark: 0,
            pending_watermark: 0,
            clock: None,
            recovery: None,
            relisting: false,
            intents: Vec::new(),
            stats: Stats::default(),
            finishes_held: false,
        }
    }

    /// An engine with one set of settings for every namespace.
    pub fn with_settings(settings: Settings) -> Engine {
        Engine::new(PolicySet::uniform(settings), EngineConfig::default())
    }

    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    pub fn clock_tolerance(&self) -> TimeDelta {
        self.config.clock_tolerance
    }

    pub fn active_series(&self) -> usize {
        self.slots.iter().map(|s| s.series.len()).sum()
    }

    /// How many Ongoing series have lasted (since their first occurrence) longer than each of
    /// `bounds` at `now`: the loops an alert on "Ongoing for too long" looks for. O(active series).
    pub fn ongoing_longer_than<const N: usize>(
        &self,
        now: DateTime<Utc>,
        bounds: [TimeDelta; N],
    ) -> [u64; N] {
        let mut counts = [0; N];
        for (_, s) in self.slots.iter().flat_map(|s| s.series.iter()) {
            let lasted = now - s.tally.first();
            for (count, bound) in counts.iter_mut().zip(bounds) {
                *count += u64::from(lasted > bound);
            }
        }
        counts
    }

    /// Whether the last tick held a finish back for want of input: a series quiet for
    /// `finishAfter` by the clock, but not as far as the input is known complete. The shell then
    /// seeks a proof of its input (see the shell's completeness probe).
    pub fn finishes_held(&self) -> bool {
        self.finishes_held
    }

    /// Keys seen within their window that may still become a series.
    pub fn candidates(&self) -> usize {
        self.slots.iter().map(|s| s.candidates.len()).sum()
    }

    /// Occurrences held by candidates that may still become a series.
    pub fn pending_occurrences(&self) -> u64 {
        self.slots
            .iter()
            .flat_map(|s| s.candidates.iter())
            .map(|(_, c)| c.count)
            .sum()
    }

    /// The intents made since the last call, oldest first.
    pub fn take_intents(&mut self) -> Vec<Intent> {
        std::mem::take(&mut self.intents)
    }

    /// Snapshots of all active series (for inspection and tests; allocates).
    pub fn active(&self, now: DateTime<Utc>) -> Vec<Snapshot> {
        self.slots
            .iter()
            .flat_map(|s| s.series.iter())
            .map(|(id, s)| self.snapshot(*id, s, SeriesState::Ongoing, now))
            .collect()
    }

    /// Feeds one observation of a raw event object: which key it counts for, how many occurrences
    /// are new, then where they land (an Ongoing series, a candidate, or nowhere when filtered or
    /// stale).
    pub fn observe(&mut self, now: DateTime<Utc>, obs: &Observation) {
        self.observe_one(now, obs);
        self.bound_key_bytes(now);
    }

    fn observe_one(&mut self, now: DateTime<Utc>, obs: &Observation) {
        if let Some(rv) = obs.resource_version {
            self.pending_watermark = self.pending_watermark.max(rv);
        }
        let (ns, slot_idx) = self.namespace(obs.namespace);
        let settings = self.policies.settings(slot_idx).clone();
        let id = self.key_of(ns, slot_idx, settings.include_note, obs);
        // Compared as microseconds: this is the path of every occurrence.
        let (t, seen, shift) = self.timing(now, obs);
        let d = self.new_occurrences(ns, slot_idx, id, settings.include_note, obs, t);
        if d.added == 0 {
            if self.recovering() {
                self.listed_again(slot_idx, ns, id, t, seen);
            }
            return;
        }
        self.stats.occurrences += d.added;
        let k = &obs.key;
        if !settings
            .filter
            .matches(k.type_, k.reason, k.reporting_controller)
        {
            self.stats.dropped_filtered += d.added;
            return;
        }
        let window = settings.series_window.num_microseconds();
        let at = Landing {
            id,
            slot: slot_idx,
            ns,
            t,
            seen,
            window: window.unwrap_or(i64::MAX),
        };
        if self.extend_series(now, &at, obs, d.added) {
            return;
        }
        let first = micros(obs.first).saturating_add(shift);
        let placed = counting::place(&d, first, at.t, at.window);
        if self.reopen(now, &at, obs, &placed, &settings) {
            self.stats.lone += placed.lone;
            return;
        }
        if self.is_stale(now, &at) {
            self.stats.dropped_stale += d.added;
            self.remember(now, &at, obs);
            return;
        }
        self.stats.lone += placed.lone;
        if self.add_to_candidate(&at, obs, &placed) >= 2 {
            self.promote(now, slot_idx, id, at.ns, &settings);
        }
    }

    /// The key an observation counts for. Replayed after a restart, an occurrence joins the series
    /// its key had before `includeNote` was switched, as it did in the process that counted it.
    fn key_of(&self, ns: u32, slot: SlotIdx, include_note: bool, obs: &Observation) -> KeyId {
        let id = obs.key.id(include_note.then_some(obs.note));
        let series = &self.slots[slot].series;
        if self.recovery.is_none() || series.peek(ns, &id).is_some() {
            return id;
        }
        let other = obs.key.id((!include_note).then_some(obs.note));
        match series.peek(ns, &other) {
            Some(s) if s.restored.is_some() => other,
            _ => id,
        }
    }

    /// The occurrences of the raw object not counted before. A raw object this process does not
    /// remember (new, forgotten by the bounded table, or first read after a restart) is measured
    /// against what was already counted from it: under its key, under the key it had before
    /// `includeNote` was switched, or in the series objects a restart read.
    ///
    /// Without any such record, a legacy object created long after its first occurrence (by at
    /// least the event TTL, `dormant_retention`, and the clock tolerance) was recreated by a
    /// recorder that remembers what it wrote: client-go's `tools/record` writes an object the TTL
    /// deleted anew under the same name, with its remembered count and first time plus one
    /// occurrence. The rest were its predecessor's (counted then, or before this operator ran): it
    /// adds one. (Where the recreating write carried more, a recorder having dropped writes, or a
    /// restart lists it only after later ones, those are counted as one.)
    fn new_occurrences(
        &mut self,
        ns: u32,
        slot: SlotIdx,
        id: KeyId,
        include_note: bool,
        obs: &Observation,
        t: Micros,
    ) -> counting::Delta {
        let (recovery, slot) = (self.recovery.as_ref(), &self.slots[slot]);
        let inherits = self
            .config
            .dormant_retention
            .max(self.config.clock_tolerance);
        let baseline = || {
            let other = obs.key.id((!include_note).then_some(obs.note));
            let restored = recovery.map_or((0, None), |r| r.baseline(id, obs));
            let noted = [id, other]
                .iter()
                .filter_map(|k| slot.recorded(ns, k, obs.raw))
                .max()
                .map_or((0, None), |(c, last)| (c, Some(last)));
            let known = if noted.0 > restored.0 {
                noted
            } else {
                restored
            };
            match obs.created {
                Some(created) if known.0 == 0 && created - obs.first >= inherits => {
                    (obs.count.saturating_sub(1), None)
                }
                _ => known,
            }
        };
        self.raw.delta(obs, t, baseline, &mut self.stats)
    }

    /// Records that every raw event up to resourceVersion `rv` has been observed (a watch event or a
    /// bookmark in the watch phase, or the end of a list). Writes made after this carry it as their
    /// watermark. Must not be called in the middle of a list, whose items arrive out of order.
    pub fn checkpoint(&mut self, rv: u64) {
        self.pending_watermark = self.pending_watermark.max(rv);
        self.watermark = self.pending_watermark;
    }

    /// Marks the start of a full relist (after 410 Gone): raw objects not seen again before
    /// [`Engine::end_relist`] were deleted in the meantime and are forgotten.
    pub fn begin_relist(&mut self) {
        self.raw.begin_relist();
        self.relisting = true;
    }

    pub fn end_relist(&mut self) {
        self.relisting = false;
        self.raw.end_relist();
        self.checkpoint(self.pending_watermark);
    }

    /// A raw event object was deleted (TTL expiry): its count no longer needs remembering.
    pub fn forget_raw(&mut self, raw: RawId) {
        self.raw.forget(raw);
    }

    /// Replaces the policies. Applies live: every series and candidate moves to the slot its namespace
    /// now resolves to, with that slot's settings from the next tick on. Series beyond a lower
    /// `maxActiveSeries` are finished early, candidates beyond a lower bound evicted. A change of
    /// `includeNote` applies to keys seen after it.
    pub fn set_policies(&mut self, now: DateTime<Utc>, policies: PolicySet) {
        let old = std::mem::replace(&mut self.policies, policies);
        self.rebuild(now, &old);
    }

    /// Records a namespace's labels (for `namespaceSelector`) and moves its series if its policy
    /// changes.
    pub fn set_namespace_labels(
        &mut self,
        now: DateTime<Utc>,
        ns: &str,
        labels: BTreeMap<String, String>,
    ) {
        let slot = self.policies.resolve(&labels);
        let moved = match self.namespaces.find(ns) {
            Some((i, _)) => self.namespaces.relabel(i, labels, slot),
            None => {
                self.namespaces.add(ns, labels, slot);
                false
            }
        };
        if moved {
            let same = self.policies.clone();
            self.rebuild(now, &same);
        }
    }

    /// The namespace's index and governing slot; a namespace not seen before has no labels yet.
    fn namespace(&mut self, ns: &str) -> (u32, SlotIdx) {
        if let Some(found) = self.namespaces.find(ns) {
            return found;
        }
        let labels = BTreeMap::new();
        let slot = self.policies.resolve(&labels);
        (self.namespaces.add(ns, labels, slot), slot)
    }

    /// Moves every key to the slot its namespace resolves to now, within that slot's bounds.
    ///
    /// A series whose `includeNote` changes is written at once: its occurrences from now on go to
    /// another key, and one raw object may then feed both. Its object must hold what it counted
    /// under the old key, or a restart could not tell the two apart.
    fn rebuild(&mut self, now: DateTime<Utc>, old_policies: &PolicySet) {
        let policies = &self.policies;
        self.namespaces
            .resolve_all(|labels| policies.resolve(labels));
        let old: Vec<Slot> = std::mem::take(&mut self.slots);
        self.slots = (0..self.policies.slots()).map(|_| Slot::new()).collect();
        self.timers.clear();
        for (old_idx, mut slot) in old.into_iter().enumerate() {
            let old_note = old_policies.settings(old_idx).include_note;
            // Oldest first, so that re-insertion keeps the recency order.
            while let Some((id, d)) = slot.dormant.pop_oldest() {
                let idx = self.namespaces.slot_of(d.ns);
                self.slots[idx].dormant.insert(id, d);
            }
            for (id, c) in slot.candidates.drain() {
                let idx = self.namespaces.slot_of(c.ns);
                self.slots[idx].candidates.insert(id, c);
            }
            for (id, mut s) in slot.series.drain() {
                let idx = self.namespaces.slot_of(s.tally.ns);
                let settings = self.policies.settings(idx);
                // A shorter interval brings the heartbeat forward, booked like any other; never
                // later than it was (a heartbeat the calendar pushed may find it full again).
                let sooner = now + settings.heartbeat_interval;
                if s.next_heartbeat() > sooner {
                    let booked = self.pacer.book(sooner, now);
                    if booked < s.next_heartbeat() {
                        self.pacer.release(s.next_heartbeat());
                        s.next_heartbeat = micros(booked);
                    } else {
                        self.pacer.release(booked);
                    }
                }
                if settings.include_note != old_note {
                    s.written_count = s.tally.count;
                    let snap = self.snapshot(id, &s, SeriesState::Ongoing, now);
                    self.intents.push(Intent {
                        kind: WriteKind::Heartbeat,
                        series: snap,
                        due: now,
                    });
                }
                self.insert_series(now, idx, id, s);
            }
        }
        for idx in 0..self.slots.len() {
            self.bound_candidates(idx);
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::key::{KeyRef, ObjectRef};

    pub fn t0() -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000, 0).unwrap_or_default()
    }

    /// A raw event named `name` about Pod `name`, reporting `count` occurrences, the latest at `at`.
    pub fn observation(name: &str, count: u64, at: DateTime<Utc>) -> Observation<'_> {
        Observation {
            raw: RawId::of("team-a", name, ""),
            resource_version: None,
            namespace: "team-a",
            key: KeyRef {
                namespace: "team-a",
                regarding: ObjectRef {
                    api_version: "v1",
                    kind: "Pod",
                    namespace: "team-a",
                    name,
                    uid: "",
                    field_path: "",
                },
                reason: "BackOff",
                reporting_controller: "kubelet",
                type_: "Warning",
                ..KeyRef::default()
            },
            note: "Back-off restarting failed container",
            count,
            first: at,
            last: at,
            written: None,
            created: None,
            truncated: false,
        }
    }

    /// The observation of [`observation`] in namespace `ns`.
    pub fn observation_in<'a>(ns: &'a str, name: &'a str, count: u64) -> Observation<'a> {
        let mut o = observation(name, count, t0());
        o.raw = RawId::of(ns, name, "");
        o.namespace = ns;
        o.key.namespace = ns;
        o.key.regarding.namespace = ns;
        o
    }

    /// A deleted namespace takes its objects with it: its series end at once, unwritten (no
    /// heartbeat, no Finish into a namespace that is gone), counted as evicted; another
    /// namespace's series live on.
    #[test]
    fn the_series_of_a_deleted_namespace_end_without_a_write() {
        let mut engine = Engine::with_settings(Settings::default());
        engine.observe(t0(), &observation_in("gone", "web-0", 2));
        engine.observe(t0(), &observation_in("kept", "web-0", 2));
        assert_eq!(engine.take_intents().len(), 2, "two creates");
        engine.namespace_removed("gone");
        assert_eq!(engine.active_series(), 1);
        assert_eq!(engine.stats().evicted_namespace_deleted, 1);
        let mut written = Vec::new();
        for minute in 1..=120 {
            engine.tick(t0() + TimeDelta::minutes(minute));
            written.extend(engine.take_intents());
        }
        assert!(
            !written.is_empty(),
            "the other namespace's series is still written"
        );
        assert!(
            written.iter().all(|i| &*i.series.namespace == "kept"),
            "nothing for the deleted namespace: {written:?}"
        );
        assert_eq!(
            engine.stats().series_finished,
            engine.stats().series_started
        );
    }

    /// A relist (after 410 Gone) serves raw events of every age. One the engine has forgotten (its
    /// raw-count table is bounded; 10^6 stored events do not fit), whose occurrences ended hours
    /// ago, is old, not a loop happening now. (Before: timed by its arrival, it became a series,
    /// and at 10^6 stored events 141,306 such series evicted the real ones, `just bench-failover`.)
    #[test]
    fn a_relisted_raw_event_from_hours_ago_is_not_a_loop_happening_now() {
        let mut engine = Engine::with_settings(Settings::default());
        let now = t0() + TimeDelta::hours(3);
        let mut live = observation_in("team-a", "web-0", 2);
        (live.first, live.last) = (now, now);
        engine.observe(now, &live);
        assert_eq!(engine.take_intents().len(), 1, "the live loop's create");
        engine.begin_relist();
        engine.observe(now, &live);
        let mut old = observation_in("team-a", "old-0", 3);
        let ended = now - TimeDelta::minutes(150);
        (old.first, old.last) = (ended - TimeDelta::minutes(2), ended);
        old.raw = RawId::of("team-a", "old-0.raw", "");
        engine.observe(now, &old);
        engine.end_relist();
        let intents = engine.take_intents();
        assert!(intents.is_empty(), "written after the relist: {intents:?}");
        assert_eq!(engine.active_series(), 1);
        assert_eq!(engine.stats().dropped_stale, 3);
        // After the relist, a watched occurrence is timed as before: by its arrival, beyond the
        // tolerance (an emitter whose clock is hours behind still gets its series).
        let mut skewed = observation_in("team-a", "skewed-0", 2);
        (skewed.first, skewed.last) = (ended, ended);
        skewed.raw = RawId::of("team-a", "skewed-0.raw", "");
        engine.observe(now, &skewed);
        assert_eq!(engine.take_intents().len(), 1, "the skewed loop's create");
    }

    #[test]
    fn a_lower_bound_from_a_new_policy_applies_to_the_candidates_already_held() {
        let mut engine = Engine::with_settings(Settings::default());
        let names: Vec<String> = (0..5_000).map(|i| format!("pod-{i}")).collect();
        for name in &names {
            engine.observe(t0(), &observation(name, 1, t0()));
        }
        assert_eq!(engine.candidates(), 5_000);
        let lower = Settings {
            max_active_series: 10,
            ..Settings::default()
        };
        let bound = lower.max_candidates();
        engine.set_policies(t0(), PolicySet::uniform(lower));
        assert_eq!(engine.candidates(), bound);
        let evicted = (5_000 - bound) as u64;
        assert_eq!(engine.stats().candidates_evicted, evicted);
        assert_eq!(engine.stats().lone, evicted);
        assert_eq!(engine.pending_occurrences(), bound as u64);
    }
}
