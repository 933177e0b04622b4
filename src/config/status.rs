//! Each policy's status: the verdict the operator applies (`Ready` with a reason), the generation it
//! describes and how many namespaces the policy governs; and the background writer of those statuses
//! and of the `Degraded` condition ([`crate::operations::explain`]).
//!
//! Both are written by server-side apply, each under its own field manager: `conditions` is a list
//! map keyed by `type`, so a write of `Ready` (by any replica) leaves `Degraded` (by the leader)
//! alone, and the other way round. A merge patch would replace the whole list.

use super::crd::{EventSeriesPolicy, EventSeriesPolicyStatus};
use event_series_core::settings::SettingsError;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::Client;
use kube::api::{Api, Patch, PatchParams};
use std::collections::HashMap;
use std::time::Duration;
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender};
use tokio::time::Instant;

/// The status to report for one policy. `previous` keeps `lastTransitionTime` when the condition's
/// status does not change, so that rewriting the same verdict is a no-op.
pub fn status(
    generation: Option<i64>,
    verdict: &Result<(), SettingsError>,
    governs: i64,
    previous: Option<&EventSeriesPolicyStatus>,
    now: Time,
) -> EventSeriesPolicyStatus {
    let (status, reason, message) = match verdict {
        Ok(()) => (
            "True",
            "Applied",
            format!(
                "applied; governs {governs} namespace{}",
                if governs == 1 { "" } else { "s" }
            ),
        ),
        Err(e) => ("False", "InvalidSpec", e.to_string()),
    };
    let last_transition_time = previous
        .and_then(|s| s.conditions.iter().find(|c| c.type_ == "Ready"))
        .filter(|c| c.status == status)
        .map_or(now, |c| c.last_transition_time.clone());
    EventSeriesPolicyStatus {
        observed_generation: generation,
        conditions: vec![Condition {
            type_: "Ready".into(),
            status: status.into(),
            reason: reason.into(),
            message,
            observed_generation: generation,
            last_transition_time,
        }],
        namespaces: Some(governs),
    }
}

/// The part of a status that the `Ready` writer owns: all but the `Degraded` condition.
pub fn own_part(status: &EventSeriesPolicyStatus) -> EventSeriesPolicyStatus {
    EventSeriesPolicyStatus {
        conditions: (status.conditions.iter())
            .filter(|c| c.type_ != "Degraded")
            .cloned()
            .collect(),
        ..status.clone()
    }
}

/// A write to a policy's status.
#[derive(Clone, Debug, PartialEq)]
pub enum StatusPatch {
    /// What the policy's spec came to: `Ready`, the generation, the namespaces it governs.
    Ready(EventSeriesPolicyStatus),
    /// The leader's `Degraded` condition.
    Degraded(Condition),
}

impl StatusPatch {
    /// The field manager of the server-side apply, one per part of the status.
    fn manager(&self) -> &'static str {
        match self {
            StatusPatch::Ready(_) => "event-series",
            StatusPatch::Degraded(_) => "event-series-degraded",
        }
    }

    fn body(&self, name: &str) -> serde_json::Value {
        let status = match self {
            StatusPatch::Ready(status) => serde_json::json!(status),
            StatusPatch::Degraded(condition) => serde_json::json!({ "conditions": [condition] }),
        };
        serde_json::json!({
            "apiVersion": "eventseries.dev/v1alpha1",
            "kind": "EventSeriesPolicy",
            "metadata": { "name": name },
            "status": status,
        })
    }
}

/// Where status writes are handed: the policy's name and the write.
pub type StatusSender = UnboundedSender<(String, StatusPatch)>;

/// Writes policy statuses in the background: the latest write per policy and part wins, failures
/// are retried with backoff, a deleted policy is forgotten.
pub struct StatusWriter {
    api: Api<EventSeriesPolicy>,
    pending: HashMap<(String, &'static str), (StatusPatch, Instant)>,
    delays: HashMap<(String, &'static str), backon::ExponentialBackoff>,
}

impl StatusWriter {
    pub fn spawn(client: Client) -> StatusSender {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let writer = StatusWriter {
            api: Api::all(client),
            pending: HashMap::new(),
            delays: HashMap::new(),
        };
        tokio::spawn(writer.run(rx));
        tx
    }

    async fn run(mut self, mut rx: UnboundedReceiver<(String, StatusPatch)>) {
        loop {
            let next_due = self.pending.values().map(|(_, at)| *at).min();
            tokio::select! {
                update = rx.recv() => match update {
                    Some((name, patch)) => {
                        self.pending.insert((name, patch.manager()), (patch, Instant::now()));
                    }
                    None => return,
                },
                _ = tokio::time::sleep_until(next_due.unwrap_or_else(|| Instant::now() + Duration::from_secs(3600))), if next_due.is_some() => {
                    self.write_due().await;
                }
            }
        }
    }

    async fn write_due(&mut self) {
        let now = Instant::now();
        let due: Vec<(String, &'static str)> = self
            .pending
            .iter()
            .filter(|(_, (_, at))| *at <= now)
            .map(|(key, _)| key.clone())
            .collect();
        for key in due {
            let Some((status, _)) = self.pending.remove(&key) else {
                continue;
            };
            let name = &key.0;
            let patch = Patch::Apply(status.body(name));
            let params = PatchParams::apply(status.manager()).force();
            match self.api.patch_status(name, &params, &patch).await {
                Ok(_) => {
                    self.delays.remove(&key);
                    tracing::debug!(policy = %name, manager = key.1, "policy status written");
                }
                Err(kube::Error::Api(s)) if s.code == 404 => {
                    self.delays.remove(&key);
                }
                Err(e) => {
                    let delays = self.delays.entry(key.clone()).or_insert_with(|| {
                        crate::api::retry::delays(
                            Duration::from_millis(500),
                            Duration::from_secs(60),
                        )
                    });
                    let retry_in = delays.next().unwrap_or(Duration::from_secs(60));
                    tracing::warn!(policy = %name, error = %e, ?retry_in, "policy status write failed; retrying");
                    // A newer status that arrived meanwhile is kept; otherwise retry this one.
                    self.pending
                        .entry(key)
                        .or_insert((status, Instant::now() + retry_in));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_and_degraded_are_applied_apart_so_that_neither_replaces_the_other() {
        let t0 = Time(k8s_openapi::jiff::Timestamp::from_second(1_000).unwrap());
        let ready = status(Some(1), &Ok(()), 2, None, t0.clone());
        let degraded = Condition {
            type_: "Degraded".into(),
            status: "True".into(),
            reason: "NameTaken".into(),
            message: "m".into(),
            observed_generation: Some(1),
            last_transition_time: t0,
        };
        let (r, d) = (
            StatusPatch::Ready(ready.clone()),
            StatusPatch::Degraded(degraded.clone()),
        );
        assert_ne!(r.manager(), d.manager());
        let body = d.body("p");
        assert_eq!(
            body["status"],
            serde_json::json!({ "conditions": [degraded] })
        );
        assert_eq!(body["metadata"]["name"], "p");
        assert_eq!(r.body("p")["status"]["namespaces"], 2);
        // What the object shows, with both: the Ready writer compares only its own part.
        let mut both = ready.clone();
        both.conditions.push(degraded);
        assert_eq!(own_part(&both), ready);
    }

    #[test]
    fn status_keeps_transition_time_until_the_verdict_changes() {
        let t0 = Time(k8s_openapi::jiff::Timestamp::from_second(1_000).unwrap());
        let t1 = Time(k8s_openapi::jiff::Timestamp::from_second(2_000).unwrap());
        let ok = status(Some(1), &Ok(()), 2, None, t0.clone());
        assert_eq!(ok.conditions[0].status, "True");
        assert_eq!(ok.conditions[0].message, "applied; governs 2 namespaces");
        let again = status(Some(2), &Ok(()), 2, Some(&ok), t1.clone());
        assert_eq!(again.conditions[0].last_transition_time, t0);
        assert_eq!(again.observed_generation, Some(2));
        let err = Err(SettingsError::TooShort {
            field: "spec.finishAfter",
            value: "0s".into(),
        });
        let failed = status(Some(3), &err, 0, Some(&again), t1.clone());
        assert_eq!(failed.conditions[0].status, "False");
        assert_eq!(failed.conditions[0].reason, "InvalidSpec");
        assert!(failed.conditions[0].message.contains("spec.finishAfter"));
        assert_eq!(failed.conditions[0].last_transition_time, t1);
    }
}
