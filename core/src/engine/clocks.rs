//! Clocks (see the engine's module docs): when an occurrence happened by the emitter's clock and
//! when it was seen by the operator's, for watched and for listed raw events alike.

use super::storage::{Micros, micros};
use super::{Engine, Landing};
use crate::key::Observation;
use chrono::{DateTime, Utc};

impl Engine {
    /// Whether an occurrence that extends no series came too late to start one: seen more than a
    /// window before the lifecycle clock (or `now`, before the first tick).
    pub(super) fn is_stale(&self, now: DateTime<Utc>, at: &Landing) -> bool {
        let reference = self.clock.map_or(micros(now), |c| c.min(micros(now)));
        at.seen < reference.saturating_sub(at.window)
    }

    /// When an occurrence whose latest timestamp is `last`, arriving at `now`, happened (`t`, on
    /// the emitter's clock) and was seen (on the operator's), and how far `t` was moved from `last`
    /// (to move the first occurrence by as much).
    ///
    /// A watched occurrence is timed by its timestamp within the clock tolerance of `now`, by its
    /// arrival beyond. It is seen at that time, but no earlier than the lifecycle clock (the input
    /// was complete up to there, so a newer occurrence timed earlier comes from a clock that is
    /// behind) and no later than `now`.
    ///
    /// A listed one (the replay of a restart, or a relist after 410 Gone) whose timestamp lies
    /// within the tolerance of when the API server last wrote it (`written`, the server's clock, no
    /// later than `now`) is timed by its timestamp and seen at that write, as the watch saw it
    /// then: a restart agrees with the run it replaces when an emitter is minutes behind or its
    /// write was held up. Any other listed one happened when its timestamp says, unless that is
    /// beyond the tolerance in the future: a list holds events of every age, and an old one is old,
    /// not skewed. (Timed by its arrival, each raw event the engine had forgotten, 10^6 stored
    /// events against a raw-count table of 262,144, would count its occurrences of hours ago as
    /// happening now: series that never looped now, evicting the real ones.) So an emitter more
    /// than the tolerance behind, counted at its arrival while watched, is old to a list.
    pub(super) fn timing(&self, now: DateTime<Utc>, obs: &Observation) -> (Micros, Micros, Micros) {
        let (now, last) = (micros(now), micros(obs.last));
        let tolerance = self
            .config
            .clock_tolerance
            .num_microseconds()
            .unwrap_or(i64::MAX)
            .unsigned_abs();
        let listed = self.recovering() || self.relisting;
        let written = obs.written.map(|w| micros(w).min(now));
        let (t, seen) = match written {
            Some(arrival) if listed && last.abs_diff(arrival) <= tolerance => (last, arrival),
            _ if listed => {
                let t = if last > now && last.abs_diff(now) > tolerance {
                    now
                } else {
                    last
                };
                (t, t.min(now))
            }
            _ => {
                let t = if last.abs_diff(now) <= tolerance {
                    last
                } else {
                    now
                };
                (t, t.max(self.clock.unwrap_or(now)).min(now))
            }
        };
        (t, seen, t.saturating_sub(last))
    }
}
