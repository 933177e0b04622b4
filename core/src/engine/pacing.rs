//! When heartbeats fall due: a calendar of one-second slots, each holding at most the writer's
//! heartbeat share of a second.
//!
//! A heartbeat goes to the first second at or after the time it would fall due that still has room,
//! but never later than `ceiling` after the series' last write (then it takes that second even when
//! full). So a burst of series created together, or more active series than `heartbeatInterval`
//! allows at the writer's rate, spaces its heartbeats out instead of queueing them beyond what the
//! writer can send, and no object goes longer than the ceiling (below the API server's event TTL)
//! without a write. With few series every heartbeat keeps the time it asked for.
//!
//! Full seconds are kept as merged runs, so finding room is one lookup however far the calendar is
//! booked. A reservation whose series finishes first is simply left to pass: slots are only ever
//! over-booked on the safe side. Seconds in the past are forgotten at every tick.

use chrono::{DateTime, TimeDelta, Utc};
use std::collections::BTreeMap;

pub(super) struct Pacer {
    /// Heartbeats per second (`None`: unlimited, every heartbeat keeps its time).
    per_second: Option<u32>,
    ceiling: TimeDelta,
    /// Heartbeats booked per second (unix seconds), for seconds not yet full.
    booked: BTreeMap<i64, u32>,
    /// Runs of full seconds, first -> last (inclusive); adjacent runs are merged.
    full: BTreeMap<i64, i64>,
    /// Heartbeats booked beyond the share of a full second (at their ceiling), per second.
    over: BTreeMap<i64, u32>,
}

impl Pacer {
    /// `rate` heartbeats per second (rounded down, at least 1; infinite or not a number: unlimited).
    pub(super) fn new(rate: f64, ceiling: TimeDelta) -> Pacer {
        let per_second = (rate.is_finite() && rate > 0.0).then(|| (rate as u32).max(1));
        Pacer {
            per_second,
            ceiling,
            booked: BTreeMap::new(),
            full: BTreeMap::new(),
            over: BTreeMap::new(),
        }
    }

    /// Books the heartbeat that would fall due at `due` for a series last written at `written`.
    /// Returns when it falls due: `due` itself if its second has room, else the start of the first
    /// second with room, but never later than `written + ceiling`, not even when `due` is (a
    /// `heartbeatInterval` longer than the event TTL allows).
    pub(super) fn book(&mut self, due: DateTime<Utc>, written: DateTime<Utc>) -> DateTime<Utc> {
        let latest = written + self.ceiling;
        let due = due.min(latest);
        let Some(cap) = self.per_second else {
            return due;
        };
        let latest = latest.timestamp();
        let first = due.timestamp();
        let mut second = first;
        if let Some((_, &end)) = self.full.range(..=second).next_back()
            && end >= second
        {
            second = end + 1;
        }
        if second > latest {
            // Booked up to the ceiling: this one may not wait longer, it goes over.
            second = latest;
        }
        if self.is_full(second) {
            let n = self.over.entry(second).or_insert(0);
            *n = n.saturating_add(1);
        } else {
            let n = self.booked.entry(second).or_insert(0);
            *n = n.saturating_add(1);
            if *n >= cap {
                self.booked.remove(&second);
                self.mark_full(second);
            }
        }
        if second == first {
            due
        } else {
            DateTime::from_timestamp(second, 0).unwrap_or(due)
        }
    }

    /// Gives back one heartbeat that [`Pacer::book`] returned `at` for (a series whose heartbeat
    /// moved, see [`super::Engine::written`]), so that its place can be booked again: first from
    /// what a ceiling booked over the share of that second, then from the share.
    pub(super) fn release(&mut self, at: DateTime<Utc>) {
        let Some(cap) = self.per_second else {
            return;
        };
        let second = at.timestamp();
        if let Some(n) = self.over.get_mut(&second) {
            *n -= 1;
            if *n == 0 {
                self.over.remove(&second);
            }
            return;
        }
        if let Some(n) = self.booked.get_mut(&second) {
            *n -= 1;
            if *n == 0 {
                self.booked.remove(&second);
            }
            return;
        }
        let Some((&start, &end)) = self.full.range(..=second).next_back() else {
            return;
        };
        if end < second {
            return; // not booked (or already forgotten)
        }
        self.full.remove(&start);
        if start < second {
            self.full.insert(start, second - 1);
        }
        if second < end {
            self.full.insert(second + 1, end);
        }
        if cap > 1 {
            self.booked.insert(second, cap - 1);
        }
    }

    fn is_full(&self, second: i64) -> bool {
        self.full
            .range(..=second)
            .next_back()
            .is_some_and(|(_, &end)| end >= second)
    }

    fn mark_full(&mut self, second: i64) {
        let mut start = second;
        let mut end = second;
        if let Some((&s, &e)) = self.full.range(..second).next_back()
            && e == second - 1
        {
            start = s;
        }
        if let Some(e) = self.full.remove(&(second + 1)) {
            end = e;
        }
        self.full.insert(start, end);
    }

    /// Forgets the seconds before `now`.
    pub(super) fn forget_before(&mut self, now: DateTime<Utc>) {
        let now = now.timestamp();
        self.booked = self.booked.split_off(&now);
        self.over = self.over.split_off(&now);
        // A run that started before now and goes on past it is kept, from now.
        let mut kept = self.full.split_off(&now);
        if let Some((_, &end)) = self.full.iter().next_back()
            && end >= now
        {
            kept.insert(now, end);
        }
        self.full = kept;
    }

    /// Seconds tracked (booked or in full runs' bookkeeping): bounded by the ceiling's length.
    #[cfg(test)]
    fn tracked(&self) -> usize {
        self.booked.len() + self.full.len() + self.over.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000 + s, 0).unwrap()
    }

    fn offset(t: DateTime<Utc>) -> i64 {
        t.timestamp() - 1_800_000_000
    }

    #[test]
    fn a_burst_is_spread_at_the_rate_and_few_keep_their_time() {
        let mut p = Pacer::new(3.0, TimeDelta::seconds(100));
        let due = at(10) + TimeDelta::milliseconds(250);
        // The first three keep their exact time, the next ones move to the next seconds, 3 each.
        let got: Vec<_> = (0..9).map(|_| p.book(due, at(0))).collect();
        assert_eq!(got[..3], [due, due, due]);
        assert_eq!(
            got[3..].iter().map(|t| offset(*t)).collect::<Vec<_>>(),
            [11, 11, 11, 12, 12, 12]
        );
        // A heartbeat due in a full run jumps over all of it at once.
        assert_eq!(offset(p.book(at(10), at(0))), 13);
    }

    #[test]
    fn the_ceiling_beats_the_rate() {
        let mut p = Pacer::new(1.0, TimeDelta::seconds(5));
        let got: Vec<_> = (0..8).map(|_| offset(p.book(at(0), at(0)))).collect();
        // Seconds 0..=5 hold one each; later ones may not wait past written + 5 s.
        assert_eq!(got, [0, 1, 2, 3, 4, 5, 5, 5]);
    }

    #[test]
    fn the_ceiling_caps_an_interval_longer_than_itself() {
        // An interval of 2 h against a ceiling of 45 min: the heartbeat comes at the ceiling,
        // paced or not.
        for rate in [f64::INFINITY, 10.0] {
            let mut p = Pacer::new(rate, TimeDelta::minutes(45));
            let booked = p.book(at(0) + TimeDelta::hours(2), at(0));
            assert_eq!(booked, at(0) + TimeDelta::minutes(45), "rate {rate}");
        }
    }

    #[test]
    fn runs_merge_and_the_past_is_forgotten() {
        let mut p = Pacer::new(1.0, TimeDelta::seconds(1000));
        p.book(at(5), at(0));
        p.book(at(3), at(0));
        p.book(at(4), at(0)); // 3, 4, 5 full: one run
        assert_eq!(offset(p.book(at(3), at(0))), 6);
        p.forget_before(at(4));
        assert_eq!(offset(p.book(at(4), at(0))), 7, "4..=6 is still full");
        p.forget_before(at(100));
        assert_eq!(p.tracked(), 0);
        assert_eq!(offset(p.book(at(100), at(0))), 100);
    }

    #[test]
    fn a_released_booking_makes_room_in_its_second_only() {
        let mut p = Pacer::new(2.0, TimeDelta::seconds(1000));
        for _ in 0..6 {
            p.book(at(10), at(0)); // 10, 11, 12 full: one run
        }
        p.release(at(11));
        assert_eq!(offset(p.book(at(10), at(0))), 11, "the freed place in 11");
        assert_eq!(offset(p.book(at(10), at(0))), 13, "11 is full again");
        p.release(at(13)); // booked once: the second is empty again
        p.release(at(13)); // nothing left to give back
        p.release(at(500)); // never booked
        assert_eq!(offset(p.book(at(13), at(0))), 13);
        assert_eq!(offset(p.book(at(13), at(0))), 13);
        assert_eq!(offset(p.book(at(13), at(0))), 14);
    }

    #[test]
    fn what_a_ceiling_booked_over_the_share_is_given_back_before_the_share() {
        let mut p = Pacer::new(2.0, TimeDelta::seconds(1));
        let got: Vec<_> = (0..6).map(|_| offset(p.book(at(0), at(0)))).collect();
        assert_eq!(got, [0, 0, 1, 1, 1, 1], "two over the share of second 1");
        p.release(at(1));
        p.release(at(1));
        // Second 1 holds exactly its share: full, a later heartbeat with room to wait passes it.
        assert_eq!(offset(p.book(at(1), at(100))), 2);
        p.release(at(1)); // one of the share: one place in second 1
        assert_eq!(offset(p.book(at(1), at(100))), 1, "the place given back");
        assert_eq!(offset(p.book(at(1), at(100))), 2, "and only one");
    }

    #[test]
    fn unlimited_keeps_every_time() {
        let mut p = Pacer::new(f64::INFINITY, TimeDelta::seconds(10));
        for _ in 0..1000 {
            assert_eq!(p.book(at(7), at(0)), at(7));
        }
        assert_eq!(p.tracked(), 0);
    }
}
