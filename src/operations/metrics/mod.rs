//! Prometheus metrics (prefix `event_series_`, "Operations"). The engine keeps plain counters in
//! [`event_series_core::engine::Stats`]; the shell copies them here, so the pure core needs no metrics library.

pub(crate) mod labels;
mod loop_gauge;
mod process;

pub use labels::*;
pub use loop_gauge::{LoopCollector, LoopGauge, LoopLabels, LoopRows, TypeLabel, fold};
pub use process::{ProcessCollector, ProcessStats};

use crate::operations::build;
use crate::operations::trouble::Kind;
use event_series_core::engine::Stats;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use std::sync::atomic::{AtomicU64, Ordering};

/// Every metric the operator exports.
#[derive(Default)]
pub struct Metrics {
    pub occurrences: Counter,
    pub series_active: Gauge,
    pub series_started: Counter,
    pub series_finished: Counter,
    pub series_reopened: Counter,
    pub api_requests: Family<RequestLabels, Counter>,
    pub watch_restarts: Counter,
    pub watch_relists: Counter,
    pub watch_stalls: Counter,
    pub watch_probes: Family<ProbeLabels, Counter>,
    pub restore_tokens_expired: Counter,
    pub restart_buffer_flushes: Counter,
    pub names_taken: Counter,
    pub landed_dropped: Counter,
    /// 1 while this replica holds the Lease (or runs without leader election), else 0.
    pub leader: Gauge,
    /// 1 while `/readyz` would answer 200: see [`Metrics::watch_readiness`].
    pub ready: Gauge,
    /// Tokio tasks alive in this process: a leak of spawned tasks shows here first.
    pub runtime_tasks: Gauge,
    pub writes_pending: Gauge,
    pub bookmarks: Counter,
    pub dropped: Family<DropLabels, Counter>,
    pub series_evicted: Family<DropLabels, Counter>,
    pub recovery_rejected: Family<DropLabels, Counter>,
    pub truncated: Counter,
    /// `series_ongoing_longer_than{duration}`: see [`Metrics::set_ongoing_ages`].
    pub ongoing_longer_than: Family<AgeLabels, Gauge>,
    /// `ingest_lag_seconds`: see [`Metrics::ingest_lag`].
    pub ingest_lag: IngestLag,
    /// `write_latency_seconds{kind}`: see [`Metrics::write_latency`].
    pub write_latency: WriteLatency,
    /// `writes_shed_total{kind}`: see [`Metrics::write_shed`].
    pub writes_shed: Family<KindLabels, Counter>,
    /// `alerts_sent_total{outcome}`, in alerts.
    pub alerts_sent: Family<OutcomeLabels, Counter>,
    /// Loops alerting now (posted firing by this leader).
    pub alerts_firing: Gauge,
    /// Loops a policy selects for alerts beyond `--max-alerts`, not alerted.
    pub alerts_over_limit: Gauge,
    /// The rows of `loops{namespace,reason,type,state}` ([`LoopGauge`]).
    pub loop_rows: std::sync::Arc<LoopRows>,
    /// The operator's own trouble, for its Events and the `Degraded` condition.
    pub trouble: crate::operations::trouble::Trouble,
    /// Engine counters already exported, so that [`Metrics::sync_engine`] adds only the growth.
    seen: SeenStats,
}

#[derive(Default)]
struct SeenStats {
    occurrences: AtomicU64,
    started: AtomicU64,
    finished: AtomicU64,
    reopened: AtomicU64,
    lone: AtomicU64,
    filtered: AtomicU64,
    stale: AtomicU64,
    evicted_global: AtomicU64,
    evicted_namespace: AtomicU64,
    evicted_namespace_deleted: AtomicU64,
    evicted_bytes: AtomicU64,
}

impl Metrics {
    /// A registry holding all metrics, and the metrics themselves; every labelled family starts
    /// with each of its known label values at 0, so that a rate over it has a start.
    pub fn registry(metrics: &std::sync::Arc<Metrics>) -> Registry {
        let mut root = Registry::default();
        root.register_collector(Box::new(ProcessCollector));
        let r = root.sub_registry_with_prefix("event_series");
        r.register(
            "build_info",
            "1, labelled with the version, the commit and the Rust compiler of this build",
            build::info(),
        );
        Self::register_series(r, metrics);
        Self::register_api(r, metrics);
        Self::register_restart(r, metrics);
        Self::register_replica(r, metrics);
        Self::register_alerts(r, metrics);
        for outcome in ALERT_OUTCOMES {
            metrics.alerts_sent(outcome, 0);
        }
        for reason in DROP_REASONS {
            metrics.dropped(reason, 0);
        }
        metrics.set_ongoing_ages([0; ONGOING_AGES.len()]);
        for reason in EVICTION_REASONS {
            let _ = metrics.series_evicted.get_or_create(&label(reason));
        }
        for reason in crate::object::DecodeError::REASONS {
            let _ = metrics.recovery_rejected.get_or_create(&label(reason));
        }
        root
    }

    /// Loops as alerts and by namespace.
    fn register_alerts(r: &mut Registry, m: &Metrics) {
        r.register(
            "alerts_sent",
            "Alerts posted to Alertmanager (one per alert in a post), by outcome: sent (an \
             Alertmanager took it), failed (the post failed and is retried), rejected (refused \
             with a 4xx, not retried), dropped (the outbox was full)",
            m.alerts_sent.clone(),
        );
        r.register(
            "alerts_firing",
            "Loops this leader has posted as firing alerts and not yet resolved",
            m.alerts_firing.clone(),
        );
        r.register(
            "alerts_over_limit",
            "Loops a policy's spec.alert selects that are not alerted because --max-alerts loops, \
             or --max-alerts-per-namespace of their namespace, already are",
            m.alerts_over_limit.clone(),
        );
        r.register_collector(Box::new(LoopCollector(m.loop_rows.clone())));
    }

    /// What the engine counts: occurrences and the series they make.
    fn register_series(r: &mut Registry, m: &Metrics) {
        r.register(
            "occurrences",
            "Occurrences counted from raw events",
            m.occurrences.clone(),
        );
        r.register(
            "series_active",
            "Series currently Ongoing",
            m.series_active.clone(),
        );
        r.register("series_started", "Series started", m.series_started.clone());
        r.register(
            "series_finished",
            "Series finished",
            m.series_finished.clone(),
        );
        r.register(
            "series_reopened",
            "Finished series reopened by an occurrence that belongs to it and that its emitter wrote \
             late (each is finished again, and counted again in series_finished)",
            m.series_reopened.clone(),
        );
        r.register(
            "dropped",
            "Occurrences not counted in any series, by reason: lone (no second occurrence within \
             seriesWindow), filtered (by a policy's match), stale (older than seriesWindow when it \
             arrived), or the raw event could not be read (one per event)",
            m.dropped.clone(),
        );
        r.register(
            "series_evicted",
            "Series given up early (written Finished with their count) because a policy's \
             maxActiveSeries or maxActiveSeriesPerNamespace was reached, by reason",
            m.series_evicted.clone(),
        );
        r.register(
            "series_ongoing_longer_than",
            "Series Ongoing whose loop has lasted (since its first occurrence) longer than \
             `duration`: 10m, 1h, 6h or 24h; refreshed every 10 s",
            m.ongoing_longer_than.clone(),
        );
        r.register(
            "fields_truncated",
            "Raw event observations with a string field cut to its limit (the note to 1,024 bytes)",
            m.truncated.clone(),
        );
    }

    /// The traffic with the API server: writes, the raw-event watch, the restore.
    fn register_api(r: &mut Registry, m: &Metrics) {
        r.register(
            "api_requests",
            "Requests to the API server (series writes, Lease reads and writes), by verb and code: \
             the HTTP status, `timeout` when no answer came within the deadline, `error` when the \
             connection failed",
            m.api_requests.clone(),
        );
        r.register(
            "writes_pending",
            "Series writes waiting to be made (one per series: newer states replace older ones)",
            m.writes_pending.clone(),
        );
        r.register(
            "watch_restarts",
            "Raw-event watches re-established from the last resourceVersion",
            m.watch_restarts.clone(),
        );
        r.register(
            "watch_relists",
            "Full relists of raw events (after 410 Gone)",
            m.watch_relists.clone(),
        );
        r.register(
            "watch_stalls",
            "Raw-event watches abandoned because nothing, not even a bookmark, arrived for \
             --watch-timeout plus a margin (then resumed from the last resourceVersion)",
            m.watch_stalls.clone(),
        );
        r.register(
            "watch_probes",
            "Probes of the raw-event input sent while a finish waited for proof that no occurrence \
             was still in transit (a 1 s metadata watch from the last resourceVersion), by result: \
             quiet, changes (proof once the watch hands them on), behind, failed",
            m.watch_probes.clone(),
        );
        r.register("bookmarks", "Watch bookmarks received", m.bookmarks.clone());
        r.register(
            "ingest_lag_seconds",
            "Time from an occurrence's own timestamp (series.lastObservedTime, eventTime or \
             lastTimestamp) to the engine observing it from the watch",
            m.ingest_lag.0.clone(),
        );
        for kind in WRITE_KINDS {
            let _ = m.write_latency.0.get_or_create(&KindLabels { kind });
        }
        r.register(
            "write_latency_seconds",
            "Time from when a series write was owed to the API server's answer that wrote it, by \
             kind: for a create from the occurrence that made the key a series, for a heartbeat \
             from when it was due, for a finish from the moment the loop could be finished (last \
             occurrence plus finishAfter; a gap or an eviction: when it happened)",
            m.write_latency.0.clone(),
        );
        for kind in WRITE_KINDS {
            let _ = m.writes_shed.get_or_create(&KindLabels { kind });
        }
        r.register(
            "names_taken",
            "Series names found held by an Event that is not the series' own (a create answered \
             409, then a read): the series took its next name",
            m.names_taken.clone(),
        );
        r.register(
            "landed_reports_dropped",
            "Reports of a create or heartbeat that landed, dropped because the controller had not \
             taken the earlier ones: that series' next heartbeat stays timed from when its write was \
             asked for, which is earlier",
            m.landed_dropped.clone(),
        );
        r.register(
            "writes_shed",
            "Series writes not queued because their namespace held its share of the pending writes \
             (--max-pending-writes-per-namespace), by kind; the series' next write carries its state",
            m.writes_shed.clone(),
        );
    }

    /// What a restart did: the restore of the own series objects and the first list.
    fn register_restart(r: &mut Registry, m: &Metrics) {
        r.register(
            "restore_tokens_expired",
            "Continue tokens of the restore's list of own series objects that expired (410: etcd \
             compacted the list's snapshot); the list went on from the token the API server offered",
            m.restore_tokens_expired.clone(),
        );
        r.register(
            "restart_buffer_flushes",
            "Times a restart replayed the first list of raw events before its end, because the \
             buffer reached --restart-buffer-bytes",
            m.restart_buffer_flushes.clone(),
        );
        r.register(
            "recovery_rejected",
            "Series objects not adopted at a restart because they failed a check (a copy from \
             another namespace, an edited or unparsable object), by reason",
            m.recovery_rejected.clone(),
        );
    }

    /// This replica's role and readiness.
    fn register_replica(r: &mut Registry, m: &Metrics) {
        r.register(
            "leader",
            "1 on the replica that holds the Lease (and without leader election), 0 on a standby",
            m.leader.clone(),
        );
        r.register(
            "ready",
            "1 while this replica's /readyz answers 200 (a standby included), else 0; refreshed \
             every 5 s",
            m.ready.clone(),
        );
        r.register(
            "runtime_tasks",
            "Tokio tasks alive in this process (connections, watches, timers), refreshed every 5 s: \
             flat once warm, or something leaks",
            m.runtime_tasks.clone(),
        );
    }

    /// A write landed `seconds` after it was owed (see `write_latency_seconds`).
    pub fn write_latency(&self, kind: event_series_core::intent::WriteKind, seconds: f64) {
        let kind = write_kind(kind);
        self.write_latency
            .0
            .get_or_create(&KindLabels { kind })
            .observe(seconds.max(0.0));
    }

    /// A write was shed: its namespace held its share of the pending writes.
    pub fn write_shed(&self, kind: event_series_core::intent::WriteKind) {
        self.writes_shed
            .get_or_create(&KindLabels {
                kind: write_kind(kind),
            })
            .inc();
    }

    pub fn request(&self, verb: &str, code: u16) {
        self.request_code(verb, &code.to_string());
    }

    /// One request answered with `code`: an HTTP status, `timeout` or `error`.
    pub fn request_code(&self, verb: &str, code: &str) {
        self.api_requests
            .get_or_create(&RequestLabels {
                verb: verb.to_owned(),
                code: code.to_owned(),
            })
            .inc();
    }

    pub fn dropped(&self, reason: &str, n: u64) {
        self.dropped.get_or_create(&label(reason)).inc_by(n);
    }

    /// Alerts posted (or not), by outcome; any but `sent` is trouble to report.
    pub fn alerts_sent(&self, outcome: &str, n: u64) {
        self.alerts_sent
            .get_or_create(&OutcomeLabels {
                outcome: outcome.to_owned(),
            })
            .inc_by(n);
        if outcome != "sent" {
            self.trouble.note(Kind::AlertsUndelivered, None, n);
        }
    }

    /// A completeness probe answered (see [`crate::input::completeness`]).
    pub fn watch_probe(&self, result: &'static str) {
        self.watch_probes
            .get_or_create(&ProbeLabels { result })
            .inc();
    }

    /// A series object not adopted at a restart.
    pub fn recovery_rejected(&self, reason: &str) {
        self.recovery_rejected.get_or_create(&label(reason)).inc();
    }

    /// Records the ingest lag of a raw event change received from the watch: `now` minus the latest
    /// occurrence the object reports (`series.lastObservedTime`, else `eventTime` for a new-style
    /// event; `lastTimestamp`, whole seconds, for a legacy one, so up to 1 s more). Clock skew that
    /// puts the occurrence in the future counts as 0. Listed objects are not recorded: their
    /// occurrences may be arbitrarily old.
    pub fn ingest_lag(
        &self,
        now: chrono::DateTime<chrono::Utc>,
        last: chrono::DateTime<chrono::Utc>,
    ) {
        let lag = (now - last).num_microseconds().unwrap_or(i64::MAX).max(0) as f64 / 1e6;
        self.ingest_lag.0.observe(lag);
    }

    /// Keeps `ready` equal to what `/readyz` answers, so that an alert can see a replica that is up
    /// but not ready (the probe only takes it out of the Service).
    pub fn watch_readiness(
        metrics: std::sync::Arc<Metrics>,
        health: std::sync::Arc<crate::operations::health::Health>,
    ) -> tokio::task::JoinHandle<()> {
        tokio::spawn(async move {
            let mut every = tokio::time::interval(std::time::Duration::from_secs(5));
            loop {
                every.tick().await;
                let ok = health.readiness(std::time::Instant::now()).is_ok();
                metrics.ready.set(i64::from(ok));
                let tasks = tokio::runtime::Handle::current()
                    .metrics()
                    .num_alive_tasks();
                metrics
                    .runtime_tasks
                    .set(i64::try_from(tasks).unwrap_or(i64::MAX));
            }
        })
    }

    /// The engine's counts for [`ONGOING_AGES`], in that order.
    pub fn set_ongoing_ages(&self, counts: [u64; ONGOING_AGES.len()]) {
        for ((duration, _), n) in ONGOING_AGES.iter().zip(counts) {
            self.ongoing_longer_than
                .get_or_create(&AgeLabels {
                    duration: (*duration).to_owned(),
                })
                .set(i64::try_from(n).unwrap_or(i64::MAX));
        }
    }

    /// The bounds of [`ONGOING_AGES`] for [`event_series_core::engine::Engine::ongoing_longer_than`].
    pub fn ongoing_bounds() -> [chrono::TimeDelta; ONGOING_AGES.len()] {
        ONGOING_AGES.map(|(_, secs)| chrono::TimeDelta::seconds(secs))
    }

    /// Copies the growth of the engine's counters since the last call.
    pub fn sync_engine(&self, stats: &Stats, active: usize) {
        let grow =
            |seen: &AtomicU64, now: u64| now.saturating_sub(seen.swap(now, Ordering::Relaxed));
        let s = &self.seen;
        self.occurrences
            .inc_by(grow(&s.occurrences, stats.occurrences));
        self.series_started
            .inc_by(grow(&s.started, stats.series_started));
        self.series_finished
            .inc_by(grow(&s.finished, stats.series_finished));
        self.series_reopened
            .inc_by(grow(&s.reopened, stats.series_reopened));
        for (reason, seen, now) in [
            ("lone", &s.lone, stats.lone),
            ("filtered", &s.filtered, stats.dropped_filtered),
            ("stale", &s.stale, stats.dropped_stale),
        ] {
            let n = grow(seen, now);
            if n > 0 {
                self.dropped(reason, n);
            }
        }
        for (reason, seen, now) in [
            (
                "max_active_series",
                &s.evicted_global,
                stats.evicted_by_policy,
            ),
            (
                "max_active_series_per_namespace",
                &s.evicted_namespace,
                stats.evicted_by_namespace,
            ),
            (
                "namespace_deleted",
                &s.evicted_namespace_deleted,
                stats.evicted_namespace_deleted,
            ),
            ("key_bytes", &s.evicted_bytes, stats.evicted_by_bytes),
        ] {
            let n = grow(seen, now);
            if n > 0 {
                self.series_evicted.get_or_create(&label(reason)).inc_by(n);
                if reason == "key_bytes" {
                    self.trouble.note(Kind::KeysGivenUp, None, n);
                }
            }
        }
        self.series_active.set(active as i64);
    }
}

fn label(reason: &str) -> DropLabels {
    DropLabels {
        reason: reason.to_owned(),
    }
}

/// The Prometheus text exposition of a registry.
pub fn encode(registry: &Registry) -> String {
    let mut out = String::new();
    // Writing into a String cannot fail.
    let _ = prometheus_client::encoding::text::encode(&mut out, registry);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn exports_the_spec_names() {
        let m = Arc::new(Metrics::default());
        let registry = Metrics::registry(&m);
        m.request("create", 201);
        m.watch_relists.inc();
        m.sync_engine(
            &Stats {
                occurrences: 5,
                dropped_filtered: 2,
                ..Default::default()
            },
            3,
        );
        m.sync_engine(
            &Stats {
                occurrences: 7,
                dropped_filtered: 2,
                evicted_by_policy: 1,
                ..Default::default()
            },
            3,
        );
        let text = encode(&registry);
        for line in [
            "event_series_occurrences_total 7",
            "event_series_series_active 3",
            "event_series_watch_relists_total 1",
            "event_series_api_requests_total{verb=\"create\",code=\"201\"} 1",
            "event_series_dropped_total{reason=\"filtered\"} 2",
            "event_series_bookmarks_total 0",
            "event_series_watch_restarts_total 0",
            "event_series_series_started_total 0",
            "event_series_series_finished_total 0",
            "event_series_series_reopened_total 0",
            "event_series_dropped_total{reason=\"stale\"} 0",
            "event_series_series_evicted_total{reason=\"max_active_series\"} 1",
            "event_series_recovery_rejected_total{reason=\"key_mismatch\"} 0",
            "event_series_fields_truncated_total 0",
            "event_series_ingest_lag_seconds_count 0",
            "event_series_write_latency_seconds_count{kind=\"create\"} 0",
            "event_series_write_latency_seconds_count{kind=\"heartbeat\"} 0",
            "event_series_write_latency_seconds_count{kind=\"finish\"} 0",
            "event_series_runtime_tasks 0",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "{line} missing in:\n{text}"
            );
        }
        // Read at scrape time, so only their names are known here.
        for family in [
            "process_cpu_seconds_total ",
            "process_resident_memory_bytes ",
            "process_open_fds ",
            "process_max_fds ",
            "process_start_time_seconds ",
            "event_series_build_info{version=\"",
        ] {
            assert!(
                text.lines().any(|l| l.starts_with(family)),
                "{family} missing in:\n{text}"
            );
        }
    }

    #[test]
    fn ingest_lag_is_now_minus_the_occurrence_and_never_negative() {
        let m = Arc::new(Metrics::default());
        let registry = Metrics::registry(&m);
        let t = chrono::DateTime::parse_from_rfc3339("2026-01-01T00:00:00.250000Z")
            .unwrap()
            .to_utc();
        m.ingest_lag(t + chrono::Duration::milliseconds(1500), t);
        m.ingest_lag(t, t + chrono::Duration::seconds(3)); // occurrence in the future: 0
        let text = encode(&registry);
        for line in [
            "event_series_ingest_lag_seconds_count 2",
            "event_series_ingest_lag_seconds_sum 1.5",
            "event_series_ingest_lag_seconds_bucket{le=\"0.001\"} 1",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "{line} missing in:\n{text}"
            );
        }
        // 1.5 s lies between the bounds 0.001 * 1.5^18 (1.478 s) and 0.001 * 1.5^19 (2.217 s).
        let below = text
            .lines()
            .find(|l| l.starts_with("event_series_ingest_lag_seconds_bucket{le=\"1.47"))
            .unwrap();
        assert!(below.ends_with(" 1"), "{below}");
        let above = text
            .lines()
            .find(|l| l.starts_with("event_series_ingest_lag_seconds_bucket{le=\"2.21"))
            .unwrap();
        assert!(above.ends_with(" 2"), "{above}");
    }
}
