//! Raw events for the benchmarks.

use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;

pub fn t0() -> DateTime<Utc> {
    DateTime::from_timestamp(1_800_000_000, 0).unwrap_or_default()
}

/// A kubelet-style BackOff event for pod `web-<i>` counting `count` occurrences at `at`.
pub fn kubelet_backoff(i: usize, count: i32, at: DateTime<Utc>) -> Event {
    let ts = Timestamp::new(at.timestamp(), 0).unwrap_or(Timestamp::UNIX_EPOCH);
    Event {
        metadata: ObjectMeta {
            name: Some(format!("web-{i}.1800000000{i:08}")),
            namespace: Some("prod".into()),
            uid: Some(format!("00000000-0000-0000-0000-{i:012}")),
            resource_version: Some((1000 + i).to_string()),
            ..Default::default()
        },
        involved_object: ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Pod".into()),
            namespace: Some("prod".into()),
            name: Some(format!("web-{i}")),
            uid: Some(format!("11111111-0000-0000-0000-{i:012}")),
            field_path: Some("spec.containers{app}".into()),
            resource_version: None,
        },
        reason: Some("BackOff".into()),
        message: Some(format!(
            "Back-off restarting failed container app in pod web-{i}"
        )),
        type_: Some("Warning".into()),
        source: Some(EventSource {
            component: Some("kubelet".into()),
            host: Some("node-1".into()),
        }),
        count: Some(count),
        first_timestamp: Some(Time(ts)),
        last_timestamp: Some(Time(ts)),
        ..Default::default()
    }
}
