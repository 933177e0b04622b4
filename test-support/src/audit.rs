//! The test apiserver's audit log (`audit.log` beside its kubeconfig, written by `hack/cluster-up.sh`):
//! every write of a series object or a Lease, with who made it and when the apiserver received it.
//! It is the ground truth for "this replica wrote nothing after that instant".

use anyhow::{Context, Result};
use chrono::{DateTime, Utc};
use serde::Deserialize;
use std::path::{Path, PathBuf};

/// One audited write.
#[derive(Clone, Debug)]
pub struct Write {
    pub verb: String,
    pub user_agent: String,
    pub received: DateTime<Utc>,
    /// `events` or `leases`.
    pub resource: String,
    pub namespace: String,
    pub name: String,
    /// The HTTP status the apiserver answered (0 if none was recorded).
    pub code: u16,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Entry {
    verb: String,
    #[serde(default)]
    user_agent: String,
    request_received_timestamp: DateTime<Utc>,
    object_ref: Option<ObjectRef>,
    response_status: Option<Status>,
}

#[derive(Deserialize)]
struct ObjectRef {
    #[serde(default)]
    resource: String,
    #[serde(default)]
    namespace: String,
    #[serde(default)]
    name: String,
}

#[derive(Deserialize)]
struct Status {
    #[serde(default)]
    code: u16,
}

/// The audit log of the cluster behind `kubeconfig`.
pub fn log_of(kubeconfig: &Path) -> PathBuf {
    kubeconfig
        .parent()
        .unwrap_or(Path::new("."))
        .join("audit.log")
}

/// Every audited write in namespace `ns` so far.
pub fn writes(kubeconfig: &Path, ns: &str) -> Result<Vec<Write>> {
    let path = log_of(kubeconfig);
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("reading the audit log {}", path.display()))?;
    let mut writes = Vec::new();
    for line in text.lines().filter(|l| l.contains(ns)) {
        let Ok(entry) = serde_json::from_str::<Entry>(line) else {
            continue;
        };
        let Some(object) = entry.object_ref else {
            continue;
        };
        if object.namespace != ns {
            continue;
        }
        writes.push(Write {
            verb: entry.verb,
            user_agent: entry.user_agent,
            received: entry.request_received_timestamp,
            resource: object.resource,
            namespace: object.namespace,
            name: object.name,
            code: entry.response_status.map_or(0, |s| s.code),
        });
    }
    Ok(writes)
}

/// The User-Agent `event-series run --instance <identity>` sends.
pub fn agent_of(identity: &str) -> String {
    format!("({identity})")
}
