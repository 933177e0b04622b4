//! The engine's boundary: what it emits (an [`Intent`] carrying a [`Snapshot`] of a series) and what it
//! takes back after a restart (a [`StoredSeries`] read from a series object).
//!
//! Plain data with no behaviour of its own, so that the engine and the modules that turn these values
//! into API objects and back (the `object` module) depend on this module and never on each other.

use crate::key::{KeyBuf, KeyId, RawId};
use chrono::{DateTime, Utc};
use std::sync::Arc;

/// Most raw objects whose absorbed counts a series records, so that a restart does not count them
/// again. Bounded so that the series object's annotation stays small.
pub const MAX_SOURCES: usize = 16;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SeriesState {
    Ongoing,
    Finished,
}

impl SeriesState {
    /// The value of the `eventseries.dev/state` label.
    pub fn as_str(self) -> &'static str {
        match self {
            SeriesState::Ongoing => "Ongoing",
            SeriesState::Finished => "Finished",
        }
    }
}

/// A state name that is neither `Ongoing` nor `Finished`.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{0:?} is not a series state: Ongoing or Finished")]
pub struct UnknownState(String);

/// The label value, in any case (`ongoing`, `FINISHED`): what a user types as well as what is stored.
impl std::str::FromStr for SeriesState {
    type Err = UnknownState;

    fn from_str(s: &str) -> Result<SeriesState, UnknownState> {
        [SeriesState::Ongoing, SeriesState::Finished]
            .into_iter()
            .find(|state| state.as_str().eq_ignore_ascii_case(s))
            .ok_or_else(|| UnknownState(s.to_owned()))
    }
}

/// Why a series ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FinishCause {
    /// `finishAfter` passed with no occurrence.
    Quiet,
    /// An occurrence came more than `seriesWindow` after the previous one: it starts a new series.
    Gap,
    /// `maxActiveSeries` was reached and this was the least recently active series.
    Evicted,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriteKind {
    Create,
    /// An early rewrite of a young series with what happened since its last write (see
    /// `Settings::first_refresh`): the first write to be put off when the writer is behind.
    Refresh,
    Heartbeat,
    Finish(FinishCause),
}

/// The count absorbed from one raw Event object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Source {
    pub raw: RawId,
    pub count: u64,
    /// The latest occurrence absorbed from it (unknown in objects written without it).
    pub last: Option<DateTime<Utc>>,
}

/// The state of a series at the moment an intent was made: everything a writer needs to write it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Snapshot {
    pub id: KeyId,
    /// Namespace of the raw events (also the key's).
    pub namespace: Arc<str>,
    /// The key and the note.
    pub key: KeyBuf,
    pub count: u64,
    pub first: DateTime<Utc>,
    pub last: DateTime<Utc>,
    pub state: SeriesState,
    /// Highest raw-event resourceVersion up to which every raw event had been absorbed.
    pub watermark: u64,
    pub sources: Vec<Source>,
    /// When the intent was made; written into the object so that every heartbeat changes it.
    pub written_at: DateTime<Utc>,
    /// When the series' next heartbeat was booked for as this state was taken: a report that its
    /// write landed ([`Landed`]) moves that booking only if it is still the series' own.
    pub heartbeat: DateTime<Utc>,
    /// Which of the series' deterministic names its object has: 0, the name derived from the key
    /// and start; n, the n-th alternative, taken when someone else's object held the earlier ones.
    /// Known to the engine only from a restored object; the writer finds it for a live series.
    pub name_variant: u8,
}

/// A write the shell must perform. Later intents for the same series supersede earlier ones.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Intent {
    pub kind: WriteKind,
    pub series: Snapshot,
    /// Since when this write has been owed, on the engine's clock: for a create, the arrival of the
    /// occurrence that made the key a series; for a heartbeat, when it was due; for a quiet finish,
    /// the last occurrence plus `finishAfter`; else the moment it was decided. What a reader waits,
    /// so the shell measures a write's latency from here.
    pub due: DateTime<Utc>,
}

/// The shell's word that a create or a heartbeat reached the API server
/// ([`crate::engine::Engine::written`]): the engine times the series' next heartbeat from when its
/// object was written, not from when the write was asked for, which is earlier by the writer's
/// backlog. Only for a write known to have changed the object at `at`: not after an attempt whose
/// outcome is unknown, which may have landed earlier with the same content.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Landed {
    pub namespace: Arc<str>,
    pub id: KeyId,
    /// The series' start: an answer for an earlier series of the same key moves nothing.
    pub first: DateTime<Utc>,
    /// When the state it carried was decided ([`Snapshot::written_at`]).
    pub asked: DateTime<Utc>,
    /// The heartbeat booked when that state was taken ([`Snapshot::heartbeat`]).
    pub booked: DateTime<Utc>,
    /// It created the object: the next heartbeat is the series' first.
    pub created: bool,
    /// When the API server's answer came.
    pub at: DateTime<Utc>,
}

impl Landed {
    pub fn of(intent: &Intent, created: bool, at: DateTime<Utc>) -> Landed {
        let s = &intent.series;
        Landed {
            namespace: s.namespace.clone(),
            id: s.id,
            first: s.first,
            asked: s.written_at,
            booked: s.heartbeat,
            created,
            at,
        }
    }
}

/// A series as read back from its object, to rebuild the engine after a restart.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredSeries {
    pub id: KeyId,
    pub namespace: String,
    /// The key and the note, as the object holds them.
    pub key: KeyBuf,
    pub count: u64,
    pub first: DateTime<Utc>,
    pub last: DateTime<Utc>,
    pub state: SeriesState,
    pub watermark: u64,
    pub sources: Vec<Source>,
    pub last_write: Option<DateTime<Utc>>,
    /// See [`Snapshot::name_variant`].
    pub name_variant: u8,
}
