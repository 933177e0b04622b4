//! What a pending write owes, kind by kind, and since when: the start of each wait that
//! `event_series_write_latency_seconds` measures.

use chrono::{DateTime, Utc};
use event_series_core::intent::{Intent, WriteKind};

/// Since when each kind of write has been owed and not yet carried by a write, on the engine's
/// clock ([`Intent::due`]). One entry per kind, so that a heartbeat coalesced into a finish still
/// ends both waits, and a superseded intent keeps its own.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Owed {
    pub create: Option<DateTime<Utc>>,
    pub refresh: Option<DateTime<Utc>>,
    pub heartbeat: Option<DateTime<Utc>>,
    pub finish: Option<DateTime<Utc>>,
}

impl Owed {
    pub(super) fn of(intent: &Intent) -> Owed {
        let mut owed = Owed::default();
        let slot = match intent.kind {
            WriteKind::Create => &mut owed.create,
            WriteKind::Refresh => &mut owed.refresh,
            WriteKind::Heartbeat => &mut owed.heartbeat,
            WriteKind::Finish(_) => &mut owed.finish,
        };
        *slot = Some(intent.due);
        owed
    }

    /// Both, each kind owed since the earlier of the two.
    pub(super) fn merge(self, other: Owed) -> Owed {
        let min = |a: Option<DateTime<Utc>>, b: Option<DateTime<Utc>>| match (a, b) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        Owed {
            create: min(self.create, other.create),
            refresh: min(self.refresh, other.refresh),
            heartbeat: min(self.heartbeat, other.heartbeat),
            finish: min(self.finish, other.finish),
        }
    }

    /// Each kind owed, with since when.
    pub fn each(&self) -> impl Iterator<Item = (WriteKind, DateTime<Utc>)> {
        [
            (WriteKind::Create, self.create),
            (WriteKind::Refresh, self.refresh),
            (WriteKind::Heartbeat, self.heartbeat),
            (
                WriteKind::Finish(event_series_core::intent::FinishCause::Quiet),
                self.finish,
            ),
        ]
        .into_iter()
        .filter_map(|(kind, since)| Some((kind, since?)))
    }

    /// Only early refreshes are owed: the write may wait behind every other (see [`super::queue::Queue`]).
    pub(super) fn deferrable(&self) -> bool {
        self.create.is_none() && self.heartbeat.is_none() && self.finish.is_none()
    }
}
