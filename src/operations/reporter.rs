//! The shell around [`super::explain`]: once a second the controller hands it the trouble counted
//! since ([`super::trouble`]); while this replica leads, the Events that are due are published with
//! kube's `Recorder` (events.k8s.io/v1; a repeat of the same reason on the same object within its
//! cache's lifetime becomes a series of that Event) and each policy's `Degraded` condition is
//! handed to the status writer when what it says changes. A standby drains and forgets: the
//! leader reports.
//!
//! The operator's Events are recognised in its input by their `reportingController`
//! ([`REPORTING_CONTROLLER`]) and never counted ([`crate::input::feed`]), so that they cannot feed
//! a loop of their own; a tenant who forges that controller only keeps their own Events uncounted.

use super::explain::{self, Explain, Target};
use super::trouble::{Kind, Trouble};
use crate::config::policy_watch::PolicyWatch;
use crate::config::status::StatusPatch;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::{Client, Resource, ResourceExt};
use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// The `reportingController` of the operator's Events about itself.
pub const REPORTING_CONTROLLER: &str = "eventseries.dev/operator";

/// Events waiting for the publishing task; more are dropped (logged), never waited for.
const QUEUE: usize = 64;

#[derive(Clone, Debug)]
pub struct ReportConfig {
    /// At most one Event per reason and object per interval.
    pub interval: Duration,
    /// How long `Degraded` stays True after the last trouble.
    pub quiet: Duration,
    /// The operator's own Pod (namespace, name), from the Downward API; without it, what would be
    /// reported on the Pod is only logged.
    pub pod: Option<(String, String)>,
    /// This replica's `reportingInstance` (its identity in the election).
    pub instance: String,
}

impl ReportConfig {
    /// The Pod this process runs in, from the Downward API (`POD_NAMESPACE`, `POD_NAME`).
    pub fn own_pod() -> Option<(String, String)> {
        let var = |name| std::env::var(name).ok().filter(|v| !v.is_empty());
        Some((var("POD_NAMESPACE")?, var("POD_NAME")?))
    }
}

impl Default for ReportConfig {
    fn default() -> Self {
        ReportConfig {
            interval: Duration::from_secs(60),
            quiet: Duration::from_secs(300),
            pod: None,
            instance: String::new(),
        }
    }
}

/// The reporting state of this replica, and the task that publishes its Events.
pub struct Explainer {
    config: ReportConfig,
    explain: Explain,
    events: mpsc::Sender<(ObjectReference, Kind, String)>,
    publisher: JoinHandle<()>,
    /// The `Degraded` condition last handed to the status writer, per policy uid.
    sent: HashMap<String, Condition>,
    /// Since when this replica leads, while it does.
    leading: Option<Instant>,
}

impl Explainer {
    /// Starts the publishing task.
    pub fn start(client: &Client, config: ReportConfig) -> Explainer {
        let recorder = Recorder::new(
            client.clone(),
            Reporter {
                controller: REPORTING_CONTROLLER.into(),
                instance: Some(config.instance.clone()),
            },
        );
        let (events, rx) = mpsc::channel(QUEUE);
        Explainer {
            explain: Explain::new(config.interval, config.quiet),
            config,
            events,
            publisher: tokio::spawn(publish(recorder, rx)),
            sent: HashMap::new(),
            leading: None,
        }
    }

    /// Takes what `trouble` counted; while `leading`, publishes what is due and hands on the
    /// `Degraded` conditions that changed.
    pub fn tick(&mut self, trouble: &Trouble, policies: &PolicyWatch, leading: bool) {
        let counted = trouble.drain();
        let now = Instant::now();
        if !leading {
            if self.leading.take().is_some() {
                // Another replica leads now: what it writes is unknown here.
                self.explain = Explain::new(self.config.interval, self.config.quiet);
                self.sent.clear();
            }
            return;
        }
        let led_since = *self.leading.get_or_insert(now);
        // Scoped to one namespace, the operator writes nothing on the (cluster-scoped) policies.
        let statuses = policies.statuses();
        for (kind, namespace, n) in counted {
            let policy = (namespace.as_deref())
                .filter(|_| statuses.is_some())
                .and_then(|ns| policies.governing(ns));
            (self.explain).record(now, kind, namespace.as_deref(), policy, n);
        }
        for report in self.explain.due(now) {
            self.publish(report, policies);
        }
        if let Some(statuses) = statuses {
            self.conditions((now, led_since), policies, &statuses);
        }
    }

    fn publish(&self, report: explain::Report, policies: &PolicyWatch) {
        let reference = match &report.target {
            Target::Pod => self.config.pod.as_ref().map(|(ns, name)| ObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Pod".into()),
                namespace: Some(ns.clone()),
                name: Some(name.clone()),
                ..ObjectReference::default()
            }),
            Target::Policy(name) => (policies.policies())
                .find(|p| p.metadata.name.as_deref() == Some(name))
                .map(|p| p.object_ref(&())),
        };
        tracing::warn!(reason = report.kind.reason(), target = ?report.target, note = %report.note,
            "trouble reported");
        let Some(reference) = reference else { return };
        if let Err(e) = self.events.try_send((reference, report.kind, report.note)) {
            tracing::debug!(error = %e, "an Event about the operator's trouble was not queued");
        }
    }

    fn conditions(
        &mut self,
        (now, led_since): (Instant, Instant),
        policies: &PolicyWatch,
        statuses: &crate::config::status::StatusSender,
    ) {
        let at = Time(k8s_openapi::jiff::Timestamp::now());
        let mut live = HashSet::new();
        for p in policies.policies() {
            let name = p.name_any();
            let uid = p.metadata.uid.clone().unwrap_or_else(|| name.clone());
            let verdict = self.explain.verdict(now, &name);
            let observed = (p.status.iter())
                .flat_map(|s| s.conditions.iter())
                .find(|c| c.type_ == "Degraded");
            live.insert(uid.clone());
            let led_for = now.duration_since(led_since);
            if explain::inherited(&verdict, observed, led_for, self.config.quiet) {
                continue;
            }
            let sent = self.sent.get(&uid);
            let want = explain::condition(
                &verdict,
                p.metadata.generation,
                sent.or(observed),
                at.clone(),
            );
            if explain::needs_write(&want, sent, observed) {
                self.sent.insert(uid.clone(), want.clone());
                // The status writer lives as long as the process.
                let _ = statuses.send((name, StatusPatch::Degraded(want)));
            }
        }
        self.sent.retain(|uid, _| live.contains(uid));
    }
}

impl Drop for Explainer {
    fn drop(&mut self) {
        self.publisher.abort();
    }
}

/// What the Event says was done about the trouble.
fn action(kind: Kind) -> &'static str {
    match kind {
        Kind::WritesRejected => "WriteSeries",
        Kind::NameTaken => "RenameSeries",
        Kind::WritesShed => "ShedWrites",
        Kind::AlertsUndelivered => "PostAlerts",
        Kind::KeysGivenUp => "GiveUpSeries",
    }
}

/// Publishes the queued Events one at a time.
async fn publish(recorder: Recorder, mut rx: mpsc::Receiver<(ObjectReference, Kind, String)>) {
    while let Some((reference, kind, note)) = rx.recv().await {
        let event = Event {
            type_: EventType::Warning,
            reason: kind.reason().into(),
            note: Some(note),
            action: action(kind).into(),
            secondary: None,
        };
        if let Err(e) = recorder.publish(&event, &reference).await {
            tracing::warn!(error = %e, reason = kind.reason(), object = ?reference.name,
                "an Event about the operator's trouble could not be written");
        }
    }
}
