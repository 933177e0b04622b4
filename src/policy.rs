//! The EventSeriesPolicy custom resource: its Rust type (from which `event-series crd` and `crds/` are
//! generated), the validation the API server enforces, the conversion into engine [`Settings`], and the
//! status the operator reports. Pure: the watch and the status writes live in [`crate::policies`].
//!
//! Validation happens in the API server, not here: durations carry a pattern and a CEL rule (`at least
//! 1s`), selector operators are an enum, list sizes are bounded so that the CEL cost estimate stays
//! small. [`to_policy`] repeats the checks as a second line for objects stored before a validation
//! change; a policy that fails them is reported `Ready=False` and ignored, never half-applied.

use crate::settings::{
    MatchFilter, Operator, Policy, PolicySet, Requirement, Selector, Settings, SettingsError,
};
use chrono::TimeDelta;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::CustomResource;
use kube::KubeSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::Arc;

/// A Go-style duration (`90s`, `6m`, `1h30m`), the format of `metav1.Duration` and of CEL's
/// `duration()`, so that the CRD's rule and the operator read the same value.
pub const DURATION_PATTERN: &str = r"^([0-9]+(ns|us|µs|ms|s|m|h))+$";
const AT_LEAST_1S: &str = "duration(self) >= duration('1s')";

/// How event-series turns the raw Events of the namespaces it selects into series. Each namespace is
/// governed by exactly one policy: a policy with a namespaceSelector wins over one that selects every
/// namespace, then the name that sorts first; a namespace no policy selects gets the operator's
/// defaults.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "eventseries.dev",
    version = "v1alpha1",
    kind = "EventSeriesPolicy",
    plural = "eventseriespolicies",
    shortname = "esp",
    status = "EventSeriesPolicyStatus",
    category = "event-series",
    printcolumn = r#"{"name":"Heartbeat","type":"string","jsonPath":".spec.heartbeatInterval"}"#,
    printcolumn = r#"{"name":"Finish-After","type":"string","jsonPath":".spec.finishAfter"}"#,
    printcolumn = r#"{"name":"Window","type":"string","jsonPath":".spec.seriesWindow"}"#,
    printcolumn = r#"{"name":"Namespaces","type":"integer","jsonPath":".status.namespaces"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct EventSeriesPolicySpec {
    /// How often an Ongoing series is rewritten (its count, and a refreshed TTL).
    #[serde(default = "default_heartbeat")]
    #[schemars(regex(pattern = DURATION_PATTERN), length(max = 32))]
    #[x_kube(validation = Rule::new(AT_LEAST_1S).message("must be at least 1s"))]
    pub heartbeat_interval: String,
    /// Quiet time after which a series is marked Finished.
    #[serde(default = "default_finish_after")]
    #[schemars(regex(pattern = DURATION_PATTERN), length(max = 32))]
    #[x_kube(validation = Rule::new(AT_LEAST_1S).message("must be at least 1s"))]
    pub finish_after: String,
    /// Largest gap between two occurrences of one series.
    #[serde(default = "default_series_window")]
    #[schemars(regex(pattern = DURATION_PATTERN), length(max = 32))]
    #[x_kube(validation = Rule::new(AT_LEAST_1S).message("must be at least 1s"))]
    pub series_window: String,
    /// Namespaces this policy governs, by their labels; empty or absent selects every namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace_selector: Option<NamespaceSelector>,
    /// Which raw events become series; an empty list matches anything.
    #[serde(default, rename = "match")]
    pub match_: EventMatch,
    #[serde(default)]
    pub isomorphism: Isomorphism,
    /// Most series this policy keeps active at once; beyond it the least recently active is finished
    /// early (written with its count).
    #[serde(default = "default_max_active_series")]
    #[schemars(range(min = 1, max = 10_000_000))]
    pub max_active_series: i64,
}

fn default_heartbeat() -> String {
    "30m".into()
}
fn default_finish_after() -> String {
    "6m".into()
}
fn default_series_window() -> String {
    "6m".into()
}
fn default_max_active_series() -> i64 {
    Settings::default().max_active_series as i64
}

impl Default for EventSeriesPolicySpec {
    fn default() -> Self {
        EventSeriesPolicySpec {
            heartbeat_interval: default_heartbeat(),
            finish_after: default_finish_after(),
            series_window: default_series_window(),
            namespace_selector: None,
            match_: EventMatch::default(),
            isomorphism: Isomorphism::default(),
            max_active_series: default_max_active_series(),
        }
    }
}

/// The subset of `metav1.LabelSelector` that selects namespaces, with bounds and an operator enum so
/// that the API server refuses a selector that could never be evaluated.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct NamespaceSelector {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(length(max = 64))]
    pub match_labels: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32))]
    pub match_expressions: Vec<LabelRequirement>,
}

#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new(
    "self.operator in ['In', 'NotIn'] ? size(self.values) > 0 : size(self.values) == 0"
).message("values must be non-empty for In and NotIn, and empty for Exists and DoesNotExist"))]
pub struct LabelRequirement {
    #[schemars(length(min = 1, max = 317))]
    pub key: String,
    pub operator: SelectorOperator,
    #[serde(default)]
    #[schemars(length(max = 64), inner(length(max = 63)))]
    pub values: Vec<String>,
}

#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub enum SelectorOperator {
    In,
    NotIn,
    Exists,
    DoesNotExist,
}

/// Filters on the raw events; every non-empty list must match.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct EventMatch {
    /// Event types to keep (`Normal`, `Warning`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 2), inner(length(max = 16)))]
    #[x_kube(validation = Rule::new("self.all(t, t in ['Normal', 'Warning'])")
        .message("types are Normal or Warning"))]
    pub types: Vec<String>,
    /// Reasons to keep.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 256), inner(length(max = 128)))]
    pub reasons: Vec<String>,
    /// Reasons never turned into series, even if `reasons` lists them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 256), inner(length(max = 128)))]
    pub exclude_reasons: Vec<String>,
    /// Reporting controllers (or legacy `source.component`) to keep.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 256), inner(length(max = 128)))]
    pub reporting_controllers: Vec<String>,
}

#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Isomorphism {
    /// Make the note (message) part of the series key: events differing only in their message become
    /// separate series. Applies to keys first seen after the change.
    #[serde(default)]
    pub include_note: bool,
}

/// What the operator applies, as it last saw the policy.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct EventSeriesPolicyStatus {
    /// The `metadata.generation` the conditions describe.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Ready`: True when the spec is applied, with the reason it is not otherwise.
    #[serde(default)]
    pub conditions: Vec<Condition>,
    /// Namespaces this policy governs right now (those it selects, less those a policy of higher
    /// precedence governs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespaces: Option<i64>,
}

/// The CRD as YAML, for `event-series crd` and `crds/`.
pub fn crd_yaml() -> Result<String, serde_yaml_ng::Error> {
    use kube::CustomResourceExt;
    let mut yaml = serde_yaml_ng::to_string(&EventSeriesPolicy::crd())?;
    if !yaml.ends_with('\n') {
        yaml.push('\n');
    }
    Ok(yaml)
}

fn duration(field: &'static str, value: &str) -> Result<TimeDelta, SettingsError> {
    let bad = |reason: String| SettingsError::BadDuration {
        field,
        value: value.to_owned(),
        reason,
    };
    let d: kube::core::Duration = value.parse().map_err(|e| bad(format!("{e}")))?;
    if d.is_negative() || d < std::time::Duration::from_secs(1) {
        return Err(SettingsError::TooShort {
            field,
            value: value.to_owned(),
        });
    }
    TimeDelta::from_std(d.into()).map_err(|e| bad(e.to_string()))
}

fn selector(sel: &NamespaceSelector) -> Selector {
    Selector {
        match_labels: sel.match_labels.clone(),
        match_expressions: sel
            .match_expressions
            .iter()
            .map(|r| Requirement {
                key: r.key.clone(),
                op: match r.operator {
                    SelectorOperator::In => Operator::In,
                    SelectorOperator::NotIn => Operator::NotIn,
                    SelectorOperator::Exists => Operator::Exists,
                    SelectorOperator::DoesNotExist => Operator::DoesNotExist,
                },
                values: r.values.clone(),
            })
            .collect(),
    }
}

/// The engine's view of one policy, or the first field that makes it unusable.
pub fn to_policy(name: &str, spec: &EventSeriesPolicySpec) -> Result<Policy, SettingsError> {
    let max_active_series = usize::try_from(spec.max_active_series)
        .ok()
        .filter(|n| *n >= 1)
        .ok_or_else(|| SettingsError::Invalid {
            field: "spec.maxActiveSeries",
            message: format!("{} is not at least 1", spec.max_active_series),
        })?;
    for r in spec
        .namespace_selector
        .iter()
        .flat_map(|s| &s.match_expressions)
    {
        let needs_values = matches!(r.operator, SelectorOperator::In | SelectorOperator::NotIn);
        if needs_values == r.values.is_empty() {
            return Err(SettingsError::Invalid {
                field: "spec.namespaceSelector.matchExpressions",
                message: format!(
                    "{:?} on {:?}: values do not fit the operator",
                    r.operator, r.key
                ),
            });
        }
    }
    let m = &spec.match_;
    Ok(Policy {
        name: name.to_owned(),
        selector: spec
            .namespace_selector
            .as_ref()
            .map(selector)
            .unwrap_or_default(),
        settings: Arc::new(Settings {
            heartbeat_interval: duration("spec.heartbeatInterval", &spec.heartbeat_interval)?,
            finish_after: duration("spec.finishAfter", &spec.finish_after)?,
            series_window: duration("spec.seriesWindow", &spec.series_window)?,
            include_note: spec.isomorphism.include_note,
            filter: MatchFilter {
                types: m.types.clone(),
                reasons: m.reasons.clone(),
                exclude_reasons: m.exclude_reasons.clone(),
                reporting_controllers: m.reporting_controllers.clone(),
            },
            max_active_series,
        }),
    })
}

/// The outcome of reading every policy: what the engine applies, and the verdict on each policy.
#[derive(Debug)]
pub struct Resolved {
    pub set: PolicySet,
    /// Per policy name: `Ok` when applied, else why not.
    pub verdicts: BTreeMap<String, Result<(), SettingsError>>,
}

/// Combines the policies (see [`PolicySet`] for the rule) over the operator's defaults.
pub fn resolve(policies: &[EventSeriesPolicy], defaults: &Settings) -> Resolved {
    let mut usable = Vec::new();
    let mut verdicts = BTreeMap::new();
    for p in policies {
        let name = p.metadata.name.clone().unwrap_or_default();
        match to_policy(&name, &p.spec) {
            Ok(policy) => {
                usable.push(policy);
                verdicts.insert(name, Ok(()));
            }
            Err(e) => {
                verdicts.insert(name, Err(e));
            }
        }
    }
    Resolved {
        set: PolicySet::new(usable, defaults.clone()),
        verdicts,
    }
}

/// How many of `namespaces` each applied policy governs, by policy name.
pub fn governed<'a>(
    set: &PolicySet,
    namespaces: impl IntoIterator<Item = &'a BTreeMap<String, String>>,
) -> BTreeMap<String, i64> {
    let mut counts = BTreeMap::new();
    for labels in namespaces {
        if let Some(name) = set.policy_name(set.resolve(labels)) {
            *counts.entry(name.to_owned()).or_insert(0) += 1;
        }
    }
    counts
}

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

#[cfg(test)]
mod tests {
    use super::*;
    use kube::CustomResourceExt;

    fn policy(name: &str, spec: EventSeriesPolicySpec) -> EventSeriesPolicy {
        let mut p = EventSeriesPolicy::new(name, spec);
        p.metadata.generation = Some(3);
        p
    }

    #[test]
    fn crd_names_and_scope_follow_the_spec() {
        let crd = EventSeriesPolicy::crd();
        assert_eq!(crd.spec.group, "eventseries.dev");
        assert_eq!(crd.spec.scope, "Cluster");
        assert_eq!(crd.spec.names.plural, "eventseriespolicies");
        assert_eq!(crd.spec.names.short_names, Some(vec!["esp".to_string()]));
        let v = &crd.spec.versions[0];
        assert_eq!(v.name, "v1alpha1");
        assert!(v.subresources.as_ref().is_some_and(|s| s.status.is_some()));
        let yaml = crd_yaml().unwrap();
        assert!(yaml.contains("duration(self) >= duration('1s')"));
        assert!(
            yaml.contains(
                DURATION_PATTERN
                    .trim_start_matches('^')
                    .trim_end_matches('$')
            )
        );
    }

    #[test]
    fn an_empty_spec_is_the_spec_defaults() {
        let spec: EventSeriesPolicySpec = serde_json::from_str("{}").unwrap();
        let p = to_policy("d", &spec).unwrap();
        assert_eq!(*p.settings, Settings::default());
        assert!(p.selector.is_empty());
    }

    #[test]
    fn go_durations_convert_and_bad_ones_name_the_field() {
        let spec = EventSeriesPolicySpec {
            heartbeat_interval: "1h30m".into(),
            finish_after: "90s".into(),
            series_window: "2m".into(),
            ..Default::default()
        };
        let s = to_policy("p", &spec).unwrap().settings;
        assert_eq!(s.heartbeat_interval, TimeDelta::minutes(90));
        assert_eq!(s.finish_after, TimeDelta::seconds(90));
        let short = EventSeriesPolicySpec {
            finish_after: "500ms".into(),
            ..Default::default()
        };
        let e = to_policy("p", &short).unwrap_err();
        assert!(e.to_string().starts_with("spec.finishAfter"), "{e}");
        let garbage = EventSeriesPolicySpec {
            series_window: "soon".into(),
            ..Default::default()
        };
        let e = to_policy("p", &garbage).unwrap_err();
        assert!(e.to_string().starts_with("spec.seriesWindow"), "{e}");
    }

    #[test]
    fn selector_and_match_reach_the_engine() {
        let spec: EventSeriesPolicySpec = serde_json::from_value(serde_json::json!({
            "namespaceSelector": {
                "matchLabels": {"team": "a"},
                "matchExpressions": [{"key": "env", "operator": "In", "values": ["prod"]}]
            },
            "match": {"types": ["Warning"], "excludeReasons": ["Pulled"]},
            "isomorphism": {"includeNote": true},
            "maxActiveSeries": 10
        }))
        .unwrap();
        let p = to_policy("p", &spec).unwrap();
        let labels = |kv: &[(&str, &str)]| -> BTreeMap<String, String> {
            kv.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        assert!(
            p.selector
                .matches(&labels(&[("team", "a"), ("env", "prod")]))
        );
        assert!(!p.selector.matches(&labels(&[("team", "a")])));
        assert!(p.settings.filter.matches("Warning", "BackOff", "kubelet"));
        assert!(!p.settings.filter.matches("Warning", "Pulled", "kubelet"));
        assert!(p.settings.include_note);
        assert_eq!(p.settings.max_active_series, 10);
        let bad: EventSeriesPolicySpec = serde_json::from_value(serde_json::json!({
            "namespaceSelector": {"matchExpressions": [{"key": "env", "operator": "Exists", "values": ["x"]}]}
        }))
        .unwrap();
        assert!(to_policy("p", &bad).is_err());
    }

    #[test]
    fn invalid_policies_are_reported_and_left_out() {
        let good = policy(
            "good",
            EventSeriesPolicySpec {
                namespace_selector: Some(NamespaceSelector {
                    match_labels: [("team".to_string(), "a".to_string())].into(),
                    ..Default::default()
                }),
                ..Default::default()
            },
        );
        let bad = policy(
            "bad",
            EventSeriesPolicySpec {
                max_active_series: 0,
                ..Default::default()
            },
        );
        let r = resolve(&[good, bad], &Settings::default());
        assert_eq!(r.set.slots(), 2, "only the valid policy is applied");
        assert!(r.verdicts["good"].is_ok());
        assert!(r.verdicts["bad"].is_err());
        let team_a: BTreeMap<String, String> = [("team".to_string(), "a".to_string())].into();
        let other = BTreeMap::new();
        let counts = governed(&r.set, [&team_a, &other, &team_a]);
        assert_eq!(counts.get("good"), Some(&2));
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
