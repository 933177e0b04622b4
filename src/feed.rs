//! Raw Events into the engine: each is read as an observation ([`key::normalise()`], where all
//! parsing lives), what reading cut or refused is counted, and the observation is fed to the engine.
//!
//! The controller feeds watched and listed events alike; the only difference is the ingest-lag
//! metric, which only a watched change records: a listed object's occurrences may be arbitrarily
//! old, so its lag measures nothing. A restart's first list is read here too, then buffered
//! ([`crate::restart`]).

use crate::engine::Engine;
use crate::key::{self, Observation};
use crate::metrics::Metrics;
use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::Event;

/// How a raw event reached the operator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arrival {
    /// A change delivered by the watch, just now.
    Watched,
    /// An item of a list (a relist after 410 Gone).
    Listed,
}

/// Reads a raw event: one with a field cut to its limit is counted, one that cannot be read is
/// skipped with a log line and counted as a dropped occurrence.
pub fn read<'a>(ev: &'a Event, metrics: &Metrics) -> Option<Observation<'a>> {
    match key::normalise(ev) {
        Ok(obs) => {
            if obs.truncated {
                metrics.truncated.inc();
            }
            Some(obs)
        }
        Err(e) => {
            tracing::warn!(name = ?ev.metadata.name, namespace = ?ev.metadata.namespace,
                error = %e, "raw event skipped");
            metrics.dropped(e.reason(), 1);
            None
        }
    }
}

/// Feeds one raw event to the engine. Returns the time of its latest occurrence; `None` when it
/// could not be read.
pub fn feed(
    engine: &mut Engine,
    metrics: &Metrics,
    ev: &Event,
    arrival: Arrival,
) -> Option<DateTime<Utc>> {
    let obs = read(ev, metrics)?;
    let now = Utc::now();
    if arrival == Arrival::Watched {
        metrics.ingest_lag(now, obs.last);
    }
    engine.observe(now, &obs);
    Some(obs.last)
}
