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
/// when an Alertmanager is configured.
pub struct LoopReports {
    gauge: LoopGauge,
    alerts: Option<Delivery>,
}

impl LoopReports {
    pub fn new(
        alerts: Option<&AlertConfig>,
        max_label_sets: usize,
        event_ttl: TimeDelta,
        (metrics, health): (&Arc<Metrics>, &Arc<Health>),
    ) -> anyhow::Result<LoopReports> {
        Ok(LoopReports {
            gauge: LoopGauge::new(max_label_sets, event_ttl, metrics.loop_rows.clone()),
            alerts: alerts
                .map(|c| Delivery::start(c, metrics.clone(), health.clone()))
                .transpose()?,
        })
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
