//! The series engine: a pure state machine. Occurrences and clock ticks in, write intents out.
//!
//! No I/O and no clock of its own: every input carries `now`. That is what lets a test run a 24-hour
//! crash loop in milliseconds, and what makes a restart reproducible from what the API server holds.
//!
//! # States of a key
//!
//! ```text
//!             1st occurrence             2nd within seriesWindow
//!  (absent) ─────────────────▶ Candidate ─────────────────────────▶ Series (Ongoing) ──┐
//!     ▲                           │  no 2nd within seriesWindow       │ ▲  occurrences: │
//!     │                           ▼  (a lone occurrence)              │ └── no write ───┘
//!     └────────────────────────── dropped                             │ heartbeatInterval: Heartbeat
//!     ▲                                                               │ finishAfter quiet, a gap
//!     └───────────────────────────────────────────────────────────────┘ > seriesWindow, or eviction:
//!                                                                       Finish (state Finished)
//! ```
//!
//! Intents: `Create` when a series starts, `Heartbeat` every `heartbeatInterval` (the first one spread by
//! a per-key offset of up to a quarter interval, so series created together do not heartbeat together),
//! `Finish` once at the end. Occurrences between writes cost nothing but a counter increment.
//!
//! # Counting
//!
//! Raw Event objects report cumulative counts (`count`, `series.count`). The engine remembers the count
//! it last absorbed from each raw object and adds only the difference; an equal or lower count adds
//! nothing. A raw object first seen with count N adds N, but only recent occurrences (last within
//! `seriesWindow` of now) may start a series: an old one is remembered as a baseline, not counted.
//!
//! # Restart
//!
//! Every write carries a *watermark*: the highest resourceVersion up to which the engine had processed
//! every raw event (see [`Engine::checkpoint`]), and the counts it absorbed from the series' most
//! recently updated raw objects (at most [`MAX_SOURCES`]). After a restart, a raw object listed with a
//! resourceVersion at or below the highest watermark among its key's series objects (Ongoing and
//! Finished) is reflected in full in their counts; one above it is reflected up to the highest count any
//! of them recorded for it (zero if none did), and only the rest is added. That makes a rebuilt engine
//! reach the counts of one that never stopped (see `tests/restart.rs`). The one inexact case: a raw
//! object that fed a series after more than [`MAX_SOURCES`] others did, was updated after the series'
//! last write, and then the operator restarted; it may be counted twice.
//!
//! # Bounds
//!
//! Per governing policy: at most `maxActiveSeries` series (a new series beyond it finishes the least
//! recently active one early: it is written Finished with its count, nothing is lost) and
//! `Settings::max_candidates` candidates (the least recently seen candidate is dropped, its lone
//! occurrence counted in `Stats::lone`). The raw-count table holds at most
//! [`EngineConfig::raw_capacity`] objects (least recently updated evicted; an evicted object seen again
//! counts as new). Every eviction is counted in [`Stats`].

use crate::key::{KeyBuf, KeyId, Observation, RawId};
use crate::mapping::object_name;
use crate::settings::{PolicySet, Settings, SlotIdx};
use chrono::{DateTime, TimeDelta, Utc};
use lru::LruCache;
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap};
use std::sync::Arc;

/// Most raw objects whose absorbed counts a series records for restart.
pub const MAX_SOURCES: usize = 16;

/// Engine-wide limits that are not policy knobs.
#[derive(Clone, Copy, Debug)]
pub struct EngineConfig {
    /// Raw event objects whose last count is remembered for delta counting. Raw events expire with the
    /// API server's event TTL (1h by default) and are forgotten on delete, so this only needs to exceed
    /// the number of raw events the cluster holds at once.
    pub raw_capacity: usize,
    /// How long a key whose occurrences were all alone is remembered (without any count), so that a
    /// series it later forms records which raw objects were already counted. About the event TTL.
    pub dormant_retention: TimeDelta,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            raw_capacity: 262_144,
            dormant_retention: TimeDelta::hours(1),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SeriesState {
    Ongoing,
    Finished,
}

impl SeriesState {
    /// The value of the `eventseries.dev/state` label.
    pub fn as_str(self) -> &'static str {
        match self {
            SeriesState::Ongoing => "Ongoing",
            SeriesState::Finished => "Finished",
        }
    }
}

/// Why a series ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FinishCause {
    /// `finishAfter` passed with no occurrence.
    Quiet,
    /// An occurrence came more than `seriesWindow` after the previous one: it starts a new series.
    Gap,
    /// `maxActiveSeries` was reached and this was the least recently active series.
    Evicted,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriteKind {
    Create,
    Heartbeat,
    Finish(FinishCause),
}

/// The count absorbed from one raw Event object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Source {
    pub raw: RawId,
    pub count: u64,
    /// The latest occurrence absorbed from it (unknown in objects written without it).
    pub last: Option<DateTime<Utc>>,
}

/// The state of a series at the moment an intent was made: everything a writer needs to write it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Snapshot {
    pub id: KeyId,
    pub name: Arc<str>,
    pub namespace: Arc<str>,
    pub key: Arc<KeyBuf>,
    pub note: Arc<str>,
    pub count: u64,
    pub first: DateTime<Utc>,
    pub last: DateTime<Utc>,
    pub state: SeriesState,
    pub watermark: u64,
    pub sources: Vec<Source>,
    /// When the intent was made; written into the object so that every heartbeat changes it.
    pub written_at: DateTime<Utc>,
}

/// A write the shell must perform. Later intents for the same series supersede earlier ones.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Intent {
    pub kind: WriteKind,
    pub series: Snapshot,
}

/// A series as read back from its object, to rebuild the engine after a restart.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PersistedSeries {
    pub id: KeyId,
    pub name: String,
    pub namespace: String,
    pub key: KeyBuf,
    pub note: String,
    pub count: u64,
    pub first: DateTime<Utc>,
    pub last: DateTime<Utc>,
    pub state: SeriesState,
    pub watermark: u64,
    pub sources: Vec<Source>,
    pub last_write: Option<DateTime<Utc>>,
}

/// Counters the metrics module exports. Occurrences are counted once, in `occurrences`, and then end
/// up in exactly one of: a series, `lone`, `dropped_filtered`, `dropped_stale`, or a pending candidate.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    pub occurrences: u64,
    pub series_started: u64,
    pub series_finished: u64,
    /// Series finished early because `maxActiveSeries` was reached (also in `series_finished`).
    pub series_evicted: u64,
    /// Occurrences in candidates that never became a series (expired or evicted).
    pub lone: u64,
    pub candidates_evicted: u64,
    /// Raw objects forgotten because the raw-count table was full.
    pub raw_evicted: u64,
    pub dropped_filtered: u64,
    pub dropped_stale: u64,
}

#[derive(Clone, Debug)]
struct Tally {
    key: Arc<KeyBuf>,
    namespace: Arc<str>,
    note: Arc<str>,
    count: u64,
    first: DateTime<Utc>,
    last: DateTime<Utc>,
    /// Most recently updated last.
    sources: Vec<Source>,
    /// Due time of this entry's one live timer; other timers for the key are stale.
    timer_due: DateTime<Utc>,
}

impl Tally {
    fn add(&mut self, raw: RawId, raw_count: u64, delta: u64, t: DateTime<Utc>) {
        self.count += delta;
        self.last = self.last.max(t);
        if let Some(i) = self.sources.iter().position(|s| s.raw == raw) {
            self.sources.remove(i);
        } else if self.sources.len() >= MAX_SOURCES {
            self.sources.remove(0);
        }
        self.sources.push(Source {
            raw,
            count: raw_count,
            last: Some(t),
        });
    }
}

#[derive(Clone, Debug)]
struct Series {
    tally: Tally,
    name: Arc<str>,
    next_heartbeat: DateTime<Utc>,
    /// Rebuilt from its object. While recovering, its persisted `last` is older than the occurrences
    /// the raw events still hold for it, so no gap is judged against it: had the live engine seen a
    /// gap, the object would have been written Finished.
    restored: bool,
}

struct Slot {
    series: LruCache<KeyId, Series>,
    candidates: LruCache<KeyId, Tally>,
}

impl Slot {
    fn new() -> Slot {
        Slot {
            series: LruCache::unbounded(),
            candidates: LruCache::unbounded(),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum TimerKind {
    Candidate,
    Series,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Timer {
    due: DateTime<Utc>,
    slot: SlotIdx,
    kind: TimerKind,
    id: KeyId,
}

#[derive(Clone, Copy, Debug)]
struct RawState {
    count: u64,
    last: DateTime<Utc>,
    generation: u32,
}

/// What one observation adds.
struct Delta {
    added: u64,
    /// The count it was measured against (0 for a raw object seen for the first time).
    baseline: u64,
    /// The latest occurrence already counted from this raw object, when known.
    since: Option<DateTime<Utc>>,
}

struct Namespace {
    labels: BTreeMap<String, String>,
    slot: SlotIdx,
}

/// What the persisted series objects of one key say about its raw objects (see module docs, Restart):
/// every raw state up to the highest watermark was absorbed, and each recorded source count was.
#[derive(Default)]
struct Evidence {
    watermark: u64,
    sources: HashMap<RawId, (u64, Option<DateTime<Utc>>)>,
}

pub struct Engine {
    config: EngineConfig,
    policies: PolicySet,
    namespaces: HashMap<Arc<str>, Namespace>,
    slots: Vec<Slot>,
    raw: LruCache<RawId, RawState>,
    generation: u32,
    timers: BinaryHeap<Reverse<Timer>>,
    watermark: u64,
    pending_watermark: u64,
    evidence: HashMap<KeyId, Evidence>,
    recovering: bool,
    intents: Vec<Intent>,
    stats: Stats,
}

impl Engine {
    pub fn new(policies: PolicySet, config: EngineConfig) -> Engine {
        Engine {
            config,
            slots: (0..policies.slots()).map(|_| Slot::new()).collect(),
            policies,
            namespaces: HashMap::new(),
            raw: LruCache::unbounded(),
            generation: 0,
            timers: BinaryHeap::new(),
            watermark: 0,
            pending_watermark: 0,
            evidence: HashMap::new(),
            recovering: false,
            intents: Vec::new(),
            stats: Stats::default(),
        }
    }

    /// An engine with one set of settings for every namespace.
    pub fn with_settings(settings: Settings) -> Engine {
        Engine::new(PolicySet::uniform(settings), EngineConfig::default())
    }

    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    pub fn active_series(&self) -> usize {
        self.slots.iter().map(|s| s.series.len()).sum()
    }

    /// Keys seen within their window that may still become a series (dormant keys not included).
    pub fn candidates(&self) -> usize {
        self.slots
            .iter()
            .flat_map(|s| s.candidates.iter())
            .filter(|(_, c)| c.count > 0)
            .count()
    }

    /// Occurrences held by candidates that may still become a series.
    pub fn pending_occurrences(&self) -> u64 {
        self.slots
            .iter()
            .flat_map(|s| s.candidates.iter())
            .map(|(_, c)| c.count)
            .sum()
    }

    pub fn watermark(&self) -> u64 {
        self.watermark
    }

    pub fn policies(&self) -> &PolicySet {
        &self.policies
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

    fn snapshot(&self, id: KeyId, s: &Series, state: SeriesState, now: DateTime<Utc>) -> Snapshot {
        snapshot(id, s, state, now, self.watermark)
    }

    /// The namespace's interned name and governing slot.
    fn namespace(&mut self, ns: &str) -> (Arc<str>, SlotIdx) {
        if let Some((name, n)) = self.namespaces.get_key_value(ns) {
            return (name.clone(), n.slot);
        }
        let name: Arc<str> = Arc::from(ns);
        let labels = BTreeMap::new();
        let slot = self.policies.resolve(&labels);
        self.namespaces
            .insert(name.clone(), Namespace { labels, slot });
        (name, slot)
    }

    /// Records that every raw event up to resourceVersion `rv` has been observed (a watch event or a
    /// bookmark in the watch phase, or the end of a list). Writes made after this carry it as their
    /// watermark. Must not be called in the middle of a list, whose items arrive out of order.
    pub fn checkpoint(&mut self, rv: u64) {
        self.pending_watermark = self.pending_watermark.max(rv);
        self.watermark = self.pending_watermark;
    }

    /// Marks the start of a full relist (after 410 Gone): raw objects not seen again before
    /// [`Engine::end_resync`] were deleted in the meantime and are forgotten.
    pub fn begin_resync(&mut self) {
        self.generation = self.generation.wrapping_add(1);
    }

    pub fn end_resync(&mut self) {
        let current = self.generation;
        let stale: Vec<RawId> = self
            .raw
            .iter()
            .filter(|(_, r)| r.generation != current)
            .map(|(id, _)| *id)
            .collect();
        for id in stale {
            self.raw.pop(&id);
        }
        self.checkpoint(self.pending_watermark);
    }

    /// A raw event object was deleted (TTL expiry): its count no longer needs remembering.
    pub fn forget(&mut self, raw: RawId) {
        self.raw.pop(&raw);
    }

    /// Starts a rebuild after a restart: restore every series object with [`Engine::restore`], observe
    /// every listed raw event, then call [`Engine::end_recovery`]. Ticks are ignored until then, so that
    /// no series is finished before the raw events that extend it have been read.
    pub fn begin_recovery(&mut self) {
        self.recovering = true;
    }

    /// Restores one series object (Ongoing or Finished) read back from the API server.
    pub fn restore(&mut self, now: DateTime<Utc>, p: PersistedSeries) {
        let evidence = self.evidence.entry(p.id).or_default();
        evidence.watermark = evidence.watermark.max(p.watermark);
        for src in &p.sources {
            let known = evidence.sources.entry(src.raw).or_insert((0, None));
            if src.count >= known.0 {
                *known = (src.count, src.last);
            }
        }
        if p.state != SeriesState::Ongoing {
            return;
        }
        let (namespace, slot_idx) = self.namespace(&p.namespace);
        let settings = self.policies.settings(slot_idx).clone();
        if let Some(existing) = self.slots[slot_idx].series.peek(&p.id) {
            if existing.tally.first >= p.first {
                // Two Ongoing objects for one key: keep the newer, finish the older so it is not left
                // Ongoing forever.
                let old = self.series_from(p, namespace, now, &settings);
                let snap = snapshot(old.0, &old.1, SeriesState::Finished, now, self.watermark);
                self.push_intent(WriteKind::Finish(FinishCause::Gap), snap);
                return;
            }
            if let Some(older) = self.slots[slot_idx].series.pop(&p.id) {
                let snap = self.snapshot(p.id, &older, SeriesState::Finished, now);
                self.push_intent(WriteKind::Finish(FinishCause::Gap), snap);
            }
        }
        let (id, series) = self.series_from(p, namespace, now, &settings);
        self.insert_series(now, slot_idx, id, series);
    }

    fn series_from(
        &self,
        p: PersistedSeries,
        namespace: Arc<str>,
        now: DateTime<Utc>,
        settings: &Settings,
    ) -> (KeyId, Series) {
        let interval = settings.heartbeat_interval;
        // Next heartbeat one interval after the last write, but never all restored series at once.
        let spread = now + jitter(p.id, interval / 8);
        let next_heartbeat = p.last_write.map_or(spread, |w| (w + interval).max(spread));
        let mut sources = p.sources;
        sources.truncate(MAX_SOURCES);
        (
            p.id,
            Series {
                tally: Tally {
                    key: Arc::new(p.key),
                    namespace,
                    note: Arc::from(p.note),
                    count: p.count,
                    first: p.first,
                    last: p.last.max(p.first),
                    sources,
                    timer_due: now,
                },
                name: Arc::from(p.name),
                next_heartbeat,
                restored: true,
            },
        )
    }

    /// Ends a rebuild: from now on a raw object the engine has not seen is new.
    pub fn end_recovery(&mut self, now: DateTime<Utc>) {
        self.recovering = false;
        self.evidence.clear();
        self.evidence.shrink_to_fit();
        self.tick(now);
    }

    /// How many occurrences an observation adds, and what it was measured against.
    fn delta(&mut self, obs: &Observation, id: KeyId) -> Delta {
        if let Some(r) = self.raw.get_mut(&obs.raw) {
            r.generation = self.generation;
            let delta = Delta {
                added: obs.count.saturating_sub(r.count),
                baseline: r.count,
                since: Some(r.last),
            };
            r.count = r.count.max(obs.count);
            r.last = r.last.max(obs.last);
            return delta;
        }
        let (baseline, since) = match self.evidence.get(&id) {
            Some(e) if self.recovering => match obs.resource_version {
                Some(rv) if rv <= e.watermark => (obs.count, Some(obs.last)),
                _ => e
                    .sources
                    .get(&obs.raw)
                    .map_or((0, None), |(c, last)| ((*c).min(obs.count), *last)),
            },
            _ => (0, None),
        };
        if self.raw.len() >= self.config.raw_capacity.max(1) && self.raw.pop_lru().is_some() {
            self.stats.raw_evicted += 1;
        }
        self.raw.put(
            obs.raw,
            RawState {
                count: obs.count,
                last: obs.last,
                generation: self.generation,
            },
        );
        Delta {
            added: obs.count.saturating_sub(baseline),
            baseline,
            since,
        }
    }

    /// Feeds one observation of a raw event object.
    pub fn observe(&mut self, now: DateTime<Utc>, obs: &Observation) {
        if let Some(rv) = obs.resource_version {
            self.pending_watermark = self.pending_watermark.max(rv);
        }
        let (namespace, slot_idx) = self.namespace(obs.namespace);
        let settings = self.policies.settings(slot_idx).clone();
        let id = obs.key.id(settings.include_note.then_some(obs.note));
        let d = self.delta(obs, id);
        let mut delta = d.added;
        if delta == 0 {
            return;
        }
        self.stats.occurrences += delta;
        let k = &obs.key;
        if !settings
            .filter
            .matches(k.type_, k.reason, k.reporting_controller)
        {
            self.stats.dropped_filtered += delta;
            return;
        }
        let window = settings.series_window;
        let t = obs.last.min(now);
        // Where the counted occurrences may lie: a new raw object's from its first to its last; a known
        // one's after the previous last, which is the series start only if nothing else is known.
        let (first, start, gaps) = match (d.baseline, d.since) {
            (0, _) => (obs.first.min(t), Some(obs.first.min(t)), delta - 1),
            (_, since) => (t, since, delta),
        };
        let slot = &mut self.slots[slot_idx];
        if let Some(series) = slot.series.get_mut(&id) {
            if t <= series.tally.last + window || (self.recovering && series.restored) {
                series.tally.add(obs.raw, obs.count, delta, t);
                return;
            }
            if let Some(ended) = slot.series.pop(&id) {
                self.finish(now, id, ended, FinishCause::Gap);
            }
        }
        if t < now - window {
            self.stats.dropped_stale += delta;
            self.remember(slot_idx, id, obs, namespace, t);
            return;
        }
        // N occurrences spread over more than `gaps` windows had a gap longer than the window between
        // every two of them: all but the last were alone (a live engine would have seen them expire).
        let isolated = start.is_some_and(|start| {
            i32::try_from(gaps).is_ok_and(|g| g >= 1 && t - start > window * g)
        });
        let first = if delta >= 2 && isolated {
            self.stats.lone += delta - 1;
            delta = 1;
            t
        } else {
            first
        };

        let slot = &mut self.slots[slot_idx];
        let due = beyond(t, window);
        let (count, rearm) = match slot.candidates.get_mut(&id) {
            Some(c) if c.count > 0 && t <= c.last + window && t >= c.first - window => {
                c.first = c.first.min(first);
                c.add(obs.raw, obs.count, delta, t);
                (c.count, false)
            }
            Some(c) => {
                // A new run of a key whose earlier occurrences were alone. The tally keeps its sources:
                // the series this may become records them, so a restart does not count them again.
                self.stats.lone += c.count;
                c.count = 0;
                c.first = first;
                c.last = t;
                c.add(obs.raw, obs.count, delta, t);
                c.timer_due = due;
                (c.count, true)
            }
            None => {
                if slot.candidates.len() >= settings.max_candidates()
                    && let Some((_, evicted)) = slot.candidates.pop_lru()
                {
                    self.stats.lone += evicted.count;
                    self.stats.candidates_evicted += 1;
                }
                let mut tally = Tally {
                    key: Arc::new(KeyBuf::new(&obs.key)),
                    namespace,
                    note: Arc::from(obs.note),
                    count: 0,
                    first,
                    last: t,
                    sources: Vec::new(),
                    timer_due: due,
                };
                tally.add(obs.raw, obs.count, delta, t);
                let count = tally.count;
                slot.candidates.put(id, tally);
                (count, true)
            }
        };
        if rearm {
            self.timers.push(Reverse(Timer {
                due,
                slot: slot_idx,
                kind: TimerKind::Candidate,
                id,
            }));
        }
        if count >= 2 {
            self.promote(now, slot_idx, id, &settings);
        }
    }

    /// Records a raw object's count on its key without counting anything, so that a series the key
    /// forms later lists it among its sources (see the dormant state in `fire`).
    fn remember(
        &mut self,
        slot_idx: SlotIdx,
        id: KeyId,
        obs: &Observation,
        namespace: Arc<str>,
        t: DateTime<Utc>,
    ) {
        let max = self.policies.settings(slot_idx).max_candidates();
        let slot = &mut self.slots[slot_idx];
        if let Some(c) = slot.candidates.peek_mut(&id) {
            c.add(obs.raw, obs.count, 0, c.last.max(t));
            return;
        }
        if slot.candidates.len() >= max
            && let Some((_, evicted)) = slot.candidates.pop_lru()
        {
            self.stats.lone += evicted.count;
            self.stats.candidates_evicted += 1;
        }
        let due = t + self.config.dormant_retention;
        let mut tally = Tally {
            key: Arc::new(KeyBuf::new(&obs.key)),
            namespace,
            note: Arc::from(obs.note),
            count: 0,
            first: t,
            last: t,
            sources: Vec::new(),
            timer_due: due,
        };
        tally.add(obs.raw, obs.count, 0, t);
        slot.candidates.push(id, tally);
        self.timers.push(Reverse(Timer {
            due,
            slot: slot_idx,
            kind: TimerKind::Candidate,
            id,
        }));
    }

    /// A candidate's second occurrence: the series starts and is created.
    fn promote(&mut self, now: DateTime<Utc>, slot_idx: SlotIdx, id: KeyId, settings: &Settings) {
        let Some(tally) = self.slots[slot_idx].candidates.pop(&id) else {
            return;
        };
        let name: Arc<str> = Arc::from(object_name(&tally.key.view(), id, tally.first));
        let interval = settings.heartbeat_interval;
        let series = Series {
            tally,
            name,
            next_heartbeat: now + interval - jitter(id, interval / 4),
            restored: false,
        };
        self.stats.series_started += 1;
        let snap = self.snapshot(id, &series, SeriesState::Ongoing, now);
        self.push_intent(WriteKind::Create, snap);
        self.insert_series(now, slot_idx, id, series);
    }

    /// Adds a series to its slot, finishing the least recently active ones beyond `maxActiveSeries`.
    fn insert_series(&mut self, now: DateTime<Utc>, slot_idx: SlotIdx, id: KeyId, mut s: Series) {
        let settings = self.policies.settings(slot_idx).clone();
        let due = s.next_heartbeat.min(s.tally.last + settings.finish_after);
        s.tally.timer_due = due;
        self.slots[slot_idx].series.put(id, s);
        self.timers.push(Reverse(Timer {
            due,
            slot: slot_idx,
            kind: TimerKind::Series,
            id,
        }));
        self.enforce_limit(now, slot_idx);
    }

    fn enforce_limit(&mut self, now: DateTime<Utc>, slot_idx: SlotIdx) {
        let max = self.policies.settings(slot_idx).max_active_series.max(1);
        while self.slots[slot_idx].series.len() > max {
            let Some((id, evicted)) = self.slots[slot_idx].series.pop_lru() else {
                break;
            };
            self.stats.series_evicted += 1;
            self.finish(now, id, evicted, FinishCause::Evicted);
        }
    }

    fn finish(&mut self, now: DateTime<Utc>, id: KeyId, s: Series, cause: FinishCause) {
        self.stats.series_finished += 1;
        let snap = self.snapshot(id, &s, SeriesState::Finished, now);
        self.push_intent(WriteKind::Finish(cause), snap);
    }

    fn push_intent(&mut self, kind: WriteKind, series: Snapshot) {
        self.intents.push(Intent { kind, series });
    }

    /// Advances the clock: heartbeats, finishes, expired candidates.
    pub fn tick(&mut self, now: DateTime<Utc>) {
        if self.recovering {
            return;
        }
        while let Some(Reverse(top)) = self.timers.peek().copied() {
            if top.due > now {
                break;
            }
            self.timers.pop();
            self.fire(now, top);
        }
    }

    fn fire(&mut self, now: DateTime<Utc>, t: Timer) {
        let Some(settings) =
            (t.slot < self.slots.len()).then(|| self.policies.settings(t.slot).clone())
        else {
            return;
        };
        let slot = &mut self.slots[t.slot];
        match t.kind {
            TimerKind::Candidate => {
                let Some(c) = slot.candidates.peek_mut(&t.id) else {
                    return;
                };
                if c.timer_due != t.due {
                    return;
                }
                // A live candidate turns dormant once its window passes: its occurrences were alone,
                // but its sources are kept for `dormant_retention` (see `observe`). Then it goes.
                let expiry = beyond(c.last, settings.series_window);
                let due = if c.count > 0 && expiry <= now {
                    self.stats.lone += c.count;
                    c.count = 0;
                    c.last + self.config.dormant_retention
                } else if c.count > 0 {
                    expiry
                } else {
                    c.last + self.config.dormant_retention
                };
                if due <= now {
                    slot.candidates.pop(&t.id);
                } else {
                    c.timer_due = due;
                    self.timers.push(Reverse(Timer { due, ..t }));
                }
            }
            TimerKind::Series => {
                let Some(s) = slot.series.peek_mut(&t.id) else {
                    return;
                };
                if s.tally.timer_due != t.due {
                    return;
                }
                let finish_due = s.tally.last + settings.finish_after;
                if finish_due <= now {
                    if let Some(ended) = slot.series.pop(&t.id) {
                        self.finish(now, t.id, ended, FinishCause::Quiet);
                    }
                    return;
                }
                let heartbeat = s.next_heartbeat <= now;
                if heartbeat {
                    s.next_heartbeat = now + settings.heartbeat_interval;
                }
                let due = s.next_heartbeat.min(finish_due);
                s.tally.timer_due = due;
                self.timers.push(Reverse(Timer { due, ..t }));
                if heartbeat {
                    let snap = snapshot(t.id, s, SeriesState::Ongoing, now, self.watermark);
                    self.push_intent(WriteKind::Heartbeat, snap);
                }
            }
        }
    }

    /// Replaces the policies. Applies live: every series and candidate moves to the slot its namespace
    /// now resolves to, with that slot's settings from the next tick on. Series beyond a lower
    /// `maxActiveSeries` are finished early. A change of `includeNote` applies to keys seen after it.
    pub fn set_policies(&mut self, now: DateTime<Utc>, policies: PolicySet) {
        self.policies = policies;
        self.rebuild(now);
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
        let moved = match self.namespaces.get_mut(ns) {
            Some(n) => {
                let moved = n.slot != slot;
                *n = Namespace { labels, slot };
                moved
            }
            None => {
                self.namespaces
                    .insert(Arc::from(ns), Namespace { labels, slot });
                false
            }
        };
        if moved {
            self.rebuild(now);
        }
    }

    fn rebuild(&mut self, now: DateTime<Utc>) {
        for n in self.namespaces.values_mut() {
            n.slot = self.policies.resolve(&n.labels);
        }
        let old: Vec<Slot> = std::mem::take(&mut self.slots);
        self.slots = (0..self.policies.slots()).map(|_| Slot::new()).collect();
        self.timers.clear();
        let mut series = Vec::new();
        let mut candidates = Vec::new();
        for mut slot in old {
            // Oldest first, so that re-insertion keeps the recency order.
            while let Some(entry) = slot.series.pop_lru() {
                series.push(entry);
            }
            while let Some(entry) = slot.candidates.pop_lru() {
                candidates.push(entry);
            }
        }
        for (id, mut c) in candidates {
            let (_, idx) = self.namespace(&c.namespace.clone());
            let window = self.policies.settings(idx).series_window;
            c.timer_due = if c.count > 0 {
                beyond(c.last, window)
            } else {
                c.last + self.config.dormant_retention
            };
            self.timers.push(Reverse(Timer {
                due: c.timer_due,
                slot: idx,
                kind: TimerKind::Candidate,
                id,
            }));
            self.slots[idx].candidates.put(id, c);
        }
        for (id, mut s) in series {
            let (_, idx) = self.namespace(&s.tally.namespace.clone());
            let interval = self.policies.settings(idx).heartbeat_interval;
            s.next_heartbeat = s.next_heartbeat.min(now + interval);
            self.insert_series(now, idx, id, s);
        }
    }
}

fn snapshot(
    id: KeyId,
    s: &Series,
    state: SeriesState,
    now: DateTime<Utc>,
    watermark: u64,
) -> Snapshot {
    Snapshot {
        id,
        name: s.name.clone(),
        namespace: s.tally.namespace.clone(),
        key: s.tally.key.clone(),
        note: s.tally.note.clone(),
        count: s.tally.count,
        first: s.tally.first,
        last: s.tally.last,
        state,
        watermark,
        sources: s.tally.sources.clone(),
        written_at: now,
    }
}

/// The first instant at which a gap after `last` is longer than `window` (a gap of exactly `window`
/// still belongs to the series, SPEC "no gap longer than seriesWindow").
fn beyond(last: DateTime<Utc>, window: TimeDelta) -> DateTime<Utc> {
    last + window + TimeDelta::microseconds(1)
}

/// A deterministic per-key offset in `[0, span)`, so that series do not act in lockstep.
fn jitter(id: KeyId, span: TimeDelta) -> TimeDelta {
    let ms = span.num_milliseconds();
    if ms <= 0 {
        return TimeDelta::zero();
    }
    TimeDelta::milliseconds(((id.0 as u64) % ms as u64) as i64)
}
