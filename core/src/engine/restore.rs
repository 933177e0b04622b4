//! Rebuilding the engine after a restart from the series objects the API server holds.
//!
//! Every write carries a *watermark*: the highest resourceVersion up to which the engine had processed
//! every raw event (see [`Engine::checkpoint`]), and the counts (and latest times) it absorbed from the
//! series' most recently updated raw objects (at most [`MAX_SOURCES`]), including raw objects whose
//! earlier occurrences were lone. After a restart, a raw object listed with a resourceVersion at or
//! below the highest watermark among its key's series objects (Ongoing and Finished) is reflected in
//! full in their counts; one above it is reflected up to the highest count any of them recorded for it
//! (zero if none did), and only the rest is added. A count recorded above what the list shows (an
//! object written after the list's snapshot, by a leader beside a restoring standby) is what the
//! engine remembers for the raw object, so the watch's change that brings it there adds nothing. The same evidence is also kept by raw object,
//! whatever key it was counted under: a raw object listed in an object's sources at a
//! resourceVersion at or below that object's watermark was counted in full, else up to the count
//! recorded. So a key that changed (`includeNote` toggled between the runs) counts nothing twice. That makes a rebuilt engine reach the counts of one
//! that never stopped, provided every intent it made was written. Inexact cases: a raw object that fed
//! a series after more than [`MAX_SOURCES`] others did and was updated after the series' last write; a
//! key dormant longer than `dormant_retention`; a Finish that was never written (the next burst then
//! joins the series it ended); a raw object that outlived the series object that counted it (a
//! Finished object expires with the event TTL, a raw object lives on while it is rewritten: its
//! earlier occurrences are placed again, as those of a loop that ran while no operator watched
//! are, which a count and two timestamps cannot tell apart).
//!
//! Restoring is idempotent: an object restored twice (a list continued on an inconsistent token
//! after its continue token expired may serve some objects again) is one series, and what it says
//! is merged (the higher count, the later time); nothing is finished or counted twice.
//!
//! The order: [`Engine::begin_recovery`], [`Engine::restore`] for every series object, then every
//! listed raw event through [`Engine::observe`] in time order, then [`Engine::end_recovery`]. Ticks
//! are ignored until then, so that no series is finished before the raw events that extend it have
//! been read.

use super::Engine;
use super::lifecycle::jitter;
use super::storage::{Dormant, Ended, Micros, Series, Sources, Src, Tally, micros};
use crate::intent::{FinishCause, Intent, MAX_SOURCES, SeriesState, StoredSeries, WriteKind};
use crate::key::{KeyId, Observation, RawId};
use crate::settings::SlotIdx;
use chrono::{DateTime, Utc};
use std::collections::{HashMap, HashSet};

/// What the stored series objects of one key say: the highest watermark among them, and whether
/// one of them listed [`MAX_SOURCES`] sources (then a raw object missing from the sources may have
/// been pushed out; otherwise one missing was not counted under this key: it may have been under
/// another, before `includeNote` changed, and never written).
#[derive(Clone, Copy, Default)]
struct KeyEvidence {
    watermark: u64,
    truncated: bool,
}

/// The highest count recorded for a raw object, and its latest occurrence.
#[derive(Clone, Copy, Default)]
struct Recorded {
    count: u64,
    last: Option<DateTime<Utc>>,
}

impl Recorded {
    /// Keeps the higher count (the later record on a tie).
    fn merge(&mut self, count: u64, last: Option<DateTime<Utc>>) {
        if count >= self.count {
            *self = Recorded { count, last };
        }
    }

    /// What it says was counted from the raw object. It may be more than a list reports: the
    /// object was written after the list's snapshot (a leader writing beside a restoring
    /// standby); the difference then comes with the watch, and was counted already.
    fn baseline(&self) -> (u64, Option<Micros>) {
        (self.count, self.last.map(micros))
    }
}

/// The baseline that says more was counted (`b` on a tie).
fn more(a: (u64, Option<Micros>), b: (u64, Option<Micros>)) -> (u64, Option<Micros>) {
    if a.0 > b.0 { a } else { b }
}

/// What the stored series objects say about one raw object, whatever key it was counted under.
#[derive(Clone, Copy, Default)]
struct RawEvidence {
    recorded: Recorded,
    /// The highest watermark of an object that lists it.
    watermark: u64,
}

/// The evidence of every key and raw object, kept from [`Engine::begin_recovery`] to
/// [`Engine::end_recovery`]. Flat tables, one entry per key and one per (key, raw object): a
/// restore holds them for every stored series at once, on top of the series themselves, and a
/// table per key cost a standby more than the series it restored.
#[derive(Default)]
pub(super) struct Recovery {
    keys: HashMap<KeyId, KeyEvidence>,
    sources: HashMap<(KeyId, RawId), Recorded>,
    /// By the namespace of the object that vouches for the raw object: a claim in one namespace
    /// can never stand for another namespace's raw events (their ids are public, the claim's
    /// namespace is checked by `decode`).
    raws: HashMap<Box<str>, HashMap<RawId, RawEvidence>>,
    /// Older objects of a key already finished as superseded (key, start): one read again is not
    /// finished twice.
    superseded: HashSet<(KeyId, Micros)>,
}

impl Recovery {
    /// What the stored objects say was already counted from a raw object not seen in this process:
    /// the more of what its key's objects and what the objects listing it say.
    /// May exceed `obs.count` (see [`Recorded::baseline`]).
    pub fn baseline(&self, id: KeyId, obs: &Observation) -> (u64, Option<Micros>) {
        let full = (obs.count, Some(micros(obs.last)));
        let by_key = match self.keys.get(&id) {
            None => (0, None),
            Some(k) => {
                let recorded = self
                    .sources
                    .get(&(id, obs.raw))
                    .map_or((0, None), Recorded::baseline);
                match obs.resource_version {
                    Some(rv) if k.truncated && rv <= k.watermark => more(full, recorded),
                    _ => recorded,
                }
            }
        };
        let by_raw = match self.raws.get(obs.namespace).and_then(|r| r.get(&obs.raw)) {
            None => (0, None),
            Some(r) => match obs.resource_version {
                Some(rv) if rv <= r.watermark => more(full, r.recorded.baseline()),
                _ => r.recorded.baseline(),
            },
        };
        more(by_raw, by_key)
    }

    /// Keeps what a stored object says was counted, by key and by raw object.
    fn record(&mut self, p: &StoredSeries) {
        let key = self.keys.entry(p.id).or_default();
        key.watermark = key.watermark.max(p.watermark);
        key.truncated |= p.sources.len() >= MAX_SOURCES;
        let raws = match self.raws.get_mut(p.namespace.as_str()) {
            Some(raws) => raws,
            None => self.raws.entry(p.namespace.as_str().into()).or_default(),
        };
        for src in &p.sources {
            let known = self.sources.entry((p.id, src.raw)).or_default();
            known.merge(src.count, src.last);
            let raw = raws.entry(src.raw).or_default();
            raw.watermark = raw.watermark.max(p.watermark);
            raw.recorded.merge(src.count, src.last);
        }
    }
}

impl Engine {
    /// A Finished object: its key stays dormant with what it counted, and with the series itself
    /// (for an occurrence written late), as when it finished in this process.
    fn restore_finished(&mut self, ns: u32, slot_idx: SlotIdx, p: &StoredSeries) {
        let max = self.policies.settings(slot_idx).max_candidates();
        let slot = &mut self.slots[slot_idx];
        if slot.series.peek(ns, &p.id).is_none() && slot.candidates.peek(ns, &p.id).is_none() {
            let sources = p.sources.iter().take(MAX_SOURCES).map(Src::of).collect();
            let last = micros(p.last.max(p.first));
            let ended = Some(Ended {
                first: micros(p.first),
                last,
                count: p.count,
                name_variant: p.name_variant,
            });
            let dormant = Dormant {
                ns,
                last,
                sources,
                ended,
                used: 0,
            };
            match slot.dormant.peek_mut(&p.id) {
                Some(d) if d.last >= last => {}
                _ => slot.make_dormant(p.id, dormant, max),
            }
        }
    }

    /// Starts a rebuild after a restart (see the module docs for the order of calls).
    pub fn begin_recovery(&mut self) {
        self.recovery = Some(Recovery::default());
    }

    /// Restores one series object (Ongoing or Finished) read back from the API server.
    pub fn restore(&mut self, now: DateTime<Utc>, p: StoredSeries) {
        if let Some(recovery) = self.recovery.as_mut() {
            recovery.record(&p);
        }
        let (ns, slot_idx) = self.namespace(&p.namespace);
        if p.state != SeriesState::Ongoing {
            self.restore_finished(ns, slot_idx, &p);
            return;
        }
        let settings = self.policies.settings(slot_idx);
        let interval = settings.heartbeat_interval;
        // Early refreshes go on after the last write: none repeated, at most one missed (written
        // late, at once).
        let refresh_step =
            Series::refresh_step_after(settings, p.first, p.last_write.unwrap_or(now).min(now));
        let id = p.id;
        let first = micros(p.first);
        if let Some(same) = self.slots[slot_idx].series.peek_mut(ns, &id)
            && same.tally.first == first
        {
            // The same object read again (a list continued after its token expired serves a page
            // twice): one object, one series. What it says is merged; nothing is finished.
            same.tally.count = same.tally.count.max(p.count);
            same.tally.last = same.tally.last.max(micros(p.last.max(p.first)));
            same.restored = same.restored.max(Some(p.count));
            return;
        }
        // Next heartbeat one interval after the last write, but never all restored series at once,
        // and at the writer's rate (see `pacing`).
        let spread = now + jitter(id, interval / 8);
        let mut sources: Sources = p.sources.iter().take(MAX_SOURCES).map(Src::of).collect();
        sources.shrink_to_fit();
        let written = p.last_write.map_or(now, |w| w.min(now));
        let next_heartbeat = self.pacer.book(
            p.last_write.map_or(spread, |w| (w + interval).max(spread)),
            written,
        );
        let series = Series {
            tally: Tally {
                key: self.keys.insert_packed(ns, p.key.packed()),
                ns,
                count: p.count,
                first,
                last: micros(p.last.max(p.first)),
                seen: micros(p.last.max(p.first)),
                sources,
            },
            next_heartbeat: micros(next_heartbeat),
            written_count: p.count,
            refresh_step,
            name_variant: p.name_variant,
            timer_due: 0,
            restored: Some(p.count),
        };
        match self.slots[slot_idx].series.peek(ns, &id) {
            // Two Ongoing objects for one key (a lost Finish write): keep the newer, finish the older
            // so that it is not left Ongoing forever.
            Some(existing) if existing.tally.first >= series.tally.first => {
                self.supersede(now, slot_idx, id, series);
            }
            _ => {
                if let Some(older) = self.slots[slot_idx].series.remove(ns, &id) {
                    self.supersede(now, slot_idx, id, older);
                }
                self.insert_series(now, slot_idx, id, series);
                self.bound_key_bytes(now);
            }
        }
    }

    /// Finishes the older of two Ongoing objects of one key (a lost Finish write), once, however
    /// often the list serves it.
    fn supersede(&mut self, now: DateTime<Utc>, slot_idx: usize, id: KeyId, older: Series) {
        let first = older.tally.first;
        let again = self
            .recovery
            .as_mut()
            .is_some_and(|r| !r.superseded.insert((id, first)));
        if again {
            self.keys.remove(older.tally.ns, older.tally.key);
        } else {
            self.finish(now, slot_idx, id, older, FinishCause::Gap);
        }
    }

    /// Ends a rebuild: from now on a raw object the engine has not seen is new. The input is known
    /// complete up to `input` (the snapshot of the list replayed): a series quiet since before that
    /// is finished now, one whose next occurrence may still come through the watch is not.
    ///
    /// A restored series that the replay extended is written at once, so that its object holds what
    /// was counted: a second restart before its next heartbeat must not depend on raw objects still
    /// holding what the first one read (one raw object may feed the series of two keys, when
    /// `includeNote` changed between them).
    pub fn end_recovery(&mut self, now: DateTime<Utc>, input: DateTime<Utc>) {
        self.recovery = None;
        let mut grown = Vec::new();
        for slot in &mut self.slots {
            for (id, s) in slot.series.iter_mut() {
                if s.restored
                    .take()
                    .is_some_and(|stored| s.tally.count > stored)
                {
                    grown.push((*id, s.tally.ns));
                }
            }
        }
        for (id, ns) in grown {
            let slot_idx = self.namespaces.slot_of(ns);
            if let Some(s) = self.slots[slot_idx].series.peek_mut(ns, &id) {
                s.written_count = s.tally.count;
            }
            if let Some(s) = self.slots[slot_idx].series.peek(ns, &id) {
                let snap = self.snapshot(id, s, SeriesState::Ongoing, now);
                self.intents.push(Intent {
                    kind: WriteKind::Heartbeat,
                    series: snap,
                    due: now,
                });
            }
        }
        self.tick_with_input(now, input);
    }

    /// A listed raw object that adds nothing to its restored series still says when its latest
    /// occurrence was seen (the API server wrote it then, see `timing`): the series object records
    /// only the emitter's time, which may be behind. The series is seen no earlier, as the process
    /// that counted the occurrence saw it, so that it does not finish sooner than it would have.
    pub(super) fn listed_again(
        &mut self,
        slot: SlotIdx,
        ns: u32,
        id: KeyId,
        t: Micros,
        seen: Micros,
    ) {
        if let Some(s) = self.slots[slot].series.peek_mut(ns, &id)
            && s.restored.is_some()
            && t >= s.tally.first
        {
            s.tally.seen = s.tally.seen.max(seen);
        }
    }

    pub(super) fn recovering(&self) -> bool {
        self.recovery.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::t0;
    use super::*;
    use crate::intent::{Intent, WriteKind};
    use crate::key::{KeyBuf, KeyRef, ObjectRef};
    use crate::settings::Settings;
    use chrono::TimeDelta;

    fn stored(first: DateTime<Utc>) -> StoredSeries {
        let key = KeyRef {
            namespace: "team-a",
            regarding: ObjectRef {
                kind: "Pod",
                namespace: "team-a",
                name: "web-0",
                ..ObjectRef::default()
            },
            reason: "BackOff",
            ..KeyRef::default()
        };
        StoredSeries {
            id: key.id(None),
            namespace: "team-a".into(),
            key: KeyBuf::new(&key, "note"),
            count: 5,
            first,
            last: first + TimeDelta::minutes(1),
            state: SeriesState::Ongoing,
            watermark: 0,
            sources: Vec::new(),
            last_write: Some(first + TimeDelta::minutes(1)),
            name_variant: 0,
        }
    }

    fn starts(intents: &[Intent]) -> Vec<(WriteKind, DateTime<Utc>)> {
        intents.iter().map(|i| (i.kind, i.series.first)).collect()
    }

    #[test]
    fn an_object_restored_twice_is_one_series_and_finishes_nothing() {
        let mut engine = Engine::with_settings(Settings::default());
        let now = t0() + TimeDelta::minutes(2);
        engine.begin_recovery();
        engine.restore(now, stored(t0()));
        engine.restore(now, stored(t0()));
        assert_eq!(engine.take_intents(), [], "no Finish for a page seen twice");
        assert_eq!(engine.active_series(), 1);
        engine.end_recovery(now, now);
        let active = engine.active(now);
        assert_eq!(active.len(), 1);
        assert_eq!(active[0].count, 5, "counted once");
        assert_eq!(engine.take_intents(), [], "nothing new to write");
    }

    #[test]
    fn an_older_object_read_again_is_finished_once() {
        let mut engine = Engine::with_settings(Settings::default());
        let now = t0() + TimeDelta::minutes(12);
        let newer = t0() + TimeDelta::minutes(10);
        engine.begin_recovery();
        engine.restore(now, stored(t0()));
        engine.restore(now, stored(newer));
        // A list started over (its continue token expired, none offered) serves the older again.
        engine.restore(now, stored(t0()));
        let finished = engine.take_intents();
        assert_eq!(
            starts(&finished),
            [(WriteKind::Finish(FinishCause::Gap), t0())]
        );
        assert_eq!(engine.stats().series_finished, 1);
        assert_eq!(engine.active_series(), 1);
    }

    #[test]
    fn two_objects_of_one_key_keep_their_own_names() {
        let settings = Settings {
            heartbeat_interval: TimeDelta::minutes(10),
            finish_after: TimeDelta::hours(2),
            ..Settings::default()
        };
        let mut engine = Engine::with_settings(settings);
        let now = t0() + TimeDelta::minutes(20);
        engine.begin_recovery();
        let newer = t0() + TimeDelta::minutes(10);
        engine.restore(now, stored(t0()));
        engine.restore(now, stored(newer));
        let restored = engine.take_intents();
        assert_eq!(
            starts(&restored),
            [(WriteKind::Finish(FinishCause::Gap), t0())],
            "the older object is the one finished"
        );
        engine.end_recovery(now, now);
        engine.tick(now + TimeDelta::minutes(15));
        let later = engine.take_intents();
        assert_eq!(
            starts(&later),
            [(WriteKind::Heartbeat, newer)],
            "the survivor keeps writing to its own object"
        );
        // An object's name derives from its key and start: the same key, different starts.
        assert_eq!(restored[0].series.id, later[0].series.id);
        assert_ne!(restored[0].series.first, later[0].series.first);
    }

    /// A standby restores beside a leader that keeps writing: the leader's newest object (read by
    /// the restore) already counts an occurrence that the raw list, read a moment before, does not
    /// show yet; the watch brings it next. It was counted once, by the leader.
    #[test]
    fn an_object_newer_than_the_raw_list_is_not_counted_again_when_the_watch_catches_up() {
        use super::super::tests::observation;
        let mut engine = Engine::with_settings(Settings::default());
        let first = t0();
        let at = |s: i64| first + TimeDelta::seconds(s);
        let listed = Observation {
            resource_version: Some(90),
            first,
            ..observation("web-0", 6, at(50))
        };
        let watched = Observation {
            resource_version: Some(100),
            first,
            ..observation("web-0", 7, at(60))
        };
        let key = listed.key.id(None);
        let stored = StoredSeries {
            id: key,
            namespace: "team-a".into(),
            key: KeyBuf::new(&listed.key, listed.note),
            count: 7,
            first,
            last: at(60),
            state: SeriesState::Ongoing,
            watermark: 100,
            sources: vec![crate::intent::Source {
                raw: listed.raw,
                count: 7,
                last: Some(at(60)),
            }],
            last_write: Some(at(61)),
            name_variant: 0,
        };
        engine.begin_recovery();
        engine.restore(at(62), stored);
        engine.observe(at(62), &listed);
        engine.end_recovery(at(62), at(62));
        engine.observe(at(63), &watched);
        let active = engine.active(at(63));
        assert_eq!(active.len(), 1);
        assert_eq!(active[0].count, 7, "the leader counted the 7th already");
    }
}
