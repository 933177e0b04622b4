//! Leader election on a coordination.k8s.io/v1 Lease, so that several replicas can run and exactly one
//! writes series.
//!
//! The lease protocol itself is `kube-lease-manager` (server-side apply on the Lease, so two replicas
//! can never both take it; a grace period before expiry absorbs clock skew). This module only adapts it
//! to the operator's lifecycle: wait for leadership, notice its loss, release it on shutdown so that a
//! standby takes over at once instead of after the lease duration.
//!
//! A replica that loses the lease stops at once without flushing (the new leader owns the series now)
//! and exits non-zero; the Deployment restarts it as a standby, as client-go's leader election does.

use anyhow::Context;
use kube::Client;
use kube_lease_manager::{LeaseManager, LeaseManagerBuilder};
use std::time::Duration;
use tokio::sync::watch;
use tokio::task::JoinHandle;

#[derive(Clone, Debug)]
pub struct LeaseConfig {
    pub name: String,
    pub namespace: String,
    /// The holder identity: the pod name in a Deployment.
    pub identity: String,
    /// How long a lease stays valid after its last renewal: the longest a standby waits for a leader
    /// that died without releasing it.
    pub duration: Duration,
}

impl LeaseConfig {
    /// Renew this long before expiry: a third of the lease, at least a second.
    fn grace(&self) -> u64 {
        (self.duration.as_secs() / 3).max(1)
    }
}

/// A running election for one replica.
pub struct Election {
    state: watch::Receiver<bool>,
    task: JoinHandle<Result<LeaseManager, kube_lease_manager::LeaseManagerError>>,
}

impl Election {
    /// Joins the election (creating the Lease if it does not exist yet).
    pub async fn join(client: Client, config: &LeaseConfig) -> anyhow::Result<Election> {
        let secs = config.duration.as_secs().max(2);
        let manager = LeaseManagerBuilder::new(client, &config.name)
            .with_namespace(&config.namespace)
            .with_identity(&config.identity)
            .with_duration(secs)
            .with_grace(config.grace().min(secs - 1))
            .with_field_manager(format!("event-series/{}", config.identity))
            .build()
            .await
            .with_context(|| {
                format!(
                    "joining the election on Lease {}/{}",
                    config.namespace, config.name
                )
            })?;
        let (state, task) = manager.watch().await;
        Ok(Election { state, task })
    }

    /// Resolves once this replica holds the lease.
    pub async fn acquired(&mut self) -> anyhow::Result<()> {
        self.state
            .wait_for(|leading| *leading)
            .await
            .context("the election stopped")?;
        Ok(())
    }

    /// Resolves when this replica no longer holds the lease (or the election stopped).
    pub async fn lost(&mut self) {
        let _ = self.state.wait_for(|leading| !*leading).await;
    }

    /// Leaves the election, releasing the lease if held.
    pub async fn release(self) {
        drop(self.state);
        match self.task.await {
            Ok(Ok(_)) => tracing::info!("lease released"),
            Ok(Err(e)) => tracing::warn!(error = %e, "releasing the lease failed"),
            Err(e) => tracing::warn!(error = %e, "the election task failed"),
        }
    }
}
