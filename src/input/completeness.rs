//! How far the raw-event input is known to be complete, and the probe that proves it in a quiet
//! spell.
//!
//! The watch proves its input complete up to the moment an answer arrived from the server (steps
//! are in the server's order, so whatever came before it has been applied) when that answer is the
//! end of a list (as of the list's snapshot), a bookmark, the end of a watch on schedule, or a
//! change for a recent occurrence. A silent or frozen connection proves nothing, and the engine's
//! input clock waits: no series is finished, no candidate expired and no late occurrence counted
//! stale on an input that may be missing occurrences (heartbeats go on).
//!
//! Without bookmarks (the API server sends none for a resource without a watch cache, and events
//! have none by default) a quiet spell would leave the input clock up to `--watch-timeout` behind,
//! and every finish that late. So while the engine holds a finish back for want of input, a
//! **probe** asks: a watch of the same objects from the last resourceVersion handed on, for one
//! second, metadata only. The server replays every change after that version at once; a probe
//! that ends cleanly having seen none proves the input complete as of when it was sent. One that
//! saw changes proves the same once the watch has handed them on (resourceVersions of one resource
//! grow in the order of its changes). One that sees more than [`PROBE_MOST_CHANGES`] gives up (the
//! watch is behind; catching it up proves completeness by itself), so a probe costs little.
//!
//! ```text
//!  held finish ──▶ probe from rv R ──▶ no change after R ─────────────▶ complete as of the send
//!                         │
//!                         └──▶ changes up to R2 ──▶ watch hands on R2 ─▶ complete as of the send
//! ```

use chrono::{DateTime, Utc};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Event;
use kube::api::{Api, WatchEvent, WatchParams};
use std::time::{Duration, Instant};

/// What a step of the watch proves about how current the engine's input is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Proof {
    Nothing,
    /// Complete as of the step's arrival: the end of a list (its snapshot), a bookmark, the end of
    /// a watch on schedule.
    Current,
    /// An object changed by an occurrence at this time: complete as of its arrival if that is recent
    /// (a late-delivered backlog holds old occurrences, and proves nothing).
    Occurrence(DateTime<Utc>),
}

/// How recent an occurrence must be for its arrival to prove the input current. Legacy events
/// carry whole seconds; a backlog delivered after a stall is older than this.
const FRESH: chrono::TimeDelta = chrono::TimeDelta::seconds(10);

/// The least time between the starts of two probes. One is in flight at a time and lasts
/// [`PROBE_SECONDS`], so back to back they cost one short watch a second, and only while a finish is
/// held; a longer gap would only make finishes later (a finish that falls due just after a probe
/// was sent waits for the next one).
pub const PROBE_GAP: Duration = Duration::from_secs(1);

/// How long a probe's watch lasts (its `timeoutSeconds`).
const PROBE_SECONDS: u32 = 1;

/// A probe that meets more changes than this gives up: the watch is behind.
pub const PROBE_MOST_CHANGES: usize = 256;

/// What a probe found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Probed {
    /// No change after the version it started from, as of `sent`.
    Quiet { sent: DateTime<Utc> },
    /// Changes up to resourceVersion `rv`, and none after it, as of `sent`.
    Changes { rv: u64, sent: DateTime<Utc> },
    /// More than [`PROBE_MOST_CHANGES`] changes: the watch is behind.
    Behind,
    /// The request failed (410 Gone after a compaction, a timeout, ...): nothing proven.
    Failed,
}

impl Probed {
    /// The value of `result` in `event_series_watch_probes_total`.
    pub fn label(&self) -> &'static str {
        match self {
            Probed::Quiet { .. } => "quiet",
            Probed::Changes { .. } => "changes",
            Probed::Behind => "behind",
            Probed::Failed => "failed",
        }
    }
}

/// The input clock. Pure: the controller tells it what the watch handed on and what probes found.
#[derive(Debug, Default)]
pub struct Completeness {
    until: Option<DateTime<Utc>>,
    /// The latest resourceVersion the watch has handed on.
    handed_on: Option<u64>,
    /// A probe saw changes up to this version: once the watch has handed it on, the input is
    /// complete as of the time that goes with it.
    awaiting: Option<(u64, DateTime<Utc>)>,
    probing: bool,
    last_probe: Option<Instant>,
}

impl Completeness {
    /// A step that arrived from the server at `received` proved `proof`.
    pub fn update(&mut self, proof: Proof, received: Option<DateTime<Utc>>) {
        let Some(received) = received else {
            return;
        };
        let proven = match proof {
            Proof::Nothing => false,
            Proof::Current => true,
            Proof::Occurrence(at) => at >= received - FRESH,
        };
        if proven {
            self.prove(received);
        }
    }

    /// Advances the clock to `as_of`; whether it moved.
    fn prove(&mut self, as_of: DateTime<Utc>) -> bool {
        let later = self.until.is_none_or(|until| until < as_of);
        if later {
            self.until = Some(as_of);
        }
        later
    }

    /// The watch handed on a change, a bookmark or a list's end at resourceVersion `rv`. True when
    /// that completed a probe's proof (see [`Completeness::probed`]).
    pub fn handed_on(&mut self, rv: u64) -> bool {
        self.handed_on = Some(self.handed_on.map_or(rv, |seen| seen.max(rv)));
        if let Some((wanted, as_of)) = self.awaiting
            && rv >= wanted
        {
            self.awaiting = None;
            return self.prove(as_of);
        }
        false
    }

    /// The time the input clock may advance to.
    pub fn clock(&self, now: DateTime<Utc>) -> DateTime<Utc> {
        self.until.map_or(now, |until| until.min(now))
    }

    /// Whether to start a probe now, and from which resourceVersion: only while the engine holds a
    /// finish back (`held`), one at a time, [`PROBE_GAP`] apart, and not while an earlier probe's
    /// changes are still on their way through the watch.
    pub fn probe_from(&mut self, now: Instant, held: bool) -> Option<u64> {
        let rested = self
            .last_probe
            .is_none_or(|last| now.duration_since(last) >= PROBE_GAP);
        if !held || self.probing || self.awaiting.is_some() || !rested {
            return None;
        }
        let from = self.handed_on?;
        self.probing = true;
        self.last_probe = Some(now);
        Some(from)
    }

    /// A probe's answer. True when it advanced the clock: a probe is sent only for a held finish,
    /// so the shell ticks the engine at once instead of at its next tick (up to a second later),
    /// and sends the next probe if a finish is still held.
    pub fn probed(&mut self, found: Probed) -> bool {
        self.probing = false;
        match found {
            Probed::Quiet { sent } => self.prove(sent),
            Probed::Changes { rv, sent } => {
                if self.handed_on.is_some_and(|seen| seen >= rv) {
                    self.prove(sent)
                } else {
                    self.awaiting = Some((rv, sent));
                    false
                }
            }
            Probed::Behind | Probed::Failed => false,
        }
    }

    /// The watch started over (a relist): a probe's versions mean nothing to the new list.
    pub fn relisted(&mut self) {
        self.awaiting = None;
    }
}

/// Watches the metadata of the same raw events as the watch (`api` scoped like it, the same
/// selector) from `from` for [`PROBE_SECONDS`], and reports what it saw.
pub async fn probe(api: Api<Event>, selector: String, from: u64) -> Probed {
    let sent = Utc::now();
    let wp = WatchParams::default()
        .labels(&selector)
        .timeout(PROBE_SECONDS);
    let stream = match api.watch_metadata(&wp, &from.to_string()).await {
        Ok(stream) => stream,
        Err(e) => {
            tracing::debug!(error = %e, "completeness probe failed");
            return Probed::Failed;
        }
    };
    let mut stream = stream.boxed();
    let mut latest: Option<u64> = None;
    let mut changes = 0;
    loop {
        match stream.try_next().await {
            Ok(Some(WatchEvent::Added(m) | WatchEvent::Modified(m) | WatchEvent::Deleted(m))) => {
                changes += 1;
                if changes > PROBE_MOST_CHANGES {
                    return Probed::Behind;
                }
                let rv = m.metadata.resource_version.as_deref().map(str::parse);
                match rv {
                    Some(Ok(rv)) => latest = Some(latest.map_or(rv, |l: u64| l.max(rv))),
                    // A change whose version cannot be compared proves nothing.
                    _ => return Probed::Failed,
                }
            }
            Ok(Some(WatchEvent::Bookmark(_))) => {}
            Ok(Some(WatchEvent::Error(e))) => {
                tracing::debug!(code = e.code, reason = %e.reason, "completeness probe ended with an error");
                return Probed::Failed;
            }
            Ok(None) => break,
            Err(e) => {
                tracing::debug!(error = %e, "completeness probe failed");
                return Probed::Failed;
            }
        }
    }
    match latest {
        None => Probed::Quiet { sent },
        Some(rv) => Probed::Changes { rv, sent },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000 + s, 0).unwrap()
    }

    #[test]
    fn fresh_occurrences_and_ends_prove_and_stale_ones_do_not() {
        let mut c = Completeness::default();
        c.update(Proof::Occurrence(t(0)), Some(t(30)));
        assert_eq!(
            c.clock(t(40)),
            t(40),
            "nothing proven yet: the clock is free"
        );
        c.update(Proof::Current, Some(t(35)));
        assert_eq!(c.clock(t(40)), t(35));
        c.update(Proof::Occurrence(t(0)), Some(t(38)));
        assert_eq!(c.clock(t(40)), t(35), "a backlog proves nothing");
        c.update(Proof::Occurrence(t(37)), Some(t(39)));
        assert_eq!(c.clock(t(40)), t(39));
        c.update(Proof::Nothing, Some(t(40)));
        assert_eq!(c.clock(t(41)), t(39));
    }

    #[test]
    fn a_probe_is_sent_only_for_a_held_finish_one_at_a_time_and_spaced() {
        let now = Instant::now();
        let mut c = Completeness::default();
        assert_eq!(c.probe_from(now, true), None, "no version handed on yet");
        c.handed_on(7);
        assert_eq!(c.probe_from(now, false), None, "nothing held");
        assert_eq!(c.probe_from(now, true), Some(7));
        assert_eq!(c.probe_from(now + PROBE_GAP, true), None, "one in flight");
        assert!(!c.probed(Probed::Failed));
        assert_eq!(c.probe_from(now + PROBE_GAP / 2, true), None, "too soon");
        assert_eq!(c.probe_from(now + PROBE_GAP, true), Some(7));
    }

    /// A finish that falls due just after a probe was sent needs the next probe: it is sent as
    /// soon as the one in flight has answered (its watch lasts a second), not a second later.
    #[test]
    fn probes_may_run_back_to_back() {
        let now = Instant::now();
        let mut c = Completeness::default();
        c.handed_on(7);
        assert_eq!(c.probe_from(now, true), Some(7));
        let answered = now + Duration::from_millis(1_050);
        assert!(c.probed(Probed::Quiet { sent: t(50) }));
        assert_eq!(
            c.probe_from(answered, true),
            Some(7),
            "the next probe goes as the last one answers"
        );
    }

    #[test]
    fn a_quiet_probe_proves_as_of_its_sending() {
        let mut c = Completeness::default();
        c.update(Proof::Current, Some(t(0)));
        c.handed_on(7);
        c.probe_from(Instant::now(), true);
        assert!(c.probed(Probed::Quiet { sent: t(50) }), "the clock moved");
        assert_eq!(c.clock(t(51)), t(50));
        c.probe_from(Instant::now() + PROBE_GAP, true);
        assert!(
            !c.probed(Probed::Quiet { sent: t(40) }),
            "an answer older than the proof moves nothing"
        );
        assert_eq!(c.clock(t(51)), t(50));
    }

    #[test]
    fn changes_a_probe_saw_prove_once_the_watch_has_handed_them_on() {
        let now = Instant::now();
        let mut c = Completeness::default();
        c.update(Proof::Current, Some(t(0)));
        c.handed_on(7);
        c.probe_from(now, true);
        assert!(!c.probed(Probed::Changes {
            rv: 12,
            sent: t(50),
        }));
        assert_eq!(c.clock(t(51)), t(0), "12 is still on its way");
        assert_eq!(
            c.probe_from(now + PROBE_GAP * 5, true),
            None,
            "waits for 12 first"
        );
        assert!(!c.handed_on(11));
        assert_eq!(c.clock(t(51)), t(0));
        assert!(c.handed_on(12), "the probe's proof is complete");
        assert_eq!(c.clock(t(51)), t(50));
        // A probe answered after the watch already passed its changes proves at once.
        c.probe_from(now + PROBE_GAP * 6, true);
        assert!(c.probed(Probed::Changes {
            rv: 12,
            sent: t(60),
        }));
        assert_eq!(c.clock(t(61)), t(60));
    }

    #[test]
    fn behind_failed_and_relisted_prove_nothing() {
        let now = Instant::now();
        let mut c = Completeness::default();
        c.update(Proof::Current, Some(t(0)));
        c.handed_on(7);
        for (i, found) in [Probed::Behind, Probed::Failed].into_iter().enumerate() {
            c.probe_from(now + PROBE_GAP * (i as u32 + 1), true);
            assert!(!c.probed(found));
            assert_eq!(c.clock(t(60)), t(0));
        }
        c.probe_from(now + PROBE_GAP * 4, true);
        c.probed(Probed::Changes {
            rv: 20,
            sent: t(50),
        });
        c.relisted();
        c.handed_on(30);
        assert_eq!(
            c.clock(t(60)),
            t(0),
            "a relist's versions are not the probe's"
        );
    }
}
