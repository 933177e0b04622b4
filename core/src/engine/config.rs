//! The engine's own limits ([`EngineConfig`], set by the shell's flags, not by policies) and the
//! counters it keeps for the metrics ([`Stats`]).

use chrono::TimeDelta;

/// Engine-wide limits that are not policy knobs.
#[derive(Clone, Copy, Debug)]
pub struct EngineConfig {
    /// Raw event objects whose last count is remembered for delta counting. Raw events expire with the
    /// API server's event TTL (1h by default) and are forgotten on delete, so this only needs to exceed
    /// the number of raw events the cluster holds at once.
    pub raw_capacity: usize,
    /// How long a key whose occurrences were all alone is remembered (without any count), so that a
    /// series it later forms records which raw objects were already counted. About the event TTL.
    pub dormant_retention: TimeDelta,
    /// How far an event's own timestamp may lie from the operator's clock and still time its
    /// occurrence (see the module docs, Clocks); also how far in the future a stored series object's
    /// times may lie before they are clamped to now.
    pub clock_tolerance: TimeDelta,
    /// Heartbeats per second the writer can spend (a share of its rate limit): more fall due in no
    /// second; a burst, or more series than `heartbeatInterval` allows at this rate, is spaced out
    /// instead of queueing beyond the writer (see the `pacing` module).
    pub heartbeat_rate: f64,
    /// The longest a heartbeat is ever put off by that spacing, after the series' last write: below
    /// the API server's event TTL, so that no series object expires between two writes.
    pub heartbeat_ceiling: TimeDelta,
    /// Most bytes of keys (and notes) held for series and candidates: counts alone do not bound
    /// memory, since one key may take from a hundred bytes to 4.6 KB (see the `budget` module).
    pub key_bytes: usize,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            raw_capacity: 262_144,
            dormant_retention: TimeDelta::hours(1),
            clock_tolerance: TimeDelta::minutes(10),
            // 3/4 of the writer's default 50 per second, 3/4 of the default event TTL (1h): 67,500
            // series at most heartbeat every 30 minutes, more (a policy above the default bound of
            // 50,000) are spaced out up to every 45 minutes.
            heartbeat_rate: 37.5,
            heartbeat_ceiling: TimeDelta::minutes(45),
            // An eighth of the Deployment's 256 MiB limit: the default bound's 150,000 keys (50,000
            // series, 100,000 candidates) at about 220 bytes each with their notes; where keys are
            // longer, the namespace holding the most bytes gives up candidates first.
            key_bytes: 32 << 20,
        }
    }
}

/// Counters the metrics module exports. Occurrences are counted once, in `occurrences`, and then end
/// up in exactly one of: a series, `lone`, `dropped_filtered`, `dropped_stale`, or a pending candidate.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    pub occurrences: u64,
    pub series_started: u64,
    pub series_finished: u64,
    /// Finished series that an occurrence written late joined again (each finishes once more, also
    /// in `series_finished`).
    pub series_reopened: u64,
    /// Series finished early because `maxActiveSeries` was reached (also in `series_finished`).
    pub evicted_by_policy: u64,
    /// Series finished early because `maxActiveSeriesPerNamespace` was reached (also in
    /// `series_finished`).
    pub evicted_by_namespace: u64,
    /// Series finished early because the keys outgrew `EngineConfig::key_bytes` (also in
    /// `series_finished`).
    pub evicted_by_bytes: u64,
    /// Series ended unwritten because their namespace was deleted (also in `series_finished`).
    pub evicted_namespace_deleted: u64,
    /// Occurrences in candidates that never became a series (expired or evicted).
    pub lone: u64,
    pub candidates_evicted: u64,
    /// Raw objects forgotten because the raw-count table was full.
    pub raw_evicted: u64,
    pub dropped_filtered: u64,
    pub dropped_stale: u64,
}
