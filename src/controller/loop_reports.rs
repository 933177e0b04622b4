//! What the controller reports about loops besides their writes: the `loops` gauge, and the alerts
//! when an Alertmanager is configured. Both learn of finishes from the intents on their way to the
//! writer, and of the rest from the engine on their own schedules.

use crate::alerting::{AlertConfig, Delivery, Input};
use crate::operations::health::Health;
use crate::operations::metrics::{LoopGauge, Metrics};
use chrono::{DateTime, TimeDelta, Utc};
use event_series_core::engine::Engine;
use event_series_core::intent::{Intent, WriteKind};
use std::sync::Arc;

/// What the controller derives from the engine besides writes: the `loops` gauge, and the alerts
/// when an Alertmanager is configured. Alerts are posted only while this replica leads
/// ([`LoopReports::lead`]): a standby's engine is current, but the leader speaks for the loops.
pub struct LoopReports {
    gauge: LoopGauge,
    alerts: Option<Delivery>,
    /// Alertmanager, until this replica leads.
    waiting: Option<(AlertConfig, Arc<Metrics>, Arc<Health>)>,
}

impl LoopReports {
    pub fn new(
        alerts: Option<&AlertConfig>,
        max_label_sets: usize,
        event_ttl: TimeDelta,
        (metrics, health): (&Arc<Metrics>, &Arc<Health>),
    ) -> LoopReports {
        LoopReports {
            gauge: LoopGauge::new(max_label_sets, event_ttl, metrics.loop_rows.clone()),
            alerts: None,
            waiting: alerts.map(|c| (c.clone(), metrics.clone(), health.clone())),
        }
    }

    /// This replica leads: its alerts start (a new leader posts every firing loop at its first
    /// scan). Whether anything changed.
    pub fn lead(&mut self) -> anyhow::Result<bool> {
        let Some((config, metrics, health)) = self.waiting.take() else {
            return Ok(false);
        };
        self.alerts = Some(Delivery::start(&config, metrics, health)?);
        Ok(true)
    }

    pub fn alerting(&self) -> bool {
        self.alerts.is_some()
    }

    /// An intent on its way to the writer.
    pub fn intent(&mut self, engine: &Engine, intent: &Intent) {
        if let WriteKind::Finish(_) = intent.kind {
            let key = intent.series.key.view();
            self.gauge
                .finished(&intent.series.namespace, key.reason, key.type_, intent.due);
        }
        if let Some(alerts) = &mut self.alerts {
            alerts.intent(engine, intent);
        }
    }

    /// The gauge, refreshed on the housekeeping schedule.
    pub fn housekeep(&mut self, engine: &Engine, now: DateTime<Utc>) {
        self.gauge.update(engine, now);
    }

    /// The alert scan, of an engine that holds `input`.
    pub fn scan(&mut self, engine: &Engine, now: DateTime<Utc>, input: Input) {
        if let Some(alerts) = &mut self.alerts {
            alerts.scan(engine, now, input);
        }
    }
}
