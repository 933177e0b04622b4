//! The label sets, label values and histogram families of the operator's metrics: every value a
//! label may take is listed here, so that label values stay bounded.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    pub verb: String,
    pub code: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DropLabels {
    pub reason: String,
}

/// Every `reason` of `dropped_total`, exported at 0 from the start so that rates and alerts on them
/// work before the first drop. Its unit is the occurrence: a raw event that cannot be read counts
/// as one.
pub const DROP_REASONS: &[&str] = &[
    "lone",
    "filtered",
    "stale",
    "missing_name",
    "missing_namespace",
    "no_timestamp",
];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabels {
    pub outcome: String,
}

/// Every `outcome` of `alerts_sent_total`: delivered (to at least one Alertmanager), in a post that
/// failed (retried), refused by Alertmanager (a 4xx: not retried), or dropped (the outbox was full;
/// a firing alert is posted again at its next resend).
pub const ALERT_OUTCOMES: &[&str] = &["sent", "failed", "rejected", "dropped"];

/// Every `reason` of `series_evicted_total`.
pub const EVICTION_REASONS: &[&str] = &[
    "max_active_series",
    "max_active_series_per_namespace",
    "namespace_deleted",
    "key_bytes",
];

/// The `duration` labels of `series_ongoing_longer_than`, with their lengths: few and fixed, so that
/// the family stays four series whatever the cluster does.
pub const ONGOING_AGES: [(&str, i64); 4] = [
    ("10m", 600),
    ("1h", 3_600),
    ("6h", 6 * 3_600),
    ("24h", 24 * 3_600),
];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AgeLabels {
    pub duration: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ProbeLabels {
    pub result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BuildLabels {
    pub version: &'static str,
    pub commit: &'static str,
    pub rustc: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabels {
    pub kind: &'static str,
}

/// Every `kind` of `write_latency_seconds`, exported from the start.
pub const WRITE_KINDS: [&str; 3] = ["create", "heartbeat", "finish"];

type LatencyFamily = Family<KindLabels, Histogram, fn() -> Histogram>;

/// The histograms behind `event_series_write_latency_seconds{kind}`: 18 buckets from 10 ms, each
/// twice the previous (the last bound is about 22 minutes), wide enough for a create answered at
/// once and for a heartbeat held back by a slow API server for minutes.
#[derive(Clone, Debug)]
pub struct WriteLatency(pub LatencyFamily);

impl Default for WriteLatency {
    fn default() -> Self {
        fn buckets() -> Histogram {
            Histogram::new(exponential_buckets(0.01, 2.0, 18))
        }
        WriteLatency(Family::new_with_constructor(buckets))
    }
}

/// The `kind` label of a write: an early refresh is a heartbeat come early, one kind for the
/// reader's wait.
pub(super) fn write_kind(kind: event_series_core::intent::WriteKind) -> &'static str {
    use event_series_core::intent::WriteKind;
    match kind {
        WriteKind::Create => WRITE_KINDS[0],
        WriteKind::Refresh | WriteKind::Heartbeat => WRITE_KINDS[1],
        WriteKind::Finish(_) => WRITE_KINDS[2],
    }
}

/// The histogram behind `event_series_ingest_lag_seconds`: 30 buckets from 1 ms, each 1.5 times the
/// previous (the last bound is about 2 minutes), so that p50 and p99 read from it are within 50 %.
#[derive(Clone, Debug)]
pub struct IngestLag(pub Histogram);

impl Default for IngestLag {
    fn default() -> Self {
        IngestLag(Histogram::new(exponential_buckets(0.001, 1.5, 30)))
    }
}
