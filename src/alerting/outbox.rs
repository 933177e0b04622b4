//! Alerts on their way to Alertmanager: a bounded queue that coalesces by alert (the newest post of
//! one alert replaces an older one still waiting) and a task that delivers it in batches, retrying
//! with backoff. The controller only ever calls [`Outbox::offer`], which never waits: an
//! Alertmanager that is down or slow delays alerts, never the series writes.

use super::Alert;
use super::alertmanager::Alertmanagers;
use crate::operations::health::Health;
use crate::operations::metrics::Metrics;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};
use tokio::sync::Notify;

/// Most alerts in one post.
const BATCH: usize = 500;

type Labels = BTreeMap<&'static str, String>;

#[derive(Default)]
struct Pending {
    alerts: HashMap<Labels, Alert>,
    order: VecDeque<Labels>,
}

pub struct Outbox {
    pending: Mutex<Pending>,
    wake: Notify,
    capacity: usize,
}

impl Outbox {
    pub fn new(capacity: usize) -> Outbox {
        Outbox {
            pending: Mutex::new(Pending::default()),
            wake: Notify::new(),
            capacity,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Pending> {
        self.pending.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Queues `alert`, replacing a post of the same alert still waiting. `false` when the queue is
    /// full and it is dropped (a firing alert is posted again at the next resend).
    pub fn offer(&self, alert: Alert) -> bool {
        let mut p = self.lock();
        if let Some(waiting) = p.alerts.get_mut(&alert.labels) {
            *waiting = alert;
        } else if p.alerts.len() >= self.capacity {
            return false;
        } else {
            p.order.push_back(alert.labels.clone());
            p.alerts.insert(alert.labels.clone(), alert);
        }
        drop(p);
        self.wake.notify_one();
        true
    }

    pub fn len(&self) -> usize {
        self.lock().alerts.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Up to `n` alerts, oldest first.
    fn take(&self, n: usize) -> Vec<Alert> {
        let mut p = self.lock();
        let mut out = Vec::with_capacity(n.min(p.alerts.len()));
        while out.len() < n {
            let Some(labels) = p.order.pop_front() else {
                break;
            };
            out.extend(p.alerts.remove(&labels));
        }
        out
    }

    /// Puts back a batch that was not delivered, ahead of newer alerts; an alert posted again
    /// meanwhile keeps its newer post.
    fn put_back(&self, batch: Vec<Alert>) {
        let mut p = self.lock();
        for alert in batch.into_iter().rev() {
            if p.alerts.contains_key(&alert.labels) {
                continue;
            }
            p.order.push_front(alert.labels.clone());
            p.alerts.insert(alert.labels.clone(), alert);
        }
    }

    /// Delivers what is offered until the task is aborted (when the leader's term ends).
    pub async fn deliver(
        self: Arc<Self>,
        to: Alertmanagers,
        metrics: Arc<Metrics>,
        health: Arc<Health>,
    ) {
        let mut delays =
            crate::api::retry::delays(Duration::from_millis(500), Duration::from_secs(10));
        let mut last_warning: Option<Instant> = None;
        let mut failing_since: Option<Instant> = None;
        loop {
            let batch = self.take(BATCH);
            if batch.is_empty() {
                self.wake.notified().await;
                continue;
            }
            let n = batch.len() as u64;
            let body = match serde_json::to_vec(&batch) {
                Ok(body) => body,
                Err(e) => {
                    // Plain strings and times: cannot fail; counted rather than retried forever.
                    tracing::error!(error = %e, "alerts could not be encoded; dropped");
                    metrics.alerts_sent("dropped", n);
                    continue;
                }
            };
            let errors = to.post(body.into()).await;
            let delivered = errors.len() < to.len();
            let refused = !errors.is_empty() && errors.iter().all(|e| e.is_permanent());
            if delivered || refused {
                if delivered {
                    metrics.alerts_sent("sent", n);
                } else {
                    for e in &errors {
                        tracing::warn!(error = %e, alerts = n, "Alertmanager refused alerts; not retried");
                    }
                    metrics.alerts_sent("rejected", n);
                }
                if failing_since.take().is_some() {
                    health.alerts_failing_since(None);
                }
                delays =
                    crate::api::retry::delays(Duration::from_millis(500), Duration::from_secs(10));
                continue;
            }
            metrics.alerts_sent("failed", n);
            if failing_since.is_none() {
                failing_since = Some(Instant::now());
                health.alerts_failing_since(failing_since);
            }
            if last_warning.is_none_or(|t| t.elapsed() >= Duration::from_secs(10)) {
                last_warning = Some(Instant::now());
                for e in &errors {
                    tracing::warn!(error = %e, alerts = n, "posting alerts to Alertmanager failed; retrying");
                }
            }
            self.put_back(batch);
            tokio::time::sleep(delays.next().unwrap_or(Duration::from_secs(10))).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{DateTime, Utc};

    fn alert(series: &str, count: u64) -> Alert {
        Alert {
            labels: [("series", series.to_owned())].into(),
            annotations: [("count", count.to_string())].into(),
            starts_at: DateTime::<Utc>::UNIX_EPOCH,
            ends_at: DateTime::<Utc>::UNIX_EPOCH,
        }
    }

    #[test]
    fn posts_of_one_alert_coalesce_and_the_queue_is_bounded() {
        let out = Outbox::new(2);
        assert!(out.offer(alert("a", 1)));
        assert!(out.offer(alert("b", 1)));
        assert!(out.offer(alert("a", 2)), "a newer post of a waiting alert");
        assert!(!out.offer(alert("c", 1)), "full");
        let batch = out.take(10);
        assert_eq!(batch.len(), 2);
        assert_eq!(batch[0].annotations["count"], "2");
        assert!(out.is_empty());
    }

    #[test]
    fn an_undelivered_batch_goes_back_behind_nothing_newer() {
        let out = Outbox::new(10);
        out.offer(alert("a", 1));
        out.offer(alert("b", 1));
        let batch = out.take(10);
        out.offer(alert("a", 2));
        out.put_back(batch);
        let again = out.take(10);
        assert_eq!(again.len(), 2);
        let a = again.iter().find(|x| x.series() == "a").unwrap();
        assert_eq!(a.annotations["count"], "2", "the newer post wins");
    }
}
