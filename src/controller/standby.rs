//! What a standby does with the leader's writes, seen by the own-object watch
//! ([`crate::input::own_watch`]): each object the leader wrote is checked as a claim, like a restored
//! one, then told to the engine (the series' heartbeats are booked from it) and to the writer (a
//! pending write it covers is dropped). A forged or unreadable object is ignored: it could only
//! spare a write, never cost a count. And the pace of a standby's lists ([`paces`]).

use super::{ControllerConfig, leading};
use crate::input::pace::{Leading, Pace};
use crate::leader::WriteFence;
use crate::object::{self, Check};
use crate::writer::Observed;
use chrono::Utc;
use event_series_core::engine::Engine;
use k8s_openapi::api::events::v1::Event;
use std::sync::Arc;

/// The pace of each list while this replica stands by ([`crate::input::pace`]): the raw list and
/// the restore go apart, since the raw list stops when its replay buffer is full and must not hold
/// up the restore then. A pause is at most a tenth of the restore's timeout, which it counts.
pub(super) fn paces(
    config: &ControllerConfig,
    fence: &WriteFence,
) -> impl Fn() -> Arc<Pace> + use<> {
    let fence = fence.clone();
    let leads: Leading = Arc::new(move || leading(&fence));
    let (share, most) = (config.standby_list_share, config.restore_timeout / 10);
    move || Pace::new(share, most, Arc::clone(&leads))
}

/// Tells the engine what the leader wrote, and returns it for the writer (`None`: not a claim
/// that checks out).
pub(super) fn learn(engine: &mut Engine, ev: &Event) -> Option<Observed> {
    let check = Check {
        now: Utc::now(),
        tolerance: engine.clock_tolerance(),
    };
    let stored = match object::decode(ev, check) {
        Ok(stored) => stored,
        Err(error) => {
            tracing::debug!(%error, name = ?ev.metadata.name, "own series object not taken as the leader's write");
            return None;
        }
    };
    if let Some(at) = stored.last_write {
        engine.written_elsewhere(&stored.namespace, stored.id, stored.first, at);
    }
    Observed::of(ev, &stored)
}
