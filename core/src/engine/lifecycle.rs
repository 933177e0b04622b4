//! The life of a series: created at its key's second occurrence, extended by later ones, written
//! again at every heartbeat, and finished when it goes quiet, when a gap ends it, or when it is
//! evicted by `maxActiveSeries` or `maxActiveSeriesPerNamespace`. [`Engine::tick`] drives the timed
//! part. A finished series' key stays dormant with its sources, so what it counted is not counted
//! again.

use super::counting::Placement;
use super::storage::{Dormant, Ended, Micros, Series, Tally, micros, record, time};
use super::{Engine, Landing};
use crate::intent::{FinishCause, Intent, Landed, SeriesState, Snapshot, WriteKind};
use crate::key::store::Stored;
use crate::key::{KeyBuf, KeyId, Observation};
use crate::settings::{Settings, SlotIdx};
use chrono::{DateTime, TimeDelta, Utc};

impl Engine {
    /// Adds occurrences to the key's Ongoing series if they belong to it; true when they did. An
    /// occurrence after a gap longer than the window finishes the series (the occurrence then starts
    /// a new candidate).
    pub(super) fn extend_series(
        &mut self,
        now: DateTime<Utc>,
        at: &Landing,
        obs: &Observation,
        delta: u64,
    ) -> bool {
        let (id, t) = (at.id, at.t);
        let recovering = self.recovering();
        let slot = &mut self.slots[at.slot];
        let Some(series) = slot.series.get(at.ns, &id) else {
            return false;
        };
        if t <= series.tally.last.saturating_add(at.window)
            || (recovering && series.restored.is_some())
        {
            series.tally.add(obs.raw, obs.count, delta, t, at.seen);
            return true;
        }
        if let Some(ended) = slot.series.remove(at.ns, &id) {
            self.finish(now, at.slot, id, ended, FinishCause::Gap);
        }
        false
    }

    /// An occurrence of a key with no series that, by its own timestamp, belongs to the series the
    /// key finished last (see [`Ended::holds`]): its emitter wrote it late, after the series had
    /// been written Finished. The series is active again under its name, with the occurrence
    /// counted, and is written when it finishes again, or Ongoing at its next refresh or heartbeat
    /// if more occurrences keep it alive (the loop was never over). A candidate the key started
    /// meanwhile within a window of the series joins it (one run, no gap longer than the window);
    /// beside one further away, the series is written Finished again at once with the occurrence.
    /// True when the occurrence went to the finished series.
    pub(super) fn reopen(
        &mut self,
        now: DateTime<Utc>,
        at: &Landing,
        obs: &Observation,
        p: &Placement,
        settings: &Settings,
    ) -> bool {
        let finish_after = settings.finish_after.num_microseconds().unwrap_or(i64::MAX);
        let slot = &mut self.slots[at.slot];
        let Some(ended) = slot
            .dormant
            .peek(&at.id)
            .and_then(|d| d.ended)
            .filter(|e| e.holds(at.t, at.window, finish_after))
        else {
            return false;
        };
        let reach = ended.last.max(at.t).saturating_add(at.window);
        let apart = slot
            .candidates
            .peek(at.ns, &at.id)
            .is_some_and(|c| c.first > reach);
        let Some(d) = slot.dormant.remove(&at.id) else {
            return false;
        };
        let mut tally = Tally {
            key: self.keys.insert(at.ns, &obs.key, obs.note),
            ns: at.ns,
            count: ended.count,
            first: ended.first,
            last: ended.last,
            seen: d.last,
            sources: d.sources,
        };
        if !apart && let Some(c) = slot.candidates.remove(at.ns, &at.id) {
            self.keys.remove(c.ns, c.key);
            tally.count += c.count;
            tally.last = tally.last.max(c.last);
            tally.seen = tally.seen.max(c.seen);
            for src in &c.sources {
                record(&mut tally.sources, src.raw, src.count, src.last);
            }
        }
        tally.add(obs.raw, obs.count, p.count, at.t, at.seen);
        let mut series = Series {
            // Only more occurrences are worth an early refresh (as Ongoing); this one alone is
            // written by the finish.
            written_count: tally.count,
            tally,
            next_heartbeat: 0,
            refresh_step: Series::refresh_step_after(settings, time(ended.first), now),
            name_variant: ended.name_variant,
            timer_due: 0,
            restored: None,
        };
        self.stats.series_reopened += 1;
        if apart {
            // The key's next run has begun: the series is only corrected, Finished at once.
            self.finish(now, at.slot, at.id, series, FinishCause::Quiet);
        } else {
            // Only a series that stays active takes a heartbeat slot (see `pacing`).
            let next = self.pacer.book(now + settings.heartbeat_interval, now);
            series.next_heartbeat = micros(next);
            self.insert_series(now, at.slot, at.id, series);
        }
        true
    }

    /// A candidate's second occurrence: the series starts and is created.
    pub(super) fn promote(
        &mut self,
        now: DateTime<Utc>,
        slot_idx: SlotIdx,
        id: KeyId,
        ns: u32,
        settings: &Settings,
    ) {
        let Some(tally) = self.slots[slot_idx].candidates.remove(ns, &id) else {
            return;
        };
        // The first heartbeat in the last quarter of the interval, so that series created together
        // do not heartbeat together, and at the writer's rate (see `pacing`).
        let interval = settings.heartbeat_interval;
        let next_heartbeat = self
            .pacer
            .book(now + interval - jitter(id, interval / 4), now);
        let refresh_step = Series::refresh_step_after(settings, tally.first(), now);
        let series = Series {
            written_count: tally.count,
            tally,
            next_heartbeat: micros(next_heartbeat),
            refresh_step,
            name_variant: 0,
            timer_due: 0,
            restored: None,
        };
        self.stats.series_started += 1;
        let snap = self.snapshot(id, &series, SeriesState::Ongoing, now);
        self.push_intent(WriteKind::Create, snap, now);
        self.insert_series(now, slot_idx, id, series);
    }

    /// Adds a series to its slot. Beyond `maxActiveSeriesPerNamespace`, its namespace's least
    /// recently active series is finished early; beyond `maxActiveSeries`, that of the namespace
    /// holding the most series, so that a flood in one namespace never gives up a quiet one's.
    pub(super) fn insert_series(
        &mut self,
        now: DateTime<Utc>,
        slot_idx: SlotIdx,
        id: KeyId,
        mut s: Series,
    ) {
        let settings = self.policies.settings(slot_idx);
        let due = s.next_wake(settings);
        let max = settings.max_active_series.max(1);
        let per_ns = settings.max_active_series_per_namespace.max(1);
        let ns = s.tally.ns;
        s.timer_due = self.timers.arm(due, id, ns);
        self.slots[slot_idx].series.insert(id, s);
        while self.slots[slot_idx].series.ns_len(ns) > per_ns {
            let Some((id, evicted)) = self.slots[slot_idx].series.pop_oldest_of(ns) else {
                break;
            };
            self.stats.evicted_by_namespace += 1;
            self.finish(now, slot_idx, id, evicted, FinishCause::Evicted);
        }
        while self.slots[slot_idx].series.len() > max {
            let Some((id, evicted)) = self.slots[slot_idx].series.pop_oldest_of_largest(Some(ns))
            else {
                break;
            };
            self.stats.evicted_by_policy += 1;
            self.finish(now, slot_idx, id, evicted, FinishCause::Evicted);
        }
    }

    /// Writes a series Finished; its key stays dormant with the raw objects it counted.
    pub(super) fn finish(
        &mut self,
        now: DateTime<Utc>,
        slot_idx: SlotIdx,
        id: KeyId,
        s: Series,
        cause: FinishCause,
    ) {
        self.finish_owed(now, now, slot_idx, id, s, cause);
    }

    /// [`Self::finish`] of a write owed since `due` (a quiet finish noticed late).
    pub(super) fn finish_owed(
        &mut self,
        now: DateTime<Utc>,
        due: DateTime<Utc>,
        slot_idx: SlotIdx,
        id: KeyId,
        s: Series,
        cause: FinishCause,
    ) {
        self.stats.series_finished += 1;
        let snap = self.snapshot(id, &s, SeriesState::Finished, now);
        self.keys.remove(s.tally.ns, s.tally.key);
        self.push_intent(WriteKind::Finish(cause), snap, due.min(now));
        let max = self.policies.settings(slot_idx).max_candidates();
        let t = s.tally;
        let dormant = Dormant {
            ns: t.ns,
            last: t.seen,
            ended: Some(Ended {
                first: t.first,
                last: t.last,
                count: t.count,
                name_variant: s.name_variant,
            }),
            sources: t.sources,
            used: 0,
        };
        if let Some(slot) = self.slots.get_mut(slot_idx) {
            slot.make_dormant(id, dormant, max);
        }
    }

    /// Everything a writer needs to write the series as it is now.
    pub(super) fn snapshot(
        &self,
        id: KeyId,
        s: &Series,
        state: SeriesState,
        now: DateTime<Utc>,
    ) -> Snapshot {
        let t = &s.tally;
        Snapshot {
            id,
            namespace: self.namespaces.name(t.ns),
            key: self.key_copy(t.key),
            count: t.count,
            first: t.first(),
            last: t.last(),
            state,
            watermark: self.watermark,
            sources: t.sources.iter().map(|s| s.public()).collect(),
            written_at: now,
            heartbeat: s.next_heartbeat(),
            name_variant: s.name_variant,
        }
    }

    fn key_copy(&self, key: Stored) -> KeyBuf {
        KeyBuf::from_packed(self.keys.get(key))
    }

    fn push_intent(&mut self, kind: WriteKind, series: Snapshot, due: DateTime<Utc>) {
        self.intents.push(Intent { kind, series, due });
    }

    /// The writer's answer that a create or a heartbeat of a series reached the API server
    /// ([`Landed`]). Its next heartbeat was booked as if the object had been written when the write
    /// was asked for; it is booked again as if the write had been asked for when it landed: an
    /// interval later, paced, and no later than the ceiling after the answer. (So a wait in the
    /// writer that every heartbeat meets again adds to each gap: the ceiling's margin below the TTL
    /// must cover it.) Without this, thousands of series started
    /// at once (a first list, a storm) book every first heartbeat from the same instant while their
    /// creates land over minutes in the writer's order (namespaces in turn), so heartbeats that
    /// overflow the calendar fall due together at the ceiling and the last of them reach objects
    /// written long before, past the event TTL. A report changes nothing unless the booking it
    /// names is still the series' own: not once a later heartbeat, a policy change or a reopening
    /// booked another, nor for a series that has finished or an earlier series of its key.
    pub fn written(&mut self, landed: &Landed) {
        if landed.at - landed.asked < TimeDelta::seconds(1) {
            return;
        }
        let Some((ns, slot_idx)) = self.namespaces.lookup(&landed.namespace) else {
            return;
        };
        let settings = self.policies.settings(slot_idx);
        let Some(slot) = self.slots.get_mut(slot_idx) else {
            return;
        };
        let Some(s) = slot.series.peek_mut(ns, &landed.id).filter(|s| {
            s.tally.first() == landed.first && s.next_heartbeat == micros(landed.booked)
        }) else {
            return;
        };
        let interval = settings.heartbeat_interval;
        let due = if landed.created {
            landed.at + interval - jitter(landed.id, interval / 4)
        } else {
            landed.at + interval
        };
        self.pacer.release(landed.booked);
        s.next_heartbeat = micros(self.pacer.book(due, landed.at));
        let next = s.next_wake(settings);
        if micros(next) != s.timer_due {
            s.timer_due = self.timers.arm(next, landed.id, ns);
        }
    }

    /// Another replica wrote the series' object when it decided the state it carried (`at`, its
    /// `writtenAt`): a standby learns the leader's writes this way. The next heartbeat and early
    /// refresh are booked from that write, as the leader booked them, so that a standby's writes
    /// wait behind the leader's and a hand-over writes none early. Only ever later: a write seen
    /// late moves no booking back.
    pub fn written_elsewhere(
        &mut self,
        namespace: &str,
        id: KeyId,
        first: DateTime<Utc>,
        at: DateTime<Utc>,
    ) {
        let Some((ns, slot_idx)) = self.namespaces.lookup(namespace) else {
            return;
        };
        let settings = self.policies.settings(slot_idx);
        let Some(slot) = self.slots.get_mut(slot_idx) else {
            return;
        };
        let Some(s) = slot
            .series
            .peek_mut(ns, &id)
            .filter(|s| s.tally.first() == first)
        else {
            return;
        };
        s.refresh_step = s
            .refresh_step
            .max(Series::refresh_step_after(settings, first, at));
        let due = at + settings.heartbeat_interval;
        if micros(due) > s.next_heartbeat {
            self.pacer.release(s.next_heartbeat());
            s.next_heartbeat = micros(self.pacer.book(due, at));
        }
        let next = s.next_wake(settings);
        if micros(next) != s.timer_due {
            s.timer_due = self.timers.arm(next, id, ns);
        }
    }

    /// Advances the clock of the lifecycle: heartbeats and finishes that are due, and candidates
    /// whose window passed. Ignored while recovering (see `restore`).
    pub fn tick(&mut self, now: DateTime<Utc>) {
        self.tick_with_input(now, now);
    }

    /// [`Engine::tick`] when the input is known complete only up to `input` (earlier than `now`
    /// while the watch may be holding occurrences back, see the controller's `Currency`).
    /// Heartbeats follow `now`: a heartbeat only refreshes what is known, and a later write
    /// corrects it. What an occurrence still in transit would change waits for `input`: a finish,
    /// the expiry of a candidate, and what counts as stale.
    pub fn tick_with_input(&mut self, now: DateTime<Utc>, input: DateTime<Utc>) {
        if self.recovering() {
            return;
        }
        let input = input.min(now);
        self.clock = Some(micros(input));
        self.finishes_held = false;
        self.pacer.forget_before(now);
        self.expire_candidates(input);
        while let Some(timer) = self.timers.pop_due(now) {
            self.fire(now, input, timer.id, timer.ns, timer.due);
        }
    }

    /// A series' timer came due: finish it if it has been quiet for `finishAfter` as far as the
    /// input is known (`input`), else heartbeat or refresh if one is due, and re-arm.
    fn fire(&mut self, now: DateTime<Utc>, input: DateTime<Utc>, id: KeyId, ns: u32, due: Micros) {
        let slot_idx = self.namespaces.slot_of(ns);
        let settings = self.policies.settings(slot_idx).clone();
        let Some(slot) = self.slots.get_mut(slot_idx) else {
            return;
        };
        // Only the series' live timer counts.
        let Some(s) = slot.series.peek_mut(ns, &id).filter(|s| s.timer_due == due) else {
            return;
        };
        let finish_due = s.tally.seen() + settings.finish_after;
        if finish_due <= input {
            if let Some(ended) = slot.series.remove(ns, &id) {
                self.finish_owed(now, finish_due, slot_idx, id, ended, FinishCause::Quiet);
            }
            return;
        }
        let heartbeat_due = s.next_heartbeat();
        let heartbeat = heartbeat_due <= now;
        if heartbeat {
            s.next_heartbeat = micros(self.pacer.book(now + settings.heartbeat_interval, now));
        }
        // An early refresh that fell due is written only with something new to say; a heartbeat
        // covers it. Either way the schedule moves past now.
        let refresh_due = s.next_refresh(&settings).filter(|t| *t <= now);
        let refresh = !heartbeat && refresh_due.is_some() && s.tally.count > s.written_count;
        if heartbeat || refresh_due.is_some() {
            s.refresh_step = Series::refresh_step_after(&settings, s.tally.first(), now);
        }
        if heartbeat || refresh {
            s.written_count = s.tally.count;
        }
        // A finish held back by the input is looked at again on the next tick.
        let finish_check = if finish_due <= now {
            self.finishes_held = true;
            now + TimeDelta::seconds(1)
        } else {
            finish_due
        };
        let mut next = s.next_heartbeat().min(finish_check);
        if let Some(refresh) = s.next_refresh(&settings) {
            next = next.min(refresh);
        }
        s.timer_due = self.timers.arm(next, id, ns);
        let write = match (heartbeat, refresh_due) {
            (true, _) => Some((WriteKind::Heartbeat, heartbeat_due)),
            (false, Some(due)) if refresh => Some((WriteKind::Refresh, due)),
            _ => None,
        };
        if let Some((kind, due)) = write
            && let Some(s) = self.slots[slot_idx].series.peek(ns, &id)
        {
            let snap = self.snapshot(id, s, SeriesState::Ongoing, now);
            self.push_intent(kind, snap, due);
        }
    }
}

/// A deterministic per-key offset in `[0, span)`, so that series do not act in lockstep.
pub(super) fn jitter(id: KeyId, span: TimeDelta) -> TimeDelta {
    let ms = span.num_milliseconds();
    if ms <= 0 {
        return TimeDelta::zero();
    }
    TimeDelta::milliseconds(((id.get() as u64) % ms as u64) as i64)
}
