//! Install (config/prometheus, config/grafana): every metric the alert rules and the dashboard
//! use is in the scrape of a running operator that has made a series.

use crate::operator::{crashloop, start, wait_for};
use anyhow::Result;
use event_series_test_support::cluster::{TestNamespace, client};
use event_series_test_support::manifests::{exported_names, metric_names_used};
use event_series_test_support::repo_root;

#[tokio::test]
async fn rules_and_dashboard_name_only_metrics_a_running_operator_exports() -> Result<()> {
    let client = client().await?;
    let ns = TestNamespace::new(&client, "observability").await?;
    let op = start(&ns.name, &["--heartbeat-interval", "2s"])?;
    crashloop(&ns.name, 1, "4", 8)?;
    wait_for(&client, &ns.name, "a series", |objs| objs.len() == 1).await?;
    let (code, scrape) = op.get("/metrics").unwrap_or_default();
    assert_eq!(code, 200);
    let root = repo_root();
    let mut used = metric_names_used(&std::fs::read_to_string(
        root.join("charts/event-series/files/prometheus-rule.yaml"),
    )?);
    used.extend(metric_names_used(&std::fs::read_to_string(
        root.join("config/grafana/event-series.json"),
    )?));
    let exported = exported_names(&scrape);
    let missing: Vec<_> = used.difference(&exported).collect();
    println!(
        "{} metric names used by the rules and the dashboard, {} exported, missing: {missing:?}",
        used.len(),
        exported.len()
    );
    assert!(missing.is_empty(), "used but not exported: {missing:?}");
    drop(op);
    ns.cleanup().await
}
