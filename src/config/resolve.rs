//! From the policies in the cluster to what the engine applies: each valid policy becomes a
//! [`Policy`], each invalid one a verdict naming the field, and all of them one [`PolicySet`].
//! A policy that fails these checks is reported `Ready=False` and ignored, never half-applied.

use super::crd::{
    AlertSpec, EventSeriesPolicy, EventSeriesPolicySpec, NamespaceSelector, SelectorOperator,
};
use event_series_core::alert::{AlertRule, DEFAULT_ALERTNAME};
use event_series_core::duration;
use event_series_core::filter::MatchFilter;
use event_series_core::settings::{
    Operator, Policy, PolicySet, Requirement, Selector, Settings, SettingsError,
};
use std::collections::BTreeMap;
use std::sync::Arc;

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

fn alert_rule(a: &AlertSpec) -> Result<Arc<AlertRule>, SettingsError> {
    let min_count = u64::try_from(a.min_count)
        .ok()
        .filter(|n| *n >= 2)
        .ok_or_else(|| SettingsError::Invalid {
            field: "spec.alert.minCount",
            message: format!("{} is not at least 2", a.min_count),
        })?;
    Ok(Arc::new(AlertRule {
        min_count,
        min_duration: duration::parse_or_off("spec.alert.minDuration", &a.min_duration)?,
        filter: MatchFilter {
            types: a.types.clone(),
            reasons: a.reasons.clone(),
            exclude_reasons: a.exclude_reasons.clone(),
            reporting_controllers: Vec::new(),
        },
        alertname: Arc::from(a.alertname.as_deref().unwrap_or(DEFAULT_ALERTNAME)),
        required: a.required,
    }))
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
    let max_active_series_per_namespace = match spec.max_active_series_per_namespace {
        None => usize::MAX,
        Some(n) => usize::try_from(n)
            .ok()
            .filter(|n| (1..=max_active_series).contains(n))
            .ok_or_else(|| SettingsError::Invalid {
                field: "spec.maxActiveSeriesPerNamespace",
                message: format!("{n} is not between 1 and maxActiveSeries ({max_active_series})"),
            })?,
    };
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
    let alert = spec.alert.as_ref().map(alert_rule).transpose()?;
    let m = &spec.match_;
    Ok(Policy {
        name: name.to_owned(),
        selector: spec
            .namespace_selector
            .as_ref()
            .map(selector)
            .unwrap_or_default(),
        settings: Arc::new(Settings {
            heartbeat_interval: duration::parse(
                "spec.heartbeatInterval",
                &spec.heartbeat_interval,
            )?,
            first_refresh: duration::parse_or_off("spec.firstRefresh", &spec.first_refresh)?,
            finish_after: duration::parse("spec.finishAfter", &spec.finish_after)?,
            series_window: duration::parse("spec.seriesWindow", &spec.series_window)?,
            include_note: spec.isomorphism.include_note,
            filter: MatchFilter {
                types: m.types.clone(),
                reasons: m.reasons.clone(),
                exclude_reasons: m.exclude_reasons.clone(),
                reporting_controllers: m.reporting_controllers.clone(),
            },
            max_active_series,
            max_active_series_per_namespace,
            alert,
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

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeDelta;

    fn policy(name: &str, spec: EventSeriesPolicySpec) -> EventSeriesPolicy {
        let mut p = EventSeriesPolicy::new(name, spec);
        p.metadata.generation = Some(3);
        p
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
}
