//! Which raw events a policy, or its alert rule, selects: by type, reason and reporting controller.
//! A leaf of its own so that the settings and the alert rule can both use it.

/// Which raw events a policy turns into series. An empty list means "any".
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MatchFilter {
    pub types: Vec<String>,
    pub reasons: Vec<String>,
    pub exclude_reasons: Vec<String>,
    pub reporting_controllers: Vec<String>,
}

impl MatchFilter {
    pub fn matches(&self, type_: &str, reason: &str, reporting_controller: &str) -> bool {
        let any_or = |list: &[String], v: &str| list.is_empty() || list.iter().any(|x| x == v);
        any_or(&self.types, type_)
            && any_or(&self.reasons, reason)
            && !self.exclude_reasons.iter().any(|x| x == reason)
            && any_or(&self.reporting_controllers, reporting_controller)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filter_semantics() {
        let f = MatchFilter {
            types: vec!["Warning".into()],
            exclude_reasons: vec!["Pulled".into()],
            ..Default::default()
        };
        assert!(f.matches("Warning", "BackOff", "kubelet"));
        assert!(!f.matches("Normal", "BackOff", "kubelet"));
        assert!(!f.matches("Warning", "Pulled", "kubelet"));
        assert!(MatchFilter::default().matches("", "", ""));
    }
}
