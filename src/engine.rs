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
//! Dormant key holds no count, only which raw objects were already counted (see Restart).
//!
//! # Counting
//!
//! Raw Event objects report cumulative counts (`count`, `series.count`). The engine remembers the count
//! it last absorbed from each raw object and adds only the difference; an equal or lower count adds
//! nothing. A raw object first seen with count N adds N, but only recent occurrences (last within
//! `seriesWindow` of now) may start a series: an old one is remembered as a baseline, not counted.
//! N occurrences that provably had a gap longer than `seriesWindow` between each other (spread over more
//! than N−1 windows) count as lone occurrences, not as a series.
//!
//! # Restart
//!
//! Every write carries a *watermark*: the highest resourceVersion up to which the engine had processed
//! every raw event (see [`Engine::checkpoint`]), and the counts (and latest times) it absorbed from the
//! series' most recently updated raw objects (at most [`MAX_SOURCES`]), including raw objects whose
//! earlier occurrences were lone. After a restart, a raw object listed with a resourceVersion at or
//! below the highest watermark among its key's series objects (Ongoing and Finished) is reflected in
//! full in their counts; one above it is reflected up to the highest count any of them recorded for it
//! (zero if none did), and only the rest is added. That makes a rebuilt engine reach the counts of one
//! that never stopped (property-tested in `tests/restart.rs`), provided every intent it made was
//! written. Inexact cases: a raw object that fed a series after more than [`MAX_SOURCES`] others did and
//! was updated after the series' last write; a key dormant longer than `dormant_retention`; a Finish
//! that was never written (the next burst then joins the series it ended).
//!
//! # Bounds
//!
//! Per governing policy: at most `maxActiveSeries` series (a new series beyond it finishes the least
//! recently active one early: it is written Finished with its count, nothing is lost), and
//! `Settings::max_candidates` candidates and as many dormant keys (the least recently seen is
//! dropped; a dropped candidate's occurrences count in `Stats::lone`). The raw-count table holds at most
//! [`EngineConfig::raw_capacity`] objects (least recently updated evicted; an evicted object seen again
//! counts as new). Every eviction is counted in [`Stats`].

mod keys;

use crate::key::{KeyBuf, KeyId, Observation, RawId};
use crate::mapping::object_name;
use crate::settings::{PolicySet, Settings, SlotIdx};
use chrono::{DateTime, TimeDelta, Utc};
use keys::{KeyStore, Stored};
use schnellru::{LruMap, UnlimitedCompact};
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
    /// The object name ([`object_name`] of the key and start, unless restored under another).
    pub name: String,
    pub namespace: Arc<str>,
    /// The key and the note.
    pub key: KeyBuf,
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
    /// The key and the note, as the object holds them.
    pub key: KeyBuf,
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

/// Unix microseconds: how the engine stores a time (8 bytes, where a `DateTime<Utc>` takes 12 and an
/// `Option` of one 16). Raw events carry at most microsecond precision.
type Micros = i64;

/// A [`Micros`] standing for "not known".
const UNKNOWN: Micros = i64::MIN;

fn micros(t: DateTime<Utc>) -> Micros {
    t.timestamp_micros()
}

fn time(m: Micros) -> DateTime<Utc> {
    DateTime::from_timestamp_micros(m).unwrap_or(DateTime::<Utc>::MIN_UTC)
}

/// An LRU map stored in one hash table, entries linked by `u32` indices: no allocation per entry (the
/// `lru` crate boxes each node), so 100,000 series are a few large allocations that a restart or a
/// burst cannot fragment.
type Table<K, V> = LruMap<K, V, UnlimitedCompact>;

fn table<K: std::hash::Hash + PartialEq, V>() -> Table<K, V> {
    LruMap::new(UnlimitedCompact)
}

/// Tables below this capacity are never shrunk.
const SHRINK_FLOOR: usize = 4096;

/// A table never shrinks by itself: after a burst of candidates it would keep the burst's capacity
/// (entries included) for good. Once it is a quarter full, its entries move to a fresh table, oldest
/// first, so the LRU order is kept; amortised over the removals that emptied it.
fn shrink<K: std::hash::Hash + PartialEq, V>(t: &mut Table<K, V>) {
    if t.guaranteed_capacity() < SHRINK_FLOOR || t.len() * 4 > t.guaranteed_capacity() {
        return;
    }
    let mut fresh = table();
    while let Some((k, v)) = t.pop_oldest() {
        fresh.insert(k, v);
    }
    *t = fresh;
}

/// A [`Source`] as the engine keeps it (24 bytes rather than 32).
#[derive(Clone, Copy, Debug)]
struct Src {
    raw: RawId,
    count: u64,
    /// [`UNKNOWN`] in objects written without it.
    last: Micros,
}

impl Src {
    fn of(s: &Source) -> Src {
        Src {
            raw: s.raw,
            count: s.count,
            last: s.last.map_or(UNKNOWN, micros),
        }
    }

    fn public(&self) -> Source {
        Source {
            raw: self.raw,
            count: self.count,
            last: (self.last != UNKNOWN).then(|| time(self.last)),
        }
    }
}

/// What a candidate or a series has counted.
#[derive(Clone, Debug)]
struct Tally {
    /// The key and the note of the first occurrence, in [`Engine::keys`].
    key: Stored,
    /// Index into [`Engine::namespaces`].
    ns: u32,
    count: u64,
    first: Micros,
    last: Micros,
    /// Most recently updated last; at most [`MAX_SOURCES`].
    sources: Sources,
}

/// Most series and dormant keys have one raw object for their whole life: it is kept inline, without
/// a heap allocation of its own.
type Sources = smallvec::SmallVec<[Src; 1]>;

impl Tally {
    fn first(&self) -> DateTime<Utc> {
        time(self.first)
    }

    fn last(&self) -> DateTime<Utc> {
        time(self.last)
    }

    fn add(&mut self, raw: RawId, raw_count: u64, delta: u64, t: Micros) {
        self.count += delta;
        self.last = self.last.max(t);
        record(&mut self.sources, raw, raw_count, t);
    }
}

/// Notes that `raw` has reached `count`, keeping the most recently updated [`MAX_SOURCES`].
fn record(sources: &mut Sources, raw: RawId, count: u64, t: Micros) {
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

#[derive(Clone, Debug)]
struct Series {
    tally: Tally,
    next_heartbeat: Micros,
    /// Due time of the series' one live timer; other timers for the key are stale.
    timer_due: Micros,
    /// Rebuilt from its object. While recovering, its persisted `last` is older than the occurrences
    /// the raw events still hold for it, so no gap is judged against it: had the live engine seen a
    /// gap, the object would have been written Finished.
    restored: bool,
}

impl Series {
    fn next_heartbeat(&self) -> DateTime<Utc> {
        time(self.next_heartbeat)
    }
}

/// A key whose occurrences were all alone, remembered without counts for `dormant_retention`: the raw
/// objects already counted, so that a series the key forms later lists them among its sources and a
/// restart does not count them again.
#[derive(Clone, Debug)]
struct Dormant {
    ns: u32,
    last: Micros,
    sources: Sources,
}

/// The keys governed by one policy. The LRU order of `candidates` and `dormant` is the order of their
/// latest occurrence, which is how they expire (no timers needed).
struct Slot {
    series: Table<KeyId, Series>,
    candidates: Table<KeyId, Tally>,
    dormant: Table<KeyId, Dormant>,
}

impl Slot {
    fn new() -> Slot {
        Slot {
            series: table(),
            candidates: table(),
            dormant: table(),
        }
    }
}

/// One pending wake-up of a series. 24 bytes: there is one per series (the slot that holds the
/// series is looked up when it fires; there are few).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Timer {
    due: Micros,
    id: KeyId,
}

#[derive(Clone, Copy, Debug)]
struct RawState {
    count: u64,
    last: Micros,
    generation: u32,
}

/// What one observation adds.
struct Delta {
    added: u64,
    /// The count it was measured against (0 for a raw object seen for the first time).
    baseline: u64,
    /// The latest occurrence already counted from this raw object, when known.
    since: Option<Micros>,
}

struct Namespace {
    name: Arc<str>,
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
    /// Every namespace seen, by index (series refer to theirs by index); never shrinks.
    namespaces: Vec<Namespace>,
    namespace_index: HashMap<Arc<str>, u32>,
    slots: Vec<Slot>,
    raw: Table<RawId, RawState>,
    keys: KeyStore,
    generation: u32,
    timers: BinaryHeap<Reverse<Timer>>,
    /// Object names of restored series that differ from [`object_name`] (written by another version).
    names: HashMap<KeyId, Arc<str>>,
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
            namespaces: Vec::new(),
            namespace_index: HashMap::new(),
            raw: table(),
            keys: KeyStore::new(),
            generation: 0,
            timers: BinaryHeap::new(),
            names: HashMap::new(),
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

    /// The namespace's index and governing slot.
    fn namespace(&mut self, ns: &str) -> (u32, SlotIdx) {
        if let Some(&i) = self.namespace_index.get(ns) {
            return (i, self.namespaces[i as usize].slot);
        }
        let labels = BTreeMap::new();
        let slot = self.policies.resolve(&labels);
        (self.add_namespace(ns, labels, slot), slot)
    }

    fn add_namespace(&mut self, ns: &str, labels: BTreeMap<String, String>, slot: SlotIdx) -> u32 {
        let name: Arc<str> = Arc::from(ns);
        let i = u32::try_from(self.namespaces.len()).unwrap_or(u32::MAX);
        self.namespaces.push(Namespace {
            name: name.clone(),
            labels,
            slot,
        });
        self.namespace_index.insert(name, i);
        i
    }

    fn slot_of(&self, ns: u32) -> SlotIdx {
        self.namespaces.get(ns as usize).map_or(0, |n| n.slot)
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
            self.raw.remove(&id);
        }
        self.checkpoint(self.pending_watermark);
    }

    /// A raw event object was deleted (TTL expiry): its count no longer needs remembering.
    pub fn forget(&mut self, raw: RawId) {
        self.raw.remove(&raw);
    }

    /// Starts a rebuild after a restart: restore every series object with [`Engine::restore`], observe
    /// every listed raw event in time order ([`crate::recovery::sort_for_replay`]), then call
    /// [`Engine::end_recovery`]. Ticks are ignored until then, so that no series is finished before the
    /// raw events that extend it have been read.
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
        let (ns, slot_idx) = self.namespace(&p.namespace);
        let interval = self.policies.settings(slot_idx).heartbeat_interval;
        let id = p.id;
        if object_name(&p.key.view(), id, p.first) != p.name {
            self.names.insert(id, Arc::from(p.name));
        }
        // Next heartbeat one interval after the last write, but never all restored series at once.
        let spread = now + jitter(id, interval / 8);
        let mut sources: Sources = p.sources.iter().take(MAX_SOURCES).map(Src::of).collect();
        sources.shrink_to_fit();
        let next_heartbeat = p.last_write.map_or(spread, |w| (w + interval).max(spread));
        let series = Series {
            tally: Tally {
                key: self.keys.insert_packed(p.key.packed()),
                ns,
                count: p.count,
                first: micros(p.first),
                last: micros(p.last.max(p.first)),
                sources,
            },
            next_heartbeat: micros(next_heartbeat),
            timer_due: 0,
            restored: true,
        };
        match self.slots[slot_idx].series.peek(&id) {
            // Two Ongoing objects for one key (a lost Finish write): keep the newer, finish the older
            // so that it is not left Ongoing forever.
            Some(existing) if existing.tally.first >= series.tally.first => {
                self.finish(now, id, series, FinishCause::Gap);
            }
            _ => {
                if let Some(older) = self.slots[slot_idx].series.remove(&id) {
                    self.finish(now, id, older, FinishCause::Gap);
                }
                self.insert_series(now, slot_idx, id, series);
            }
        }
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
        if let Some(r) = self.raw.get(&obs.raw) {
            r.generation = self.generation;
            let delta = Delta {
                added: obs.count.saturating_sub(r.count),
                baseline: r.count,
                since: Some(r.last),
            };
            r.count = r.count.max(obs.count);
            r.last = r.last.max(micros(obs.last));
            return delta;
        }
        let (baseline, since) = match self.evidence.get(&id) {
            Some(e) if self.recovering => match obs.resource_version {
                Some(rv) if rv <= e.watermark => (obs.count, Some(micros(obs.last))),
                _ => e.sources.get(&obs.raw).map_or((0, None), |(c, last)| {
                    ((*c).min(obs.count), last.map(micros))
                }),
            },
            _ => (0, None),
        };
        if self.raw.len() >= self.config.raw_capacity.max(1) && self.raw.pop_oldest().is_some() {
            self.stats.raw_evicted += 1;
        }
        self.raw.insert(
            obs.raw,
            RawState {
                count: obs.count,
                last: micros(obs.last),
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
        let (ns, slot_idx) = self.namespace(obs.namespace);
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
        // Compared as microseconds: this is the path of every occurrence.
        let window_us = window.num_microseconds().unwrap_or(i64::MAX);
        let t = obs.last.min(now);
        let t_us = micros(t);

        let slot = &mut self.slots[slot_idx];
        if let Some(series) = slot.series.get(&id) {
            if t_us <= series.tally.last.saturating_add(window_us)
                || (self.recovering && series.restored)
            {
                series.tally.add(obs.raw, obs.count, delta, t_us);
                return;
            }
            if let Some(ended) = slot.series.remove(&id) {
                self.finish(now, id, ended, FinishCause::Gap);
            }
        }
        if t_us < micros(now).saturating_sub(window_us) {
            self.stats.dropped_stale += delta;
            self.remember(slot_idx, id, obs, ns, t_us);
            return;
        }
        // Where the counted occurrences lie: a new raw object's between its first and its last; a
        // known one's after the previous last. `gaps` is how many gaps separate them from each other
        // and from that start.
        let (mut first, start, gaps) = match (d.baseline, d.since) {
            (0, _) => {
                let first = micros(obs.first.min(t));
                (first, Some(first), delta - 1)
            }
            (_, since) => (t_us, since, delta),
        };
        // N occurrences spread over more than `gaps` windows: the live engine saw each of them alone
        // (exact for what it saw, see module docs), so all but the last are lone.
        let spread = start.is_some_and(|start| {
            // A span too long to represent (a huge count under a huge window) is no spread.
            i64::try_from(gaps).is_ok_and(|g| {
                g >= 1
                    && window_us
                        .checked_mul(g)
                        .is_some_and(|span| t_us.saturating_sub(start) > span)
            })
        });
        if delta >= 2 && spread {
            self.stats.lone += delta - 1;
            delta = 1;
            first = t_us;
        }

        let max_candidates = settings.max_candidates();
        let slot = &mut self.slots[slot_idx];
        let count = match slot.candidates.get(&id) {
            Some(c)
                if t_us <= c.last.saturating_add(window_us)
                    && t_us >= c.first.saturating_sub(window_us) =>
            {
                c.first = c.first.min(first);
                c.add(obs.raw, obs.count, delta, t_us);
                c.count
            }
            Some(c) => {
                // A new run of a key whose earlier occurrences were alone; the sources stay.
                self.stats.lone += c.count;
                c.count = 0;
                c.first = first;
                c.last = t_us;
                c.add(obs.raw, obs.count, delta, t_us);
                c.count
            }
            None => {
                let sources = slot
                    .dormant
                    .remove(&id)
                    .map(|d| d.sources)
                    .unwrap_or_default();
                if slot.candidates.len() >= max_candidates
                    && let Some((old, evicted)) = slot.candidates.pop_oldest()
                {
                    self.stats.lone += evicted.count;
                    self.stats.candidates_evicted += 1;
                    Self::make_dormant(slot, &mut self.keys, old, evicted, max_candidates);
                }
                let mut tally = Tally {
                    key: self.keys.insert(&obs.key, obs.note),
                    ns,
                    count: 0,
                    first,
                    last: t_us,
                    sources,
                };
                tally.add(obs.raw, obs.count, delta, t_us);
                let count = tally.count;
                slot.candidates.insert(id, tally);
                count
            }
        };
        if count >= 2 {
            self.promote(now, slot_idx, id, &settings);
        }
    }

    fn make_dormant(slot: &mut Slot, keys: &mut KeyStore, id: KeyId, c: Tally, max: usize) {
        keys.remove(c.key);
        if slot.dormant.len() >= max {
            slot.dormant.pop_oldest();
        }
        slot.dormant.insert(
            id,
            Dormant {
                ns: c.ns,
                last: c.last,
                sources: c.sources,
            },
        );
    }

    /// Records a raw object's count on its key without counting anything (a stale observation), so
    /// that a series the key forms later lists it among its sources.
    fn remember(&mut self, slot_idx: SlotIdx, id: KeyId, obs: &Observation, ns: u32, t: Micros) {
        let max = self.policies.settings(slot_idx).max_candidates();
        let slot = &mut self.slots[slot_idx];
        if let Some(c) = slot.candidates.peek_mut(&id) {
            record(&mut c.sources, obs.raw, obs.count, t);
            return;
        }
        if slot.dormant.peek(&id).is_none() && slot.dormant.len() >= max {
            slot.dormant.pop_oldest();
        }
        let Some(d) = slot.dormant.get_or_insert(id, || Dormant {
            ns,
            last: t,
            sources: Sources::new(),
        }) else {
            return;
        };
        d.last = d.last.max(t);
        record(&mut d.sources, obs.raw, obs.count, t);
    }

    /// A candidate's second occurrence: the series starts and is created.
    fn promote(&mut self, now: DateTime<Utc>, slot_idx: SlotIdx, id: KeyId, settings: &Settings) {
        let Some(tally) = self.slots[slot_idx].candidates.remove(&id) else {
            return;
        };
        let interval = settings.heartbeat_interval;
        let series = Series {
            tally,
            next_heartbeat: micros(now + interval - jitter(id, interval / 4)),
            timer_due: 0,
            restored: false,
        };
        self.stats.series_started += 1;
        let snap = self.snapshot(id, &series, SeriesState::Ongoing, now);
        self.push_intent(WriteKind::Create, snap);
        self.insert_series(now, slot_idx, id, series);
    }

    /// Adds a series to its slot, finishing the least recently active ones beyond `maxActiveSeries`.
    fn insert_series(&mut self, now: DateTime<Utc>, slot_idx: SlotIdx, id: KeyId, mut s: Series) {
        let settings = self.policies.settings(slot_idx);
        let due = s
            .next_heartbeat()
            .min(s.tally.last() + settings.finish_after);
        let max = settings.max_active_series.max(1);
        s.timer_due = self.arm(due, id);
        self.slots[slot_idx].series.insert(id, s);
        while self.slots[slot_idx].series.len() > max {
            let Some((id, evicted)) = self.slots[slot_idx].series.pop_oldest() else {
                break;
            };
            self.stats.series_evicted += 1;
            self.finish(now, id, evicted, FinishCause::Evicted);
        }
    }

    fn finish(&mut self, now: DateTime<Utc>, id: KeyId, s: Series, cause: FinishCause) {
        self.stats.series_finished += 1;
        let snap = self.snapshot(id, &s, SeriesState::Finished, now);
        self.keys.remove(s.tally.key);
        self.names.remove(&id);
        self.push_intent(WriteKind::Finish(cause), snap);
    }

    /// Everything a writer needs to write the series as it is now.
    fn snapshot(&self, id: KeyId, s: &Series, state: SeriesState, now: DateTime<Utc>) -> Snapshot {
        let t = &s.tally;
        let key = self.keys.get(t.key);
        Snapshot {
            id,
            name: self.names.get(&id).map_or_else(
                || object_name(&key.view(), id, t.first()),
                |n| n.to_string(),
            ),
            namespace: self
                .namespaces
                .get(t.ns as usize)
                .map_or_else(|| Arc::from(""), |n| n.name.clone()),
            key: KeyBuf::from_packed(key),
            count: t.count,
            first: t.first(),
            last: t.last(),
            state,
            watermark: self.watermark,
            sources: t.sources.iter().map(Src::public).collect(),
            written_at: now,
        }
    }

    fn push_intent(&mut self, kind: WriteKind, series: Snapshot) {
        self.intents.push(Intent { kind, series });
    }

    /// Schedules a wake-up for a series; returns the due time to store in it.
    fn arm(&mut self, due: DateTime<Utc>, id: KeyId) -> Micros {
        let due = micros(due);
        self.timers.push(Reverse(Timer { due, id }));
        due
    }

    /// Advances the clock: heartbeats, finishes, expired candidates and dormant keys.
    pub fn tick(&mut self, now: DateTime<Utc>) {
        if self.recovering {
            return;
        }
        for (idx, slot) in self.slots.iter_mut().enumerate() {
            let window = self.policies.settings(idx).series_window;
            let max = self.policies.settings(idx).max_candidates();
            while let Some((_, c)) = slot.candidates.peek_oldest() {
                if beyond(c.last(), window) > now {
                    break;
                }
                if let Some((id, c)) = slot.candidates.pop_oldest() {
                    self.stats.lone += c.count;
                    Self::make_dormant(slot, &mut self.keys, id, c, max);
                }
            }
            while slot
                .dormant
                .peek_oldest()
                .is_some_and(|(_, d)| time(d.last) + self.config.dormant_retention <= now)
            {
                slot.dormant.pop_oldest();
            }
        }
        let now_micros = now.timestamp_micros();
        while let Some(Reverse(top)) = self.timers.peek().copied() {
            if top.due > now_micros {
                break;
            }
            self.timers.pop();
            self.fire(now, top);
        }
        for slot in &mut self.slots {
            shrink(&mut slot.series);
            shrink(&mut slot.candidates);
            shrink(&mut slot.dormant);
        }
        shrink(&mut self.raw);
        if self.timers.capacity() >= SHRINK_FLOOR && self.timers.len() * 4 < self.timers.capacity()
        {
            self.timers.shrink_to(self.timers.len() * 2);
        }
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
        let tables: usize = self
            .slots
            .iter()
            .map(|s| {
                s.series.memory_usage() + s.candidates.memory_usage() + s.dormant.memory_usage()
            })
            .sum();
        tables
            + self.raw.memory_usage()
            + self.timers.capacity() * std::mem::size_of::<Reverse<Timer>>()
            + self.keys.usage().1
    }

    fn fire(&mut self, now: DateTime<Utc>, t: Timer) {
        // The series' slot, if the timer is still its live one.
        let Some(slot_idx) = self
            .slots
            .iter()
            .position(|s| s.series.peek(&t.id).is_some_and(|s| s.timer_due == t.due))
        else {
            return;
        };
        let settings = self.policies.settings(slot_idx).clone();
        let slot = &mut self.slots[slot_idx];
        let Some(s) = slot.series.peek_mut(&t.id) else {
            return;
        };
        let finish_due = s.tally.last() + settings.finish_after;
        if finish_due <= now {
            if let Some(ended) = slot.series.remove(&t.id) {
                self.finish(now, t.id, ended, FinishCause::Quiet);
            }
            return;
        }
        let heartbeat = s.next_heartbeat() <= now;
        if heartbeat {
            s.next_heartbeat = micros(now + settings.heartbeat_interval);
        }
        let due = s.next_heartbeat().min(finish_due);
        let due = self.arm(due, t.id);
        if let Some(s) = self.slots[slot_idx].series.peek_mut(&t.id) {
            s.timer_due = due;
        }
        if heartbeat && let Some(s) = self.slots[slot_idx].series.peek(&t.id) {
            let snap = self.snapshot(t.id, s, SeriesState::Ongoing, now);
            self.push_intent(WriteKind::Heartbeat, snap);
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
        let moved = match self.namespace_index.get(ns) {
            Some(&i) => {
                let n = &mut self.namespaces[i as usize];
                let moved = n.slot != slot;
                n.labels = labels;
                n.slot = slot;
                moved
            }
            None => {
                self.add_namespace(ns, labels, slot);
                false
            }
        };
        if moved {
            self.rebuild(now);
        }
    }

    fn rebuild(&mut self, now: DateTime<Utc>) {
        for n in &mut self.namespaces {
            n.slot = self.policies.resolve(&n.labels);
        }
        let old: Vec<Slot> = std::mem::take(&mut self.slots);
        self.slots = (0..self.policies.slots()).map(|_| Slot::new()).collect();
        self.timers.clear();
        for mut slot in old {
            // Oldest first, so that re-insertion keeps the recency order.
            while let Some((id, d)) = slot.dormant.pop_oldest() {
                let idx = self.slot_of(d.ns);
                self.slots[idx].dormant.insert(id, d);
            }
            while let Some((id, c)) = slot.candidates.pop_oldest() {
                let idx = self.slot_of(c.ns);
                self.slots[idx].candidates.insert(id, c);
            }
            while let Some((id, mut s)) = slot.series.pop_oldest() {
                let idx = self.slot_of(s.tally.ns);
                let interval = self.policies.settings(idx).heartbeat_interval;
                s.next_heartbeat = s.next_heartbeat.min(micros(now + interval));
                self.insert_series(now, idx, id, s);
            }
        }
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
    TimeDelta::milliseconds(((id.get() as u64) % ms as u64) as i64)
}
