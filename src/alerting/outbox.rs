//! Alerts on their way to Alertmanager: a bounded queue that coalesces by alert (the newest post of
//! one alert replaces an older one still waiting) and a task that delivers it in batches, retrying
//! with backoff. The controller only ever calls [`Outbox::offer`], which never waits: an
//! Alertmanager that is down or slow delays alerts, never the series writes.

use super::Alert;
use super::alertmanager::Alertmanagers;
use crate::operations::health::Health;
use crate::operations::metrics::Metrics;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};
use tokio::sync::Notify;

/// Most alerts in one post.
const BATCH: usize = 500;

/// About what one map entry costs besides its text: key, `String` header, the node's share.
const ENTRY: usize = 64;

type Labels = BTreeMap<&'static str, String>;

struct Queued {
    /// Place in the delivery order: lower goes first.
    seq: i64,
    bytes: usize,
    alert: Alert,
}

/// What one namespace holds in the queue.
#[derive(Default)]
struct Share {
    bytes: usize,
    seqs: BTreeSet<i64>,
}

#[derive(Default)]
struct Pending {
    alerts: HashMap<Labels, Queued>,
    order: BTreeMap<i64, Labels>,
    namespaces: HashMap<String, Share>,
    /// `(bytes, namespace)` of every namespace with alerts waiting: the heaviest last.
    heaviest: BTreeSet<(usize, String)>,
    bytes: usize,
    /// The next places at the front (a batch put back) and at the back (a new alert).
    front: i64,
    back: i64,
}

/// The bytes an alert holds while it waits, about: its texts, its labels twice (the queue's key
/// and its place in the order), and the entries around them.
pub fn size(alert: &Alert) -> usize {
    let texts =
        |m: &BTreeMap<&'static str, String>| m.values().map(|v| v.len() + ENTRY).sum::<usize>();
    2 * texts(&alert.labels) + texts(&alert.annotations) + std::mem::size_of::<Queued>() + ENTRY
}

fn namespace(alert: &Alert) -> &str {
    alert.labels.get("namespace").map_or("", String::as_str)
}

impl Pending {
    fn share(&self, ns: &str) -> usize {
        self.namespaces.get(ns).map_or(0, |s| s.bytes)
    }

    fn add(&mut self, seq: i64, alert: Alert) {
        let bytes = size(&alert);
        let ns = namespace(&alert).to_owned();
        let share = self.namespaces.entry(ns.clone()).or_default();
        self.heaviest.remove(&(share.bytes, ns.clone()));
        share.bytes += bytes;
        share.seqs.insert(seq);
        self.heaviest.insert((share.bytes, ns));
        self.bytes += bytes;
        self.order.insert(seq, alert.labels.clone());
        self.alerts
            .insert(alert.labels.clone(), Queued { seq, bytes, alert });
    }

    fn remove(&mut self, labels: &Labels) -> Option<Queued> {
        let q = self.alerts.remove(labels)?;
        self.order.remove(&q.seq);
        let ns = namespace(&q.alert).to_owned();
        if let Some(share) = self.namespaces.get_mut(&ns) {
            self.heaviest.remove(&(share.bytes, ns.clone()));
            share.bytes -= q.bytes;
            share.seqs.remove(&q.seq);
            if share.seqs.is_empty() {
                self.namespaces.remove(&ns);
            } else {
                self.heaviest.insert((share.bytes, ns));
            }
        }
        self.bytes -= q.bytes;
        Some(q)
    }

    /// Queues `alert` at `seq` within the bounds: while they leave no room, the namespace holding
    /// the most bytes (this alert counted in its own) gives up its newest alert, or this one when
    /// it is that namespace. How many alerts were given up.
    fn admit(&mut self, seq: i64, alert: Alert, bounds: (usize, usize)) -> usize {
        let (max_alerts, max_bytes) = bounds;
        let bytes = size(&alert);
        let own = self.share(namespace(&alert)) + bytes;
        let mut dropped = 0;
        while self.alerts.len() >= max_alerts || self.bytes + bytes > max_bytes {
            let newest = match self.heaviest.last() {
                Some((held, ns)) if *held > own => self
                    .namespaces
                    .get(ns)
                    .and_then(|s| s.seqs.last())
                    .and_then(|seq| self.order.get(seq))
                    .cloned(),
                _ => None,
            };
            let Some(labels) = newest else {
                return dropped + 1;
            };
            self.remove(&labels);
            dropped += 1;
        }
        self.add(seq, alert);
        dropped
    }
}

pub struct Outbox {
    pending: Mutex<Pending>,
    wake: Notify,
    capacity: usize,
    max_bytes: usize,
}

impl Outbox {
    /// At most `capacity` alerts of together at most `max_bytes` (by [`size`]).
    pub fn new(capacity: usize, max_bytes: usize) -> Outbox {
        Outbox {
            pending: Mutex::new(Pending::default()),
            wake: Notify::new(),
            capacity,
            max_bytes,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Pending> {
        self.pending.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Queues `alert`, replacing a post of the same alert still waiting (in its place). When the
    /// queue is full, the namespace holding the most of its bytes gives up its newest alerts (a
    /// firing alert is posted again at the next resend), so a namespace within its share never
    /// pays for another's flood. How many alerts were given up, `alert` included if it was.
    pub fn offer(&self, alert: Alert) -> usize {
        let mut p = self.lock();
        let seq = match p.remove(&alert.labels) {
            Some(waiting) => waiting.seq,
            None => {
                p.back += 1;
                p.back
            }
        };
        let dropped = p.admit(seq, alert, (self.capacity, self.max_bytes));
        drop(p);
        self.wake.notify_one();
        dropped
    }

    pub fn len(&self) -> usize {
        self.lock().alerts.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The bytes waiting, by [`size`].
    pub fn bytes(&self) -> usize {
        self.lock().bytes
    }

    /// Up to `n` alerts, oldest first.
    fn take(&self, n: usize) -> Vec<Alert> {
        let mut p = self.lock();
        let mut out = Vec::with_capacity(n.min(p.alerts.len()));
        while out.len() < n {
            let Some(labels) = p.order.first_key_value().map(|(_, l)| l.clone()) else {
                break;
            };
            out.extend(p.remove(&labels).map(|q| q.alert));
        }
        out
    }

    /// Puts back a batch that was not delivered, ahead of newer alerts, within the bounds; an
    /// alert posted again meanwhile keeps its newer post. How many were given up.
    fn put_back(&self, batch: Vec<Alert>) -> usize {
        let mut p = self.lock();
        let mut dropped = 0;
        for alert in batch.into_iter().rev() {
            if p.alerts.contains_key(&alert.labels) {
                continue;
            }
            p.front -= 1;
            let seq = p.front;
            dropped += p.admit(seq, alert, (self.capacity, self.max_bytes));
        }
        dropped
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
            let given_up = self.put_back(batch);
            if given_up > 0 {
                metrics.alerts_sent("dropped", given_up as u64);
            }
            tokio::time::sleep(delays.next().unwrap_or(Duration::from_secs(10))).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{DateTime, TimeDelta, Utc};

    fn alert_in(ns: &str, series: &str, count: u64) -> Alert {
        Alert {
            labels: [("namespace", ns.to_owned()), ("series", series.to_owned())].into(),
            annotations: [("count", count.to_string())].into(),
            starts_at: DateTime::<Utc>::UNIX_EPOCH,
            ends_at: DateTime::<Utc>::UNIX_EPOCH,
        }
    }

    fn alert(series: &str, count: u64) -> Alert {
        alert_in("shop", series, count)
    }

    #[test]
    fn posts_of_one_alert_coalesce_and_the_queue_is_bounded() {
        let out = Outbox::new(2, usize::MAX);
        assert_eq!(out.offer(alert("a", 1)), 0);
        assert_eq!(out.offer(alert("b", 1)), 0);
        assert_eq!(
            out.offer(alert("a", 2)),
            0,
            "a newer post of a waiting alert"
        );
        assert_eq!(out.offer(alert("c", 1)), 1, "full");
        let batch = out.take(10);
        assert_eq!(batch.len(), 2);
        assert_eq!(batch[0].annotations["count"], "2");
        assert!(out.is_empty() && out.bytes() == 0);
    }

    #[test]
    fn an_undelivered_batch_goes_back_behind_nothing_newer() {
        let out = Outbox::new(10, usize::MAX);
        out.offer(alert("a", 1));
        out.offer(alert("b", 1));
        let batch = out.take(10);
        out.offer(alert("a", 2));
        out.offer(alert("c", 1));
        out.put_back(batch);
        let again = out.take(10);
        let order: Vec<&str> = again.iter().map(Alert::series).collect();
        assert_eq!(order, ["b", "a", "c"]);
        assert_eq!(again[1].annotations["count"], "2", "the newer post wins");
    }

    #[test]
    fn a_full_outbox_gives_up_the_alerts_of_the_namespace_holding_the_most_bytes() {
        let one = size(&alert_in("flood", "f-0", 1));
        let out = Outbox::new(usize::MAX, one * 10);
        for i in 0..10 {
            assert_eq!(out.offer(alert_in("flood", &format!("f-{i}"), 1)), 0);
        }
        assert_eq!(out.offer(alert_in("flood", "f-10", 1)), 1, "its own newest");
        assert_eq!(out.offer(alert_in("quiet", "q-0", 1)), 1, "one of flood's");
        assert_eq!(out.offer(alert_in("quiet", "q-1", 1)), 1);
        let left: Vec<String> = out
            .take(100)
            .iter()
            .map(|a| a.series().to_owned())
            .collect();
        assert!(
            left.contains(&"q-0".into()) && left.contains(&"q-1".into()),
            "{left:?}"
        );
        assert!(!left.contains(&"f-9".into()) && !left.contains(&"f-8".into()));
        assert!(left.contains(&"f-0".into()), "the oldest stay: {left:?}");
    }

    /// Alertmanager is down while 20,000 loops in 100 namespaces alert, each with a 4 KB note,
    /// and every one is posted again at the next resend: the outbox stays within its bytes, by its
    /// own measure and by the JSON it would post, and every namespace keeps alerts waiting.
    #[test]
    fn twenty_thousand_loops_with_4_kb_notes_stay_within_the_byte_bound() {
        use event_series_core::alert::AlertRule;
        use event_series_core::key::{KeyId, ObjectRef, SeriesKey};
        const BOUND: usize = 32 << 20;
        let out = Outbox::new(20_000, BOUND);
        let note = "Back-off restarting failed container; ".repeat(4096 / 38 + 1);
        let rule = AlertRule::default();
        let first = DateTime::<Utc>::UNIX_EPOCH + TimeDelta::days(20_000);
        let mut given_up = 0;
        for resend in 0..2 {
            for i in 0..20_000_u64 {
                let (ns, pod) = (format!("tenant-{:03}", i % 100), format!("web-{i}"));
                let key = SeriesKey {
                    namespace: ns.as_str(),
                    regarding: ObjectRef {
                        api_version: "v1",
                        kind: "Pod",
                        namespace: ns.as_str(),
                        name: pod.as_str(),
                        uid: "",
                        field_path: "spec.containers{app}",
                    },
                    related: None,
                    action: "",
                    reason: "BackOff",
                    reporting_controller: "kubelet",
                    reporting_instance: "node-1",
                    type_: "Warning",
                };
                let lp = super::super::Loop {
                    id: KeyId::new(u128::from(i)),
                    namespace: &ns,
                    key: &key,
                    note: &note,
                    count: 5 + resend,
                    first,
                    last: first + TimeDelta::minutes(5),
                };
                given_up += out.offer(lp.firing(&rule, first + TimeDelta::minutes(9), first));
            }
        }
        let (held, bytes) = (out.len(), out.bytes());
        let waiting = out.take(usize::MAX);
        let json: usize = waiting
            .iter()
            .map(|a| serde_json::to_vec(a).map_or(0, |v| v.len()))
            .sum();
        let per_namespace = waiting
            .iter()
            .fold(HashMap::<&str, usize>::new(), |mut m, a| {
                *m.entry(namespace(a)).or_default() += 1;
                m
            });
        println!("{held} alerts, {bytes} bytes ({json} of JSON) waiting, {given_up} given up");
        assert!(bytes <= BOUND, "{bytes} bytes over {BOUND}");
        assert!(
            json <= bytes,
            "the measure undercounts: {json} of JSON in {bytes}"
        );
        assert!(held < 20_000 && given_up > 0);
        assert_eq!(per_namespace.len(), 100);
        let (least, most) = (per_namespace.values().min(), per_namespace.values().max());
        assert!(
            most.zip(least).is_some_and(|(m, l)| m - l <= 1),
            "{per_namespace:?}"
        );
    }
}
