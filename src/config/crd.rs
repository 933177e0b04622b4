//! The EventSeriesPolicy custom resource: its Rust type, from which `event-series crd` and `crds/` are
//! generated, with the validation the API server enforces.
//!
//! Validation happens in the API server, not here: durations carry a pattern and a CEL rule (`at least
//! 1s`), selector operators are an enum, list sizes are bounded so that the CEL cost estimate stays
//! small. [`super::resolve`] repeats the checks as a second line for objects stored before a
//! validation change.

use event_series_core::duration::DURATION_PATTERN;
use event_series_core::settings::Settings;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use kube::KubeSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

const AT_LEAST_1S: &str = "duration(self) >= duration('1s')";
const ZERO_OR_AT_LEAST_1S: &str =
    "self == '0' || duration(self) == duration('0s') || duration(self) >= duration('1s')";
/// A duration, or a bare `0`.
const FIRST_REFRESH_PATTERN: &str = r"^0$|^([0-9]+(ns|us|µs|ms|s|m|h))+$";

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
    doc = "An EventSeriesPolicy tells the event-series operator how to group the repeated core/v1 \
           Events of the namespaces it selects into series, each kept as one events.k8s.io/v1 \
           Event (created when a loop starts, refreshed by heartbeats, marked Finished when it \
           stops): the timings, which events count, how many series may be active, and which \
           loops become Alertmanager alerts. Cluster-scoped; a namespace no policy selects gets \
           the operator's defaults.",
    printcolumn = r#"{"name":"Heartbeat","type":"string","jsonPath":".spec.heartbeatInterval"}"#,
    printcolumn = r#"{"name":"Finish-After","type":"string","jsonPath":".spec.finishAfter"}"#,
    printcolumn = r#"{"name":"Window","type":"string","jsonPath":".spec.seriesWindow"}"#,
    printcolumn = r#"{"name":"Namespaces","type":"integer","jsonPath":".status.namespaces"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Degraded","type":"string","jsonPath":".status.conditions[?(@.type==\"Degraded\")].status"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new(
    "!has(self.maxActiveSeriesPerNamespace) || self.maxActiveSeriesPerNamespace <= self.maxActiveSeries"
).message("maxActiveSeriesPerNamespace must not exceed maxActiveSeries"))]
pub struct EventSeriesPolicySpec {
    /// How often an Ongoing series is rewritten (its count, and a refreshed TTL).
    #[serde(default = "default_heartbeat")]
    #[schemars(regex(pattern = DURATION_PATTERN), length(max = 32))]
    #[x_kube(validation = Rule::new(AT_LEAST_1S).message("must be at least 1s"))]
    pub heartbeat_interval: String,
    /// When a young series is first rewritten after its start, then at twice that, four times, ...
    /// while shorter than heartbeatInterval (each skipped when nothing new happened), so that what a
    /// reader sees is at most about half the loop's age old. "0" turns them off.
    #[serde(default = "default_first_refresh")]
    #[schemars(regex(pattern = FIRST_REFRESH_PATTERN), length(max = 32))]
    #[x_kube(validation = Rule::new(ZERO_OR_AT_LEAST_1S).message("must be 0 or at least 1s"))]
    pub first_refresh: String,
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
    /// Most series one namespace may keep active at once under this policy; beyond it that
    /// namespace's least recently active is finished early. Unset: only maxActiveSeries applies
    /// (which, when reached, gives up series of the namespace holding the most).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 10_000_000))]
    pub max_active_series_per_namespace: Option<i64>,
    /// Which of this policy's loops are sent to Alertmanager (with `--alertmanager-url`): firing
    /// while Ongoing, resolved when Finished. Absent: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alert: Option<AlertSpec>,
}

/// When a loop becomes an alert. Every condition must hold; an empty list matches anything.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct AlertSpec {
    /// Occurrences a loop must have counted before it alerts.
    #[serde(default = "default_alert_min_count")]
    #[schemars(range(min = 2, max = 1_000_000_000))]
    pub min_count: i64,
    /// How long a loop must have lasted (first to latest occurrence) before it alerts; "0": at once.
    #[serde(default = "default_alert_min_duration")]
    #[schemars(regex(pattern = FIRST_REFRESH_PATTERN), length(max = 32))]
    #[x_kube(validation = Rule::new(ZERO_OR_AT_LEAST_1S).message("must be 0 or at least 1s"))]
    pub min_duration: String,
    /// Event types that alert (`Normal`, `Warning`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 2), inner(length(max = 16)))]
    #[x_kube(validation = Rule::new("self.all(t, t in ['Normal', 'Warning'])")
        .message("types are Normal or Warning"))]
    pub types: Vec<String>,
    /// Reasons that alert.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 256), inner(length(max = 128)))]
    pub reasons: Vec<String>,
    /// Reasons that never alert, even if `reasons` lists them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 256), inner(length(max = 128)))]
    pub exclude_reasons: Vec<String>,
    /// The `alertname` label (default `KubernetesEventLoop`): what Alertmanager routes and
    /// silences by.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[a-zA-Z_][a-zA-Z0-9_]*$"), length(max = 128))]
    pub alertname: Option<String>,
    /// The operator's /readyz fails while no alert has reached Alertmanager for longer than its
    /// request timeout, so that an undelivered page shows where readiness is watched.
    #[serde(default)]
    pub required: bool,
}

fn default_alert_min_count() -> i64 {
    5
}
fn default_alert_min_duration() -> String {
    "0".into()
}

fn default_heartbeat() -> String {
    "30m".into()
}
fn default_first_refresh() -> String {
    "1m".into()
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
            first_refresh: default_first_refresh(),
            finish_after: default_finish_after(),
            series_window: default_series_window(),
            namespace_selector: None,
            match_: EventMatch::default(),
            isomorphism: Isomorphism::default(),
            max_active_series: default_max_active_series(),
            max_active_series_per_namespace: None,
            alert: None,
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
    /// `Ready`: True when the spec is applied, with the reason it is not otherwise. `Degraded`:
    /// True while the operator met trouble in the namespaces the policy governs, or cluster-wide
    /// (see its Events). One entry per type (a list map keyed by `type`, so that server-side apply
    /// merges them by type).
    #[serde(default)]
    #[x_kube(merge_strategy = ListMerge::Map(vec!["type".into()]))]
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

#[cfg(test)]
mod tests {
    use super::*;
    use kube::CustomResourceExt;

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
        let schema = serde_json::to_value(&v.schema).unwrap();
        let root = &schema["openAPIV3Schema"];
        let description = root["description"].as_str().unwrap_or_default();
        assert!(
            description.starts_with("An EventSeriesPolicy"),
            "{description}"
        );
        let conditions = &root["properties"]["status"]["properties"]["conditions"];
        assert_eq!(conditions["x-kubernetes-list-type"], "map");
        assert_eq!(
            conditions["x-kubernetes-list-map-keys"],
            serde_json::json!(["type"])
        );
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
}
