//! What `/readyz` says, and why: the operator is ready when it has rebuilt its series (or is a
//! standby with nothing to serve), its raw-event watch is alive, and its writer gets writes through.
//!
//! The watch is alive while the API server keeps answering it: an object, a bookmark, a list page,
//! or the end of a watch at its timeout, at least once per `--watch-timeout` plus a margin (the
//! stall bound of [`crate::api::client`]). The writer is stuck when it has had due writes and no write
//! got through for longer than `--request-timeout`. Both recover by themselves: the next sign of
//! life, the next write that lands.
//!
//! `/healthz` says whether the process is alive in the sense the kubelet acts on: it fails only while
//! a restore has made no progress (no page of its list) for longer than `--restore-timeout`, which
//! the process also answers by giving up the Lease and exiting; a restart is the cure either way.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Why the operator is not ready.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unready {
    Recovering,
    WatchStalled,
    WritesStuck,
    /// A policy requires its alerts (`spec.alert.required`) and none reached Alertmanager for
    /// longer than the request timeout.
    AlertsUndelivered,
}

impl Unready {
    pub fn as_str(self) -> &'static str {
        match self {
            Unready::Recovering => "recovering",
            Unready::WatchStalled => "watch stalled",
            Unready::WritesStuck => "writes making no progress",
            Unready::AlertsUndelivered => "required alerts not reaching Alertmanager",
        }
    }
}

#[derive(Clone, Copy, Debug, Default)]
struct State {
    recovered: bool,
    /// The last sign of life of the raw-event watch, while it runs.
    watch_heard: Option<Instant>,
    /// Since when due writes have gone without any write getting through.
    writes_stuck_since: Option<Instant>,
    /// The last progress of a restore under way (a page of its list), while one is.
    restore_progress: Option<Instant>,
    alerts_required: bool,
    alerts_failing_since: Option<Instant>,
}

/// The readiness decision: pure, on the state and the bounds.
fn judge(
    s: &State,
    now: Instant,
    stall_after: Duration,
    request_timeout: Duration,
) -> Result<(), Unready> {
    if !s.recovered {
        return Err(Unready::Recovering);
    }
    if s.watch_heard
        .is_some_and(|t| now.saturating_duration_since(t) > stall_after)
    {
        return Err(Unready::WatchStalled);
    }
    if s.writes_stuck_since
        .is_some_and(|t| now.saturating_duration_since(t) > request_timeout)
    {
        return Err(Unready::WritesStuck);
    }
    if s.alerts_required
        && s.alerts_failing_since
            .is_some_and(|t| now.saturating_duration_since(t) > request_timeout)
    {
        return Err(Unready::AlertsUndelivered);
    }
    Ok(())
}

/// Why the process is stuck (`/healthz`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stuck {
    Restore,
}

impl Stuck {
    pub fn as_str(self) -> &'static str {
        match self {
            Stuck::Restore => "restore making no progress",
        }
    }
}

/// Shared by the controller, the writer and the HTTP server.
#[derive(Debug)]
pub struct Health {
    state: Mutex<State>,
    stall_after: Duration,
    request_timeout: Duration,
    restore_timeout: Duration,
}

impl Health {
    /// `stall_after`: how long the watch may be silent; `request_timeout`: how long the writer may go
    /// without getting a due write through.
    pub fn new(stall_after: Duration, request_timeout: Duration) -> Health {
        Health {
            state: Mutex::new(State::default()),
            stall_after,
            request_timeout,
            restore_timeout: Duration::from_secs(600),
        }
    }

    /// How long a restore may go without progress before the process counts as stuck.
    pub fn with_restore_timeout(mut self, restore_timeout: Duration) -> Health {
        self.restore_timeout = restore_timeout;
        self
    }

    /// Alive or stuck at `now`.
    pub fn liveness(&self, now: Instant) -> Result<(), Stuck> {
        let state = *self.state.lock().unwrap_or_else(|p| p.into_inner());
        match state.restore_progress {
            Some(t) if now.saturating_duration_since(t) > self.restore_timeout => {
                Err(Stuck::Restore)
            }
            _ => Ok(()),
        }
    }

    /// A restore made progress at `now` (`None`: no restore under way any more).
    pub fn restore_progress(&self, at: Option<Instant>) {
        self.update(|s| s.restore_progress = at);
    }

    fn update(&self, f: impl FnOnce(&mut State)) {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut state);
    }

    /// Ready or not at `now`.
    pub fn readiness(&self, now: Instant) -> Result<(), Unready> {
        let state = *self.state.lock().unwrap_or_else(|p| p.into_inner());
        judge(&state, now, self.stall_after, self.request_timeout)
    }

    /// Ready to serve (a standby is: it has nothing to serve until it leads).
    pub fn set_recovered(&self, recovered: bool) {
        self.update(|s| s.recovered = recovered);
    }

    /// Whether the engine is current (the restore is over): a standby that may take the Lease.
    pub fn recovered(&self) -> bool {
        self.state
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .recovered
    }

    /// The raw-event watch answered at `now` (and is expected to keep answering).
    pub fn watch_heard(&self, now: Instant) {
        self.update(|s| s.watch_heard = Some(now));
    }

    pub fn writes_stuck_since(&self, since: Option<Instant>) {
        self.update(|s| s.writes_stuck_since = since);
    }

    /// Whether a policy in force requires its alerts (and an Alertmanager is configured).
    pub fn alerts_required(&self, required: bool) {
        self.update(|s| s.alerts_required = required);
    }

    /// Since when every post of alerts has failed; `None` after one went through.
    pub fn alerts_failing_since(&self, since: Option<Instant>) {
        self.update(|s| s.alerts_failing_since = since);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stuck_only_while_a_restore_makes_no_progress_for_its_timeout() {
        let t0 = Instant::now();
        let s = |secs| Duration::from_secs(secs);
        let h = Health::new(s(15), s(30)).with_restore_timeout(s(60));
        assert_eq!(h.liveness(t0 + s(3600)), Ok(()), "no restore: alive");
        h.restore_progress(Some(t0));
        assert_eq!(h.liveness(t0 + s(60)), Ok(()));
        assert_eq!(h.liveness(t0 + s(61)), Err(Stuck::Restore));
        h.restore_progress(Some(t0 + s(61)));
        assert_eq!(h.liveness(t0 + s(62)), Ok(()), "a page arrived");
        h.restore_progress(None);
        assert_eq!(h.liveness(t0 + s(3600)), Ok(()), "restored");
    }

    #[test]
    fn unready_while_required_alerts_fail_for_the_request_timeout() {
        let t0 = Instant::now();
        let s = |secs| Duration::from_secs(secs);
        let h = Health::new(s(15), s(30));
        h.set_recovered(true);
        h.alerts_failing_since(Some(t0));
        assert_eq!(h.readiness(t0 + s(60)), Ok(()), "not required: ready");
        h.alerts_required(true);
        assert_eq!(h.readiness(t0 + s(30)), Ok(()));
        assert_eq!(h.readiness(t0 + s(31)), Err(Unready::AlertsUndelivered));
        h.alerts_failing_since(None);
        assert_eq!(h.readiness(t0 + s(60)), Ok(()), "delivered again");
    }

    #[test]
    fn ready_only_when_recovered_listening_and_writing() {
        let t0 = Instant::now();
        let s = |secs| Duration::from_secs(secs);
        let h = Health::new(s(15), s(30));
        assert_eq!(h.readiness(t0), Err(Unready::Recovering));
        h.set_recovered(true);
        assert_eq!(h.readiness(t0), Ok(()), "a standby: no watch, no writes");
        h.watch_heard(t0);
        assert_eq!(h.readiness(t0 + s(15)), Ok(()));
        assert_eq!(h.readiness(t0 + s(16)), Err(Unready::WatchStalled));
        h.watch_heard(t0 + s(16));
        assert_eq!(h.readiness(t0 + s(16)), Ok(()), "recovers by itself");
        h.writes_stuck_since(Some(t0));
        assert_eq!(h.readiness(t0 + s(30)), Ok(()));
        h.watch_heard(t0 + s(31));
        assert_eq!(h.readiness(t0 + s(31)), Err(Unready::WritesStuck));
        h.writes_stuck_since(None);
        assert_eq!(h.readiness(t0 + s(31)), Ok(()));
    }
}
