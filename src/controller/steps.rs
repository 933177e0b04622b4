//! One step of the raw-event watch applied to the engine, and what it tells the input clock. During
//! a restart the first list is buffered and replayed at its end, after which the operator is ready.

use crate::input::completeness::{Completeness, Proof};
use crate::input::feed::{Arrival, feed};
use crate::input::restart::Restart;
use crate::input::watch::Step;
use crate::operations::health::Health;
use crate::operations::metrics::Metrics;
use chrono::{DateTime, Utc};
use event_series_core::engine::Engine;
use event_series_core::key::RawId;
use k8s_openapi::api::core::v1::Event;
use std::time::Instant;

/// What one step of the watch tells the input clock.
pub(super) struct Told {
    proof: Proof,
    received: Option<DateTime<Utc>>,
    /// The resourceVersion of the change, bookmark or list it was.
    handed_on: Option<u64>,
    relisted: bool,
}

impl Told {
    /// Tells the input clock; true when the step completed a probe's proof (the shell then ticks
    /// at once, see [`Completeness::probed`]).
    pub(super) fn tell(self, current: &mut Completeness) -> bool {
        if self.relisted {
            current.relisted();
        }
        let completed = self.handed_on.is_some_and(|rv| current.handed_on(rv));
        current.update(self.proof, self.received);
        completed
    }
}

/// Applies `step`, received from the server at `received`.
pub(super) fn apply(
    engine: &mut Engine,
    (metrics, health): (&Metrics, &Health),
    restart: &mut Option<Restart>,
    (step, received): (Step, Option<DateTime<Utc>>),
) -> Told {
    if step.heard() {
        health.watch_heard(Instant::now());
    }
    let mut told = Told {
        proof: Proof::Nothing,
        received,
        handed_on: None,
        relisted: false,
    };
    match step {
        Step::ListStarted { relist } => {
            told.relisted = relist;
            if relist {
                metrics.watch_relists.inc();
                engine.begin_relist();
            }
        }
        Step::Listed(ev) => listed(engine, metrics, restart, &ev),
        Step::ListDone { resource_version } => {
            let rv = parse(&resource_version).unwrap_or(0);
            list_done(engine, health, restart, rv, received);
            told.proof = Proof::Current;
            told.handed_on = Some(rv);
        }
        Step::Applied(ev) => {
            if let Some(last) = feed(engine, metrics, &ev, Arrival::Watched) {
                told.proof = Proof::Occurrence(last);
            }
            told.handed_on = checkpoint(engine, ev.metadata.resource_version.as_deref());
        }
        Step::Deleted(ev) => {
            let m = &ev.metadata;
            told.handed_on = m.resource_version.as_deref().and_then(parse);
            engine.forget_raw(RawId::of(
                m.namespace.as_deref().unwrap_or(""),
                m.name.as_deref().unwrap_or(""),
                m.uid.as_deref().unwrap_or(""),
            ));
        }
        Step::Bookmark { resource_version } => {
            metrics.bookmarks.inc();
            told.proof = Proof::Current;
            told.handed_on = checkpoint(engine, Some(&resource_version));
        }
        Step::Restarted { clean } => {
            metrics.watch_restarts.inc();
            if clean {
                told.proof = Proof::Current;
            }
        }
        Step::Stalled => {
            tracing::warn!("raw event watch went silent (dead connection?); resuming it");
            metrics.watch_stalls.inc();
        }
        Step::Failed { error, retry_in } => {
            tracing::warn!(%error, ?retry_in, "raw event watch failed; retrying");
        }
    }
    told
}

/// A listed object: buffered during a restart (replayed early when the buffer is full), else fed.
fn listed(engine: &mut Engine, metrics: &Metrics, restart: &mut Option<Restart>, ev: &Event) {
    match restart.as_mut() {
        Some(restart) => {
            restart.buffer(ev, metrics);
            if restart.is_full() {
                restart.flush(engine, metrics, Utc::now());
            }
        }
        None => {
            feed(engine, metrics, ev, Arrival::Listed);
        }
    }
}

/// The end of a list at resourceVersion `rv`: the restart's replay, or the end of a relist.
fn list_done(
    engine: &mut Engine,
    health: &Health,
    restart: &mut Option<Restart>,
    rv: u64,
    received: Option<DateTime<Utc>>,
) {
    match restart.take() {
        Some(restart) => {
            // The list is complete as of its snapshot, not of its last page.
            restart.finish(engine, rv, received.unwrap_or_else(Utc::now), Utc::now());
            health.set_recovered(true);
        }
        None => {
            engine.end_relist();
            engine.checkpoint(rv);
        }
    }
}

/// Records `rv` as processed, when it is one.
fn checkpoint(engine: &mut Engine, rv: Option<&str>) -> Option<u64> {
    let rv = rv.and_then(parse)?;
    engine.checkpoint(rv);
    Some(rv)
}

fn parse(rv: &str) -> Option<u64> {
    rv.parse().ok()
}
