//! Each policy's status: the verdict the operator applies (`Ready` with a reason), the generation it
//! describes and how many namespaces the policy governs; and the background writer of those statuses.

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

/// Writes policy statuses in the background: the latest status per policy wins, failures are retried
/// with backoff, a deleted policy is forgotten.
pub struct StatusWriter {
    api: Api<EventSeriesPolicy>,
    pending: HashMap<String, (EventSeriesPolicyStatus, Instant)>,
    delays: HashMap<String, backon::ExponentialBackoff>,
}

impl StatusWriter {
    pub fn spawn(client: Client) -> UnboundedSender<(String, EventSeriesPolicyStatus)> {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let writer = StatusWriter {
            api: Api::all(client),
            pending: HashMap::new(),
            delays: HashMap::new(),
        };
        tokio::spawn(writer.run(rx));
        tx
    }

    async fn run(mut self, mut rx: UnboundedReceiver<(String, EventSeriesPolicyStatus)>) {
        loop {
            let next_due = self.pending.values().map(|(_, at)| *at).min();
            tokio::select! {
                update = rx.recv() => match update {
                    Some((name, status)) => {
                        self.pending.insert(name, (status, Instant::now()));
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
        let due: Vec<String> = self
            .pending
            .iter()
            .filter(|(_, (_, at))| *at <= now)
            .map(|(name, _)| name.clone())
            .collect();
        for name in due {
            let Some((status, _)) = self.pending.remove(&name) else {
                continue;
            };
            let patch = Patch::Merge(serde_json::json!({ "status": status }));
            match self
                .api
                .patch_status(&name, &PatchParams::default(), &patch)
                .await
            {
                Ok(_) => {
                    self.delays.remove(&name);
                    tracing::debug!(policy = %name, "policy status written");
                }
                Err(kube::Error::Api(s)) if s.code == 404 => {
                    self.delays.remove(&name);
                }
                Err(e) => {
                    let delays = self.delays.entry(name.clone()).or_insert_with(|| {
                        crate::api::retry::delays(
                            Duration::from_millis(500),
                            Duration::from_secs(60),
                        )
                    });
                    let retry_in = delays.next().unwrap_or(Duration::from_secs(60));
                    tracing::warn!(policy = %name, error = %e, ?retry_in, "policy status write failed; retrying");
                    // A newer status that arrived meanwhile is kept; otherwise retry this one.
                    self.pending
                        .entry(name)
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
