//! The knobs of an EventSeriesPolicy as plain engine parameters, and how several policies resolve to
//! the settings of one namespace. Pure data: the operator crate's `config::resolve` converts the CRD types into these.

use crate::alert::AlertRule;
use crate::filter::MatchFilter;
use chrono::TimeDelta;
use std::collections::BTreeMap;
use std::sync::Arc;

/// Settings that govern the series of one namespace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settings {
    /// How often an Ongoing series is rewritten, so its TTL never runs out.
    pub heartbeat_interval: TimeDelta,
    /// When an Ongoing series is first rewritten after its start, then at twice that, four times,
    /// ... while the step is shorter than `heartbeat_interval`, so that what a reader sees of a young
    /// loop is at most about half its age old. Zero: no early refreshes.
    pub first_refresh: TimeDelta,
    /// Quiet time after which a series is Finished.
    pub finish_after: TimeDelta,
    /// Largest gap between two occurrences of one series.
    pub series_window: TimeDelta,
    /// Whether the note (message) is part of the isomorphic key.
    pub include_note: bool,
    pub filter: MatchFilter,
    /// Most series the policy keeps active at once; beyond it the least recently active one is finished
    /// early (written with its count, never lost).
    pub max_active_series: usize,
    /// Most series one namespace keeps active at once (`usize::MAX`: no bound of its own).
    pub max_active_series_per_namespace: usize,
    /// Which of its loops are raised as alerts (`spec.alert`); `None`: none.
    pub alert: Option<Arc<AlertRule>>,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            heartbeat_interval: TimeDelta::minutes(30),
            first_refresh: TimeDelta::minutes(1),
            finish_after: TimeDelta::minutes(6),
            series_window: TimeDelta::minutes(6),
            include_note: false,
            filter: MatchFilter::default(),
            // Sized with twice as many candidates, their keys within --max-key-bytes and a pending
            // write each, all full at once, to fit the Deployment's 256 MiB limit
            // (docs/HOW-IT-WORKS.md, Memory is bounded); at a 30-minute heartbeat it needs 28 writes
            // a second, under the writer's default pace.
            max_active_series: 50_000,
            max_active_series_per_namespace: usize::MAX,
            alert: None,
        }
    }
}

impl Settings {
    /// The early refresh of step `step` (0, 1, 2, ...): `first_refresh` times 2^step after the
    /// start, while that step is shorter than the heartbeat interval; `None` past the last step or
    /// with refreshes off.
    pub fn refresh_after(&self, step: u8) -> Option<TimeDelta> {
        if self.first_refresh <= TimeDelta::zero() || step >= 31 {
            return None;
        }
        let after = self.first_refresh.checked_mul(1i32 << step)?;
        (after < self.heartbeat_interval).then_some(after)
    }

    /// Candidates (keys seen once) are bounded too: twice the series bound, at least 1,024.
    pub fn max_candidates(&self) -> usize {
        self.max_active_series.saturating_mul(2).max(1024)
    }
}

/// Errors in user-supplied settings. The CRD's own validation refuses these first; this is the second
/// line for flags and for objects written before a validation change.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SettingsError {
    #[error("{field}: {value:?} is not a duration such as 90s, 6m or 1h ({reason})")]
    BadDuration {
        field: &'static str,
        value: String,
        reason: String,
    },
    #[error("{field}: {value:?} is shorter than the minimum of 1s")]
    TooShort { field: &'static str, value: String },
    #[error("{field}: {value:?} is longer than the maximum of 100 years")]
    TooLong { field: &'static str, value: String },
    #[error("{field}: {message}")]
    Invalid {
        field: &'static str,
        message: String,
    },
}

/// A label selector over namespaces (the subset of `metav1.LabelSelector` semantics that applies).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Selector {
    pub match_labels: BTreeMap<String, String>,
    pub match_expressions: Vec<Requirement>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Requirement {
    pub key: String,
    pub op: Operator,
    pub values: Vec<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Operator {
    In,
    NotIn,
    Exists,
    DoesNotExist,
}

impl Selector {
    /// An empty selector selects everything, as in Kubernetes.
    pub fn is_empty(&self) -> bool {
        self.match_labels.is_empty() && self.match_expressions.is_empty()
    }

    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.match_labels
            .iter()
            .all(|(k, v)| labels.get(k) == Some(v))
            && self.match_expressions.iter().all(|r| {
                let v = labels.get(&r.key);
                match r.op {
                    Operator::In => v.is_some_and(|v| r.values.contains(v)),
                    Operator::NotIn => v.is_none_or(|v| !r.values.contains(v)),
                    Operator::Exists => v.is_some(),
                    Operator::DoesNotExist => v.is_none(),
                }
            })
    }
}

/// One policy as the engine applies it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Policy {
    pub name: String,
    pub selector: Selector,
    pub settings: Arc<Settings>,
}

/// All policies, in the order they take precedence.
///
/// How several policies combine: each namespace is governed by exactly one policy, never a mix of
/// fields. A policy with a non-empty `namespaceSelector` takes precedence over one that selects every
/// namespace; among equals, the policy whose name sorts first wins. A namespace no policy selects gets the
/// built-in defaults. `maxActiveSeries` bounds the series of the namespaces one policy governs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PolicySet {
    policies: Vec<Policy>,
    defaults: Arc<Settings>,
}

/// Index of the settings a namespace resolves to: 0 is the built-in defaults, `i + 1` is policy `i`.
pub type SlotIdx = usize;

impl PolicySet {
    pub fn new(mut policies: Vec<Policy>, defaults: Settings) -> PolicySet {
        policies.sort_by(|a, b| {
            (a.selector.is_empty(), &a.name).cmp(&(b.selector.is_empty(), &b.name))
        });
        PolicySet {
            policies,
            defaults: Arc::new(defaults),
        }
    }

    /// One set of settings for every namespace.
    pub fn uniform(settings: Settings) -> PolicySet {
        PolicySet::new(Vec::new(), settings)
    }

    pub fn slots(&self) -> usize {
        self.policies.len() + 1
    }

    pub fn settings(&self, slot: SlotIdx) -> &Arc<Settings> {
        match slot {
            0 => &self.defaults,
            i => self
                .policies
                .get(i - 1)
                .map_or(&self.defaults, |p| &p.settings),
        }
    }

    /// Whether a policy in force requires its alerts delivered (`spec.alert.required`).
    pub fn alerts_required(&self) -> bool {
        (0..self.slots()).any(|slot| {
            self.settings(slot)
                .alert
                .as_ref()
                .is_some_and(|a| a.required)
        })
    }

    /// Name of the policy behind a slot, `None` for the built-in defaults.
    pub fn policy_name(&self, slot: SlotIdx) -> Option<&str> {
        slot.checked_sub(1)
            .and_then(|i| self.policies.get(i))
            .map(|p| p.name.as_str())
    }

    /// The slot governing a namespace with these labels.
    pub fn resolve(&self, labels: &BTreeMap<String, String>) -> SlotIdx {
        self.policies
            .iter()
            .position(|p| p.selector.matches(labels))
            .map_or(0, |i| i + 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(kv: &[(&str, &str)]) -> BTreeMap<String, String> {
        kv.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn selector_operators() {
        let sel = Selector {
            match_labels: labels(&[("team", "a")]).into_iter().collect(),
            match_expressions: vec![
                Requirement {
                    key: "env".into(),
                    op: Operator::In,
                    values: vec!["prod".into(), "stage".into()],
                },
                Requirement {
                    key: "skip".into(),
                    op: Operator::DoesNotExist,
                    values: vec![],
                },
            ],
        };
        assert!(sel.matches(&labels(&[("team", "a"), ("env", "prod")])));
        assert!(!sel.matches(&labels(&[("team", "a"), ("env", "dev")])));
        assert!(!sel.matches(&labels(&[("team", "a"), ("env", "prod"), ("skip", "")])));
        assert!(!sel.matches(&labels(&[("env", "prod")])));
        assert!(Selector::default().matches(&labels(&[])));
    }

    #[test]
    fn specific_policies_win_then_name_order() {
        let pol = |name: &str, sel: Selector, window: i64| Policy {
            name: name.into(),
            selector: sel,
            settings: Arc::new(Settings {
                series_window: TimeDelta::seconds(window),
                ..Default::default()
            }),
        };
        let prod = Selector {
            match_labels: labels(&[("env", "prod")]),
            ..Default::default()
        };
        let set = PolicySet::new(
            vec![
                pol("a-everything", Selector::default(), 1),
                pol("z-prod", prod.clone(), 2),
                pol("b-prod", prod, 3),
            ],
            Settings::default(),
        );
        let prod_slot = set.resolve(&labels(&[("env", "prod")]));
        assert_eq!(set.policy_name(prod_slot), Some("b-prod"));
        assert_eq!(set.settings(prod_slot).series_window, TimeDelta::seconds(3));
        let other = set.resolve(&labels(&[]));
        assert_eq!(set.policy_name(other), Some("a-everything"));
        let none = PolicySet::uniform(Settings::default());
        assert_eq!(none.resolve(&labels(&[])), 0);
        assert_eq!(none.policy_name(0), None);
    }
}
