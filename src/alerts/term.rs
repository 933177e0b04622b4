//! Alerting during one leader's term: the planner fed from the controller, the outbox, and the
//! delivery task, which ends with the term (a deposed leader posts nothing more).

use super::client::{Alertmanagers, Target};
use super::outbox::Outbox;
use super::{Limits, Planner};
use crate::engine::Engine;
use crate::health::Health;
use crate::intent::{Intent, WriteKind};
use crate::metrics::Metrics;
use chrono::{DateTime, TimeDelta, Utc};
use std::sync::Arc;

/// `--alertmanager-*` and `--alert-*` flags.
#[derive(Clone, Debug)]
pub struct AlertConfig {
    pub target: Target,
    /// How often every firing alert is posted again.
    pub resend: TimeDelta,
    pub limits: Limits,
}

/// Most alerts waiting for delivery.
const OUTBOX: usize = 20_000;

pub struct Term {
    planner: Planner,
    outbox: Arc<Outbox>,
    delivery: tokio::task::JoinHandle<()>,
    metrics: Arc<Metrics>,
}

impl Term {
    pub fn start(
        config: &AlertConfig,
        metrics: Arc<Metrics>,
        health: Arc<Health>,
    ) -> anyhow::Result<Term> {
        let to = Alertmanagers::new(config.target.clone())?;
        let outbox = Arc::new(Outbox::new(OUTBOX));
        let delivery = tokio::spawn(outbox.clone().deliver(to, metrics.clone(), health));
        Ok(Term {
            planner: Planner::new(config.resend, config.limits),
            outbox,
            delivery,
            metrics,
        })
    }

    fn offer(&self, alert: super::Alert) {
        if !self.outbox.offer(alert) {
            self.metrics.alerts_sent("dropped", 1);
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

    /// The periodic scan of the engine's loops.
    pub fn scan(&mut self, engine: &Engine, now: DateTime<Utc>) {
        for alert in self.planner.scan(engine, now) {
            self.offer(alert);
        }
        self.metrics.alerts_firing.set(self.planner.firing() as i64);
        self.metrics
            .alerts_over_limit
            .set(self.planner.over_limit() as i64);
    }
}

impl Drop for Term {
    fn drop(&mut self) {
        self.delivery.abort();
    }
}

/// What the controller derives from the engine besides writes: the `loops` gauge, and the alerts
/// when an Alertmanager is configured.
pub struct Loops {
    gauge: crate::metrics::Loops,
    alerts: Option<Term>,
}

impl Loops {
    pub fn new(
        alerts: Option<&AlertConfig>,
        max_label_sets: usize,
        event_ttl: TimeDelta,
        (metrics, health): (&Arc<Metrics>, &Arc<Health>),
    ) -> anyhow::Result<Loops> {
        Ok(Loops {
            gauge: crate::metrics::Loops::new(max_label_sets, event_ttl, metrics.loop_rows.clone()),
            alerts: alerts
                .map(|c| Term::start(c, metrics.clone(), health.clone()))
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

    /// The alert scan.
    pub fn scan(&mut self, engine: &Engine, now: DateTime<Utc>) {
        if let Some(alerts) = &mut self.alerts {
            alerts.scan(engine, now);
        }
    }
}
