//! What `/readyz` says, and why: the operator is ready when it has rebuilt its series (or is a
//! standby with nothing to serve), its raw-event watch is alive, and its writer gets writes through.
//!
//! The watch is alive while the API server keeps answering it: an object, a bookmark, a list page,
//! or the end of a watch at its timeout, at least once per `--watch-timeout` plus a margin (the
//! stall bound of [`crate::client`]). The writer is stuck when it has had due writes and no write
//! got through for longer than `--request-timeout`. Both recover by themselves: the next sign of
//! life, the next write that lands.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Why the operator is not ready.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unready {
    Recovering,
    WatchStalled,
    WritesStuck,
}

impl Unready {
    pub fn as_str(self) -> &'static str {
        match self {
            Unready::Recovering => "recovering",
            Unready::WatchStalled => "watch stalled",
            Unready::WritesStuck => "writes making no progress",
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
    Ok(())
}

/// Shared by the controller, the writer and the HTTP server.
#[derive(Debug)]
pub struct Health {
    state: Mutex<State>,
    stall_after: Duration,
    request_timeout: Duration,
}

impl Health {
    /// `stall_after`: how long the watch may be silent; `request_timeout`: how long the writer may go
    /// without getting a due write through.
    pub fn new(stall_after: Duration, request_timeout: Duration) -> Health {
        Health {
            state: Mutex::new(State::default()),
            stall_after,
            request_timeout,
        }
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

    /// The raw-event watch answered at `now` (and is expected to keep answering).
    pub fn watch_heard(&self, now: Instant) {
        self.update(|s| s.watch_heard = Some(now));
    }

    pub fn writes_stuck_since(&self, since: Option<Instant>) {
        self.update(|s| s.writes_stuck_since = since);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
