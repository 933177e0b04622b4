//! Alert delivery while this replica leads: the planner fed from the controller, the outbox, and the
//! delivery task, which ends with the term (a deposed leader posts nothing more).

use super::alertmanager::{Alertmanagers, Target};
use super::outbox::Outbox;
use super::{Input, Limits, Planner};
use crate::operations::health::Health;
use crate::operations::metrics::Metrics;
use chrono::{DateTime, TimeDelta, Utc};
use event_series_core::engine::Engine;
use event_series_core::intent::{Intent, WriteKind};
use std::sync::Arc;

/// `--alertmanager-*` and `--alert-*` flags.
#[derive(Clone, Debug)]
pub struct AlertConfig {
    pub target: Target,
    /// How often every firing alert is posted again.
    pub resend: TimeDelta,
    pub limits: Limits,
    /// Most bytes of alerts waiting for delivery (`--alert-outbox-bytes`).
    pub outbox_bytes: usize,
}

/// Most alerts waiting for delivery.
const OUTBOX: usize = 20_000;

pub struct Delivery {
    planner: Planner,
    outbox: Arc<Outbox>,
    delivery: tokio::task::JoinHandle<()>,
    metrics: Arc<Metrics>,
}

impl Delivery {
    pub fn start(
        config: &AlertConfig,
        metrics: Arc<Metrics>,
        health: Arc<Health>,
    ) -> anyhow::Result<Delivery> {
        let to = Alertmanagers::new(config.target.clone())?;
        let outbox = Arc::new(Outbox::new(OUTBOX, config.outbox_bytes));
        let delivery = tokio::spawn(outbox.clone().deliver(to, metrics.clone(), health));
        Ok(Delivery {
            planner: Planner::new(config.resend, config.limits),
            outbox,
            delivery,
            metrics,
        })
    }

    fn offer(&self, alert: super::Alert) {
        let given_up = self.outbox.offer(alert);
        if given_up > 0 {
            self.metrics.alerts_sent("dropped", given_up as u64);
        }
    }

    /// An intent on its way to the writer: a finish resolves its loop's alert.
    pub fn intent(&mut self, engine: &Engine, intent: &Intent) {
        if !matches!(intent.kind, WriteKind::Finish(_)) {
            return;
        }
        let s = &intent.series;
        let rule = engine.alert_rule(&s.namespace).map(Arc::as_ref);
        if let Some(alert) = self.planner.ended(s, rule, intent.due.min(Utc::now())) {
            self.offer(alert);
        }
    }

    /// The periodic scan of the engine's loops, holding `input`.
    pub fn scan(&mut self, engine: &Engine, now: DateTime<Utc>, input: Input) {
        let alerts = match input {
            Input::Restored => self.planner.scan_restored(engine, now),
            Input::Complete => self.planner.scan(engine, now),
        };
        for alert in alerts {
            self.offer(alert);
        }
        self.metrics.alerts_firing.set(self.planner.firing() as i64);
        self.metrics
            .alerts_over_limit
            .set(self.planner.over_limit() as i64);
    }
}

impl Drop for Delivery {
    fn drop(&mut self) {
        self.delivery.abort();
    }
}
