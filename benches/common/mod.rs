//! Raw events for the benchmarks: the same bytes every run, so that figures stay comparable.

use chrono::{DateTime, Utc};
use event_series_test_support::raw::{Occurrences, app_container, kubelet};
use event_series_test_support::sim::jiff;
use k8s_openapi::api::core::v1::Event;

pub use event_series_test_support::sim::t0;

/// A kubelet-style BackOff event for pod `web-<i>` in `prod` counting `count` occurrences at `at`.
pub fn kubelet_backoff(i: usize, count: i32, at: DateTime<Utc>) -> Event {
    kubelet_backoff_in("prod", i, count, at)
}

/// The same in namespace `ns`.
pub fn kubelet_backoff_in(ns: &str, i: usize, count: i32, at: DateTime<Utc>) -> Event {
    let pod = format!("web-{i}");
    let mut ev = kubelet(
        ns,
        &format!("{pod}.1800000000{i:08}"),
        app_container(ns, &pod, format!("11111111-0000-0000-0000-{i:012}")),
        "BackOff",
        format!("Back-off restarting failed container app in pod {pod}"),
        Occurrences::at(count, jiff(at)),
    );
    ev.metadata.uid = Some(format!("00000000-0000-0000-0000-{i:012}"));
    ev.metadata.resource_version = Some((1000 + i).to_string());
    ev
}
