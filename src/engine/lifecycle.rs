//! The life of a series: created at its key's second occurrence, extended by later ones, written
//! again at every heartbeat, and finished when it goes quiet, when a gap ends it, or when it is
//! evicted by `maxActiveSeries`. [`Engine::tick`] drives the timed part.

use super::storage::{Micros, Series, micros};
use super::{Engine, Landing};
use crate::config::{Settings, SlotIdx};
use crate::intent::{FinishCause, Intent, SeriesState, Snapshot, WriteKind};
use crate::key::store::Stored;
use crate::key::{KeyBuf, KeyId, Observation};
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
        let Some(series) = slot.series.get(&id) else {
            return false;
        };
        if t <= series.tally.last.saturating_add(at.window) || (recovering && series.restored) {
            series.tally.add(obs.raw, obs.count, delta, t);
            return true;
        }
        if let Some(ended) = slot.series.remove(&id) {
            self.finish(now, id, ended, FinishCause::Gap);
        }
        false
    }

    /// A candidate's second occurrence: the series starts and is created.
    pub(super) fn promote(
        &mut self,
        now: DateTime<Utc>,
        slot_idx: SlotIdx,
        id: KeyId,
        settings: &Settings,
    ) {
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
    pub(super) fn insert_series(
        &mut self,
        now: DateTime<Utc>,
        slot_idx: SlotIdx,
        id: KeyId,
        mut s: Series,
    ) {
        let settings = self.policies.settings(slot_idx);
        let due = s
            .next_heartbeat()
            .min(s.tally.last() + settings.finish_after);
        let max = settings.max_active_series.max(1);
        s.timer_due = self.timers.arm(due, id);
        self.slots[slot_idx].series.insert(id, s);
        while self.slots[slot_idx].series.len() > max {
            let Some((id, evicted)) = self.slots[slot_idx].series.pop_oldest() else {
                break;
            };
            self.stats.series_evicted += 1;
            self.finish(now, id, evicted, FinishCause::Evicted);
        }
    }

    pub(super) fn finish(&mut self, now: DateTime<Utc>, id: KeyId, s: Series, cause: FinishCause) {
        self.stats.series_finished += 1;
        let snap = self.snapshot(id, &s, SeriesState::Finished, now);
        self.keys.remove(s.tally.key);
        self.stored_names.remove(&(id, s.tally.first));
        self.push_intent(WriteKind::Finish(cause), snap);
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
            stored_name: self.stored_names.get(&(id, t.first)).cloned(),
            namespace: self.namespaces.name(t.ns),
            key: self.key_copy(t.key),
            count: t.count,
            first: t.first(),
            last: t.last(),
            state,
            watermark: self.watermark,
            sources: t.sources.iter().map(|s| s.public()).collect(),
            written_at: now,
        }
    }

    fn key_copy(&self, key: Stored) -> KeyBuf {
        KeyBuf::from_packed(self.keys.get(key))
    }

    fn push_intent(&mut self, kind: WriteKind, series: Snapshot) {
        self.intents.push(Intent { kind, series });
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
        self.expire_candidates(input);
        while let Some(timer) = self.timers.pop_due(now) {
            self.fire(now, input, timer.id, timer.due);
        }
    }

    /// A series' timer came due: finish it if it has been quiet for `finishAfter` as far as the
    /// input is known (`input`), else heartbeat if one is due, and re-arm.
    fn fire(&mut self, now: DateTime<Utc>, input: DateTime<Utc>, id: KeyId, due: Micros) {
        // The series' slot, if the timer is still its live one.
        let Some(slot_idx) = self
            .slots
            .iter()
            .position(|s| s.series.peek(&id).is_some_and(|s| s.timer_due == due))
        else {
            return;
        };
        let settings = self.policies.settings(slot_idx).clone();
        let slot = &mut self.slots[slot_idx];
        let Some(s) = slot.series.peek_mut(&id) else {
            return;
        };
        let finish_due = s.tally.last() + settings.finish_after;
        if finish_due <= input {
            if let Some(ended) = slot.series.remove(&id) {
                self.finish(now, id, ended, FinishCause::Quiet);
            }
            return;
        }
        let heartbeat = s.next_heartbeat() <= now;
        if heartbeat {
            s.next_heartbeat = micros(now + settings.heartbeat_interval);
        }
        // A finish held back by the input is looked at again on the next tick.
        let finish_check = if finish_due <= now {
            now + TimeDelta::seconds(1)
        } else {
            finish_due
        };
        let next = s.next_heartbeat().min(finish_check);
        s.timer_due = self.timers.arm(next, id);
        if heartbeat && let Some(s) = self.slots[slot_idx].series.peek(&id) {
            let snap = self.snapshot(id, s, SeriesState::Ongoing, now);
            self.push_intent(WriteKind::Heartbeat, snap);
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
