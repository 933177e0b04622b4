//! The leader election's decisions, with no I/O and the monotonic clock injected: what to write to
//! the Lease after reading it, and whether this replica may write series right now (the fence).
//!
//! The protocol is client-go's `leaderelection` on a coordination.k8s.io/v1 Lease:
//! - A Lease held by another replica is respected until its election record (holder, duration,
//!   acquire and renew times, transitions) has not changed for the lease duration, timed on *this*
//!   replica's monotonic clock from when it saw the change, so wall-clock skew between replicas
//!   cannot shorten it. A change of anything else (labels, annotations, hence the resourceVersion)
//!   is no renewal: a tool that edits a dead leader's Lease cannot keep it alive. The longer of the holder's advertised duration and our own
//!   counts, so a rolling change of `--lease-duration` cannot shorten it either.
//! - A free, expired or own Lease is taken or renewed by an update that carries the resourceVersion
//!   read, so two replicas racing for it cannot both win (the API server answers 409 to one).
//!
//! - A replica that is not warm yet (its engine still being rebuilt) leaves a free Lease to a warm
//!   one for a lease duration: a Pod that starts during a rollout would otherwise win the race for
//!   the Lease the old leader just released and stop writes for its whole restore. A Lease still
//!   free after that has no warm replica to go to, and is taken cold.
//!
//! The fence is stricter than client-go's: a leader's right to write ends `renew_deadline` after the
//! *start* of its last successful renewal (a standby cannot have seen that renewal any earlier), and
//! any request it makes must be over `lease_duration` minus a margin after that start, the earliest
//! moment a standby could take the Lease. A leader that sees another holder is fenced at once.
//!
//! | role | input | next |
//! |---|---|---|
//! | any | read: no Lease, first seen missing a lease duration ago or more | `Decision::Create` |
//! | any | read: no Lease, missing for less than a lease duration | `Decision::Wait` |
//! | any | read: another holder, its record changed less than the lease duration ago | `Decision::Wait` |
//! | any | read: released (no holder, 1 s), expired, or ours (written by this process) | `Decision::Update` (with the resourceVersion read) |
//! | not warm | read: free (released, expired, missing long enough) for less than a lease duration | `Decision::Wait`: a warm standby takes it |
//! | standby | read: our identity, written by an earlier process of it (a restarted container) | waited out like another holder's |
//! | leading | read: another holder | fenced at once |
//! | any | our create or update succeeded, sent at `t` | leading until `t + renew_deadline` |
//! | leading | no successful renewal by `t + renew_deadline` | fenced |
//! | leading | a request of ours was abandoned (no answer within its deadline) | on shutdown, the Lease is not released but left to expire |
//!
//! A renewal round (a leader renews from the record it last wrote, and reads the Lease first only
//! after a conflict) may take until the renew deadline, as in client-go: a control plane that
//! answers in seconds keeps its leader. The fence is unaffected, because it is timed from the
//! *start* of the last renewal that succeeded: with the defaults (lease 15 s, renew deadline 10 s,
//! margin 1 s) a leader writes until at most `t + 10 s`, every request it makes is over by
//! `t + 14 s`, and no standby can take the Lease before `t + 15 s`.

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use std::time::{Duration, Instant};

/// client-go's meanings: a standby waits `lease_duration` after the last change it saw; a leader
/// gives up when it has not renewed for `renew_deadline`; every replica tries every `retry_period`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timings {
    pub lease_duration: Duration,
    pub renew_deadline: Duration,
    pub retry_period: Duration,
}

/// Timings that break client-go's rules, named by their flags.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TimingsError {
    #[error("--lease-duration ({:?}) must be longer than --renew-deadline ({:?})", .0.lease_duration, .0.renew_deadline)]
    LeaseNotLonger(Timings),
    #[error("--renew-deadline ({:?}) must be longer than 1.2 x --retry-period ({:?})", .0.renew_deadline, .0.retry_period)]
    RenewNotLonger(Timings),
    #[error("--lease-duration ({:?}) must be whole seconds", .0.lease_duration)]
    Fraction(Timings),
    #[error("--retry-period must be positive")]
    NoRetry,
}

impl Default for Timings {
    fn default() -> Self {
        Timings {
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }
}

impl Timings {
    /// client-go's rules: the lease outlasts the renew deadline, which outlasts a jittered retry.
    pub fn validate(&self) -> Result<(), TimingsError> {
        let t = *self;
        if t.lease_duration <= t.renew_deadline {
            return Err(TimingsError::LeaseNotLonger(t));
        }
        if t.renew_deadline.as_secs_f64() <= 1.2 * t.retry_period.as_secs_f64() {
            return Err(TimingsError::RenewNotLonger(t));
        }
        if t.lease_duration.subsec_nanos() != 0 {
            // The Lease holds whole seconds: a fraction would shorten the margin a standby keeps.
            return Err(TimingsError::Fraction(t));
        }
        if t.retry_period.is_zero() {
            return Err(TimingsError::NoRetry);
        }
        Ok(())
    }

    /// Kept between a leader's last request and the earliest takeover: clock rates and scheduling
    /// differ a little between replicas. At most a second, at most half the gap between the lease
    /// duration and the renew deadline.
    pub fn margin(&self) -> Duration {
        Duration::from_secs(1).min(self.lease_duration.saturating_sub(self.renew_deadline) / 2)
    }
}

/// What the Lease says, as far as the election cares.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    pub holder: String,
    pub lease_duration_secs: i32,
    pub acquire_time: Option<Timestamp>,
    pub renew_time: Option<Timestamp>,
    pub transitions: i32,
}

impl Record {
    pub fn of(lease: &Lease) -> Record {
        let spec = lease.spec.clone().unwrap_or_default();
        Record {
            holder: spec.holder_identity.unwrap_or_default(),
            lease_duration_secs: spec.lease_duration_seconds.unwrap_or(0),
            acquire_time: spec.acquire_time.map(|t| t.0),
            renew_time: spec.renew_time.map(|t| t.0),
            transitions: spec.lease_transitions.unwrap_or(0),
        }
    }

    pub fn spec(&self) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(self.holder.clone()),
            lease_duration_seconds: Some(self.lease_duration_secs),
            acquire_time: self.acquire_time.map(MicroTime),
            renew_time: self.renew_time.map(MicroTime),
            lease_transitions: Some(self.transitions),
            ..LeaseSpec::default()
        }
    }
}

/// What to do after a read of the Lease.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// There is no Lease: create it, held by us.
    Create(Record),
    /// Take or renew it: replace it with this record, if it is still at `resource_version`.
    Update {
        record: Record,
        resource_version: String,
    },
    /// Another replica holds it.
    Wait,
}

/// Whether this replica may write series now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fence {
    /// Yes; every request must be over by `until`.
    Open { until: Instant },
    /// No: not leading, or the right to write has lapsed.
    Closed,
}

/// One replica's view of the election.
#[derive(Clone, Debug)]
pub struct Elector {
    identity: String,
    timings: Timings,
    /// The Lease last read (its resourceVersion and record), and when it was first seen that way.
    observed: Option<(String, Record, Instant)>,
    /// The start of our last successful create or update of the Lease, while we lead.
    renewed: Option<Instant>,
    /// Since when the Lease has been seen missing: a Lease deleted under a leader is waited out
    /// like one it still holds.
    absent_since: Option<Instant>,
    /// A request of this replica was given up without an answer while it led: the server may still
    /// carry it out, so the Lease must not be handed over early.
    abandoned: bool,
    /// The engine is current (restored): this replica may take a free Lease at once.
    warm: bool,
}

impl Elector {
    pub fn new(identity: impl Into<String>, timings: Timings) -> Elector {
        Elector {
            identity: identity.into(),
            timings,
            observed: None,
            renewed: None,
            absent_since: None,
            abandoned: false,
            warm: true,
        }
    }

    /// Whether this replica's engine is current. One that is not leaves a free Lease to a warm
    /// standby for a lease duration (see the module doc).
    pub fn set_warm(&mut self, warm: bool) {
        self.warm = warm;
    }

    pub fn timings(&self) -> Timings {
        self.timings
    }

    /// A read of the Lease answered (`None`: there is none) at `now`.
    pub fn observe(&mut self, now: Instant, lease: Option<(String, Record)>) {
        let Some((rv, record)) = lease else {
            self.observed = None;
            self.renewed = None;
            self.absent_since.get_or_insert(now);
            return;
        };
        self.absent_since = None;
        if record.holder != self.identity {
            // Someone else holds it: whatever we believed, we do not lead.
            self.renewed = None;
        }
        match &mut self.observed {
            // The same election record: no renewal, whatever else changed. The resourceVersion is
            // kept for the next update.
            Some((seen_rv, seen, _)) if *seen == record => *seen_rv = rv,
            _ => self.observed = Some((rv, record, now)),
        }
    }

    /// What to write after the last read, at monotonic `now` and wall-clock `wall`.
    pub fn decide(&self, now: Instant, wall: Timestamp) -> Decision {
        let ours = |acquire_time, transitions| Record {
            holder: self.identity.clone(),
            lease_duration_secs: i32::try_from(self.timings.lease_duration.as_secs().max(1))
                .unwrap_or(i32::MAX),
            acquire_time,
            renew_time: Some(wall),
            transitions,
        };
        // How long a free Lease is left to a warm replica.
        let patience = if self.warm {
            Duration::ZERO
        } else {
            self.timings.lease_duration
        };
        let Some((rv, record, seen)) = &self.observed else {
            // Missing: never created, or deleted under a leader that may still be writing. Only a
            // lease duration after we first saw it missing can no leader be left.
            if self
                .absent_since
                .is_some_and(|t| now < t + self.timings.lease_duration + patience)
            {
                return Decision::Wait;
            }
            return Decision::Create(ours(Some(wall), 0));
        };
        // Ours only if this process wrote it: a Lease that names our identity but was written by an
        // earlier process of it (a restarted container keeps its pod's name) is waited out like any
        // other holder's, since that process's last requests may still be on their way.
        let mine = record.holder == self.identity && self.renewed.is_some();
        // Released by its holder (no holder, a one-second lease, as `release` writes it): free now.
        let released = record.holder.is_empty() && record.lease_duration_secs <= 1;
        if !mine {
            let advertised = Duration::from_secs(record.lease_duration_secs.max(0) as u64);
            let valid_for = if released {
                Duration::ZERO
            } else {
                advertised.max(self.timings.lease_duration)
            };
            if now < *seen + valid_for + patience {
                return Decision::Wait;
            }
        }
        let record = if mine {
            ours(record.acquire_time, record.transitions)
        } else {
            ours(Some(wall), record.transitions.saturating_add(1))
        };
        Decision::Update {
            record,
            resource_version: rv.clone(),
        }
    }

    /// Our create or update, sent at `sent`, succeeded; the Lease is now at `rv` with `record`.
    pub fn written(&mut self, sent: Instant, rv: String, record: Record) {
        self.observed = Some((rv, record, sent));
        self.renewed = Some(sent);
    }

    /// The Lease as last seen (resourceVersion and record), if we hold it: what a release replaces.
    pub fn held(&self) -> Option<(&str, &Record)> {
        match &self.observed {
            Some((rv, record, _)) if record.holder == self.identity => Some((rv, record)),
            _ => None,
        }
    }

    /// A request made while leading was given up without an answer (a timeout, a broken
    /// connection, or cut at shutdown).
    pub fn abandoned(&mut self) {
        self.abandoned = true;
    }

    /// Whether the Lease may be released on shutdown at `now`: this replica leads and every request
    /// it made was answered. Otherwise it is left to expire, so that a request still on its way
    /// cannot land after the next leader's first write.
    pub fn may_release(&self, now: Instant) -> bool {
        self.leading(now) && !self.abandoned && self.held().is_some()
    }

    /// The deadline of a round of Lease requests starting at `now`: the request timeout, and for a
    /// leader no later than its renew deadline (it is fenced then anyway).
    pub fn round_deadline(&self, now: Instant, request_timeout: Duration) -> Instant {
        let deadline = now + request_timeout;
        match self.renew_by() {
            Some(by) if self.leading(now) => deadline.min(by),
            _ => deadline,
        }
    }

    /// Whether a leader can renew from the record it last wrote, without reading the Lease first.
    pub fn renews_blind(&self, now: Instant) -> bool {
        self.leading(now) && self.held().is_some()
    }

    /// Whether this replica may write at `now`.
    pub fn fence(&self, now: Instant) -> Fence {
        match self.renewed {
            Some(t) if now < t + self.timings.renew_deadline => Fence::Open {
                until: t + self.timings.lease_duration - self.timings.margin(),
            },
            _ => Fence::Closed,
        }
    }

    /// Whether this replica led at some point and has not been fenced since its last renewal
    /// (`true` also while a renewal is merely late, within the renew deadline).
    pub fn leading(&self, now: Instant) -> bool {
        matches!(self.fence(now), Fence::Open { .. })
    }

    /// The latest moment the current leadership may be renewed: a renewal request must be over by
    /// then, or the leader is fenced anyway.
    pub fn renew_by(&self) -> Option<Instant> {
        self.renewed.map(|t| t + self.timings.renew_deadline)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    fn record(holder: &str, duration: i32) -> Record {
        Record {
            holder: holder.into(),
            lease_duration_secs: duration,
            acquire_time: None,
            renew_time: None,
            transitions: 3,
        }
    }

    #[test]
    fn client_go_defaults_and_rules() {
        let t = Timings::default();
        assert_eq!(
            (t.lease_duration, t.renew_deadline, t.retry_period),
            (secs(15), secs(10), secs(2))
        );
        assert!(t.validate().is_ok());
        assert_eq!(t.margin(), secs(1));
        let bad = Timings {
            lease_duration: secs(10),
            ..t
        };
        assert!(
            bad.validate()
                .unwrap_err()
                .to_string()
                .contains("--lease-duration")
        );
        let bad = Timings {
            retry_period: secs(9),
            ..t
        };
        assert!(
            bad.validate()
                .unwrap_err()
                .to_string()
                .contains("--retry-period")
        );
    }

    #[test]
    fn creates_a_missing_lease_and_leads_from_the_start_of_the_write() {
        let t0 = Instant::now();
        let wall = Timestamp::now();
        let mut e = Elector::new("a", Timings::default());
        e.observe(t0, None);
        // A missing Lease may have been deleted under a leader: waited out for a lease duration.
        assert_eq!(e.decide(t0 + secs(14), wall), Decision::Wait);
        e.observe(t0 + secs(14), None);
        let Decision::Create(r) = e.decide(t0 + secs(15), wall) else {
            panic!()
        };
        assert_eq!((r.holder.as_str(), r.lease_duration_secs), ("a", 15));
        assert_eq!(e.fence(t0), Fence::Closed, "not before the write succeeded");
        e.written(t0, "1".into(), r);
        assert_eq!(
            e.fence(t0 + secs(3)),
            Fence::Open {
                until: t0 + secs(14)
            }
        );
    }

    #[test]
    fn another_holder_is_respected_for_the_lease_duration_on_our_own_clock() {
        let t0 = Instant::now();
        let wall = Timestamp::now();
        let mut e = Elector::new("b", Timings::default());
        e.observe(t0, Some(("5".into(), record("a", 15))));
        assert_eq!(e.decide(t0 + secs(14), wall), Decision::Wait);
        // Seen again unchanged: the clock keeps running from the first sighting.
        e.observe(t0 + secs(10), Some(("5".into(), record("a", 15))));
        let Decision::Update {
            record: r,
            resource_version,
        } = e.decide(t0 + secs(15), wall)
        else {
            panic!("expired")
        };
        assert_eq!((r.holder.as_str(), r.transitions), ("b", 4));
        assert_eq!(resource_version, "5", "the update is conditional");
        // A renewal by the holder (a new renew time) restarts the wait.
        let mut renewed = record("a", 15);
        renewed.renew_time = Some(wall);
        e.observe(t0 + secs(15), Some(("6".into(), renewed)));
        assert_eq!(e.decide(t0 + secs(29), wall), Decision::Wait);
        // A holder advertising a longer lease is waited for that long.
        e.observe(t0 + secs(30), Some(("7".into(), record("a", 60))));
        assert_eq!(e.decide(t0 + secs(89), wall), Decision::Wait);
        assert!(matches!(
            e.decide(t0 + secs(90), wall),
            Decision::Update { .. }
        ));
        // A released Lease (no holder, one second) is taken at once.
        e.observe(t0 + secs(91), Some(("8".into(), record("", 1))));
        assert!(matches!(
            e.decide(t0 + secs(91), wall),
            Decision::Update { .. }
        ));
        // A holder blanked by hand is no release: its leader may still write.
        e.observe(t0 + secs(92), Some(("9".into(), record("", 15))));
        assert_eq!(e.decide(t0 + secs(106), wall), Decision::Wait);
    }

    /// A Pod that starts during a rollout sees the old leader's released Lease before the warm
    /// standby's next try: it leaves it to that standby, and takes it only when nobody did.
    #[test]
    fn a_replica_not_yet_warm_leaves_a_free_lease_to_a_warm_one_for_a_lease_duration() {
        let t0 = Instant::now();
        let wall = Timestamp::now();
        let mut cold = Elector::new("new", Timings::default());
        cold.set_warm(false);
        cold.observe(t0, Some(("8".into(), record("", 1))));
        assert_eq!(cold.decide(t0 + secs(14), wall), Decision::Wait);
        assert!(matches!(
            cold.decide(t0 + secs(15), wall),
            Decision::Update { .. }
        ));
        // Warm now: taken at once.
        cold.set_warm(true);
        assert!(matches!(cold.decide(t0, wall), Decision::Update { .. }));
        // An expired holder: a lease duration, then another.
        cold.set_warm(false);
        cold.observe(t0 + secs(20), Some(("9".into(), record("old", 15))));
        assert_eq!(cold.decide(t0 + secs(49), wall), Decision::Wait);
        assert!(matches!(
            cold.decide(t0 + secs(50), wall),
            Decision::Update { .. }
        ));
        // No Lease at all: the same.
        let mut first = Elector::new("a", Timings::default());
        first.set_warm(false);
        first.observe(t0, None);
        assert_eq!(first.decide(t0 + secs(29), wall), Decision::Wait);
        assert!(matches!(
            first.decide(t0 + secs(30), wall),
            Decision::Create(_)
        ));
    }

    #[test]
    fn edits_that_leave_the_election_record_alone_do_not_keep_a_dead_holder_alive() {
        let t0 = Instant::now();
        let wall = Timestamp::now();
        let mut e = Elector::new("b", Timings::default());
        e.observe(t0, Some(("5".into(), record("a", 15))));
        // Labels or annotations rewritten every second by another client: new resourceVersions,
        // the same record.
        for i in 1..=15 {
            e.observe(t0 + secs(i), Some((format!("{}", 5 + i), record("a", 15))));
        }
        let Decision::Update {
            resource_version, ..
        } = e.decide(t0 + secs(15), wall)
        else {
            panic!("the holder's record has not changed for a lease duration: it is dead")
        };
        assert_eq!(
            resource_version, "20",
            "the update carries the latest resourceVersion"
        );
    }

    #[test]
    fn a_lease_of_our_identity_from_an_earlier_process_is_waited_out() {
        let t0 = Instant::now();
        let wall = Timestamp::now();
        // A restarted container: same identity, a fresh process that wrote nothing yet.
        let mut e = Elector::new("a", Timings::default());
        e.observe(t0, Some(("9".into(), record("a", 15))));
        assert_eq!(
            e.decide(t0 + secs(14), wall),
            Decision::Wait,
            "the earlier process's requests may still be on their way"
        );
        let Decision::Update { record: r, .. } = e.decide(t0 + secs(15), wall) else {
            panic!("expired")
        };
        assert_eq!(r.transitions, 4, "a new term");
    }

    #[test]
    fn a_renewal_round_may_take_until_the_renew_deadline() {
        let t0 = Instant::now();
        let mut e = Elector::new("a", Timings::default());
        let timeout = secs(30);
        assert_eq!(e.round_deadline(t0, timeout), t0 + timeout, "a standby");
        e.written(t0, "1".into(), record("a", 15));
        // A round starting 2 s after the last renewal has 8 s: a GET and a PUT at 1 s latency each
        // way (4 s, more with a fresh TLS connection) fit.
        assert_eq!(e.round_deadline(t0 + secs(2), timeout), t0 + secs(10));
        assert!(
            e.renews_blind(t0 + secs(2)),
            "the leader renews without reading first"
        );
        assert_eq!(e.round_deadline(t0 + secs(2), secs(3)), t0 + secs(5));
    }

    #[test]
    fn the_lease_is_released_only_when_no_request_was_abandoned() {
        let t0 = Instant::now();
        let mut e = Elector::new("a", Timings::default());
        assert!(!e.may_release(t0), "not leading");
        e.written(t0, "1".into(), record("a", 15));
        assert!(e.may_release(t0 + secs(1)));
        e.abandoned();
        assert!(
            !e.may_release(t0 + secs(1)),
            "a request without an answer may still land: the Lease expires instead"
        );
    }

    #[test]
    fn the_fence_closes_at_the_renew_deadline_and_caps_requests_before_any_takeover() {
        let timings = Timings::default();
        let t0 = Instant::now();
        let wall = Timestamp::now();
        let mut leader = Elector::new("a", timings);
        leader.written(t0, "1".into(), record("a", 15));
        // Renewals every 2 s keep it open.
        for i in 1..=5 {
            let sent = t0 + secs(2 * i);
            leader.written(sent, format!("{}", i + 1), record("a", 15));
        }
        let last = t0 + secs(10);
        assert_eq!(
            leader.fence(last + secs(9)),
            Fence::Open {
                until: last + secs(14)
            }
        );
        // No renewal for the renew deadline: closed, on the monotonic clock alone.
        assert_eq!(leader.fence(last + secs(10)), Fence::Closed);
        assert!(!leader.leading(last + secs(10)));

        // A standby that saw that last renewal at the earliest when it was sent takes over no sooner
        // than a lease duration later, after every request of the leader has had to end.
        let mut standby = Elector::new("b", timings);
        standby.observe(last, Some(("6".into(), record("a", 15))));
        let mut takeover = last;
        while standby.decide(takeover, wall) == Decision::Wait {
            takeover += Duration::from_millis(100);
        }
        let Fence::Open { until } = leader.fence(last) else {
            panic!()
        };
        assert!(until < takeover, "{until:?} vs {takeover:?}");
        assert!(last + timings.renew_deadline < takeover);
    }

    #[test]
    fn a_leader_that_sees_another_holder_is_fenced_at_once() {
        let t0 = Instant::now();
        let mut e = Elector::new("a", Timings::default());
        e.written(t0, "1".into(), record("a", 15));
        assert!(e.leading(t0 + secs(1)));
        e.observe(t0 + secs(1), Some(("2".into(), record("b", 15))));
        assert_eq!(e.fence(t0 + secs(1)), Fence::Closed);
        assert_eq!(e.held(), None);
    }

    #[test]
    fn our_own_lease_is_renewed_keeping_its_acquire_time() {
        let t0 = Instant::now();
        let wall = Timestamp::now();
        let mut e = Elector::new("a", Timings::default());
        let mut mine = record("a", 15);
        mine.acquire_time = Some(wall - k8s_openapi::jiff::SignedDuration::from_secs(100));
        e.written(t0, "8".into(), mine.clone());
        e.observe(t0, Some(("9".into(), mine.clone())));
        let Decision::Update { record: r, .. } = e.decide(t0, wall) else {
            panic!()
        };
        assert_eq!(r.acquire_time, mine.acquire_time);
        assert_eq!(r.transitions, 3, "a renewal is no transition");
        assert_eq!(r.renew_time, Some(wall));
        assert_eq!(e.held().map(|h| h.0), Some("9"));
    }
}
