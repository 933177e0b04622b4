//! Metric names in alert rules and dashboards, and in a `/metrics` scrape, so that a test can say
//! that every name an alert or a panel uses is one the operator exports.

use std::collections::BTreeSet;

/// The `event_series_*` names in `text` (PromQL in YAML or JSON).
pub fn metric_names_used(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut rest = text;
    while let Some(at) = rest.find("event_series_") {
        let tail = &rest[at..];
        let end = tail
            .find(|c: char| !(c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'))
            .unwrap_or(tail.len());
        names.insert(tail[..end].to_owned());
        rest = &tail[end..];
    }
    names
}

/// The sample names an OpenMetrics scrape can show, from its `# TYPE` lines: a counter `x` as
/// `x_total`, a histogram as `x` (its family name) and `x_bucket`, `x_sum` and `x_count`, anything
/// else as `x`. A labelled family shows only after its first sample.
pub fn exported_names(scrape: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for line in scrape.lines() {
        let mut words = line.split_whitespace();
        if let (Some("#"), Some("TYPE"), Some(name), Some(kind)) =
            (words.next(), words.next(), words.next(), words.next())
        {
            match kind {
                "counter" => {
                    names.insert(format!("{name}_total"));
                }
                "histogram" => {
                    for suffix in ["", "_bucket", "_sum", "_count"] {
                        names.insert(format!("{name}{suffix}"));
                    }
                }
                _ => {
                    names.insert(name.to_owned());
                }
            }
        }
    }
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_read_from_promql_and_type_lines() {
        let used = metric_names_used(
            r#"sum(rate(event_series_api_requests_total{code=~"4.."}[5m])) / event_series_leader"#,
        );
        assert_eq!(
            used.into_iter().collect::<Vec<_>>(),
            ["event_series_api_requests_total", "event_series_leader"]
        );
        let exported = exported_names(
            "# TYPE event_series_api_requests counter\n# TYPE event_series_leader gauge\n\
             # TYPE event_series_lag_seconds histogram\n",
        );
        assert!(exported.contains("event_series_api_requests_total"));
        assert!(exported.contains("event_series_lag_seconds_bucket"));
        assert!(!exported.contains("event_series_api_requests"));
    }
}
