//! Which loops a policy's `spec.alert` raises as alerts: a pure rule over a series' key, count and
//! age, so that the engine can answer "which active series alert now" without knowing how alerts
//! are sent.

use crate::filter::MatchFilter;
use crate::key::KeyRef;
use chrono::{DateTime, TimeDelta, Utc};
use std::sync::Arc;

/// The alert name when a policy names none.
pub const DEFAULT_ALERTNAME: &str = "KubernetesEventLoop";

/// A policy's `spec.alert`: a loop alerts once it has counted `min_count` occurrences over at least
/// `min_duration`, and its type and reason pass `filter`, so that a short blip or a Normal loop
/// pages no one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AlertRule {
    pub min_count: u64,
    pub min_duration: TimeDelta,
    pub filter: MatchFilter,
    /// The `alertname` label.
    pub alertname: Arc<str>,
    /// `/readyz` fails while alerts cannot be delivered.
    pub required: bool,
}

impl Default for AlertRule {
    fn default() -> Self {
        AlertRule {
            min_count: 2,
            min_duration: TimeDelta::zero(),
            filter: MatchFilter::default(),
            alertname: Arc::from(DEFAULT_ALERTNAME),
            required: false,
        }
    }
}

impl AlertRule {
    /// Whether the loop of `key`, with `count` occurrences from `first` to `last`, alerts. Its
    /// duration is its span of occurrences, and its type and reason are taken as the series object
    /// holds them ([`crate::key::SeriesKey::mapped`]: `warning` is `Warning`), so that the same loop
    /// gives the same answer on every replica and after every restart.
    pub fn selects(
        &self,
        key: &KeyRef<'_>,
        count: u64,
        first: DateTime<Utc>,
        last: DateTime<Utc>,
    ) -> bool {
        let m = key.mapped();
        count >= self.min_count
            && last - first >= self.min_duration
            && self
                .filter
                .matches(m.type_, m.reason, &m.reporting_controller)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key::{ObjectRef, SeriesKey};

    fn key<'a>(type_: &'a str, reason: &'a str) -> KeyRef<'a> {
        SeriesKey {
            namespace: "ns",
            regarding: ObjectRef {
                api_version: "v1",
                kind: "Pod",
                namespace: "ns",
                name: "web-0",
                uid: "u",
                field_path: "",
            },
            related: None,
            action: "",
            reason,
            reporting_controller: "kubelet",
            reporting_instance: "node-1",
            type_,
        }
    }

    #[test]
    fn a_loop_alerts_from_its_min_count_and_min_duration_on() {
        let rule = AlertRule {
            min_count: 5,
            min_duration: TimeDelta::minutes(2),
            ..AlertRule::default()
        };
        let t0 = DateTime::<Utc>::UNIX_EPOCH;
        let k = key("Warning", "BackOff");
        assert!(!rule.selects(&k, 4, t0, t0 + TimeDelta::minutes(5)));
        assert!(!rule.selects(&k, 9, t0, t0 + TimeDelta::seconds(119)));
        assert!(rule.selects(&k, 5, t0, t0 + TimeDelta::minutes(2)));
    }

    #[test]
    fn types_and_reasons_filter_what_alerts() {
        let rule = AlertRule {
            filter: MatchFilter {
                types: vec!["Warning".into()],
                exclude_reasons: vec!["Pulling".into()],
                ..MatchFilter::default()
            },
            ..AlertRule::default()
        };
        let t0 = DateTime::<Utc>::UNIX_EPOCH;
        assert!(rule.selects(&key("Warning", "BackOff"), 2, t0, t0));
        assert!(!rule.selects(&key("Normal", "BackOff"), 2, t0, t0));
        assert!(!rule.selects(&key("Warning", "Pulling"), 2, t0, t0));
        // As the series object holds it, and as a restart reads it back.
        assert!(rule.selects(&key("warning", "BackOff"), 2, t0, t0));
    }
}
