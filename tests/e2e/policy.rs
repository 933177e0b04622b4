//! EventSeriesPolicy on the real apiserver: the CRD's own validation, and live changes applied by a
//! running operator with their status.
//!
//! Policies here select only their test's namespace (by `kubernetes.io/metadata.name`), so that the
//! operators of other tests on the shared cluster are not affected.

use crate::OPERATOR;
use crate::operator::{count, state, wait_for};
use anyhow::{Context, Result, bail};
use event_series::config::EventSeriesPolicy;
use event_series_test_support::cluster::{
    Dedicated, TestNamespace, apply_on, client, client_for, kubeconfig,
};
use event_series_test_support::raw::kubelet_backoff;
use kube::api::{Api, DeleteParams};
use std::time::{Duration, Instant};

/// Applies a manifest to the shared cluster.
fn apply(yaml: &str, extra: &[&str]) -> Result<String> {
    apply_on(kubeconfig(), yaml, extra)
}

fn policy_yaml(name: &str, spec: &str) -> String {
    format!(
        "apiVersion: eventseries.dev/v1alpha1\nkind: EventSeriesPolicy\nmetadata:\n  name: {name}\n\
         spec:\n{spec}"
    )
}

/// Configuration: invalid values are refused by the API server itself, with a message that names
/// the field; a valid empty spec is defaulted by the server to the default settings.
#[tokio::test]
async fn bad_policies_are_refused_by_the_api_server_naming_the_field() -> Result<()> {
    let _ = client().await?; // the shared cluster, with the CRD installed
    let cases = [
        ("  finishAfter: 500ms\n", "spec.finishAfter", "at least 1s"),
        (
            "  firstRefresh: 500ms\n",
            "spec.firstRefresh",
            "must be 0 or at least 1s",
        ),
        ("  firstRefresh: \"00\"\n", "spec.firstRefresh", ""),
        ("  heartbeatInterval: soon\n", "spec.heartbeatInterval", ""),
        ("  seriesWindow: \"-5m\"\n", "spec.seriesWindow", ""),
        ("  maxActiveSeries: 0\n", "spec.maxActiveSeries", ""),
        (
            "  maxActiveSeries: 5\n  maxActiveSeriesPerNamespace: 6\n",
            "spec",
            "maxActiveSeriesPerNamespace must not exceed maxActiveSeries",
        ),
        (
            "  maxActiveSeriesPerNamespace: 0\n",
            "spec.maxActiveSeriesPerNamespace",
            "",
        ),
        (
            "  match:\n    types: [Critical]\n",
            "spec.match.types",
            "Normal or Warning",
        ),
        ("  alert:\n    minCount: 1\n", "spec.alert.minCount", ""),
        (
            "  alert:\n    minDuration: 500ms\n",
            "spec.alert.minDuration",
            "must be 0 or at least 1s",
        ),
        (
            "  alert:\n    alertname: page me\n",
            "spec.alert.alertname",
            "",
        ),
        (
            "  alert:\n    types: [Critical]\n",
            "spec.alert.types",
            "Normal or Warning",
        ),
        (
            "  namespaceSelector:\n    matchExpressions:\n    - {key: env, operator: Exists, values: [x]}\n",
            "spec.namespaceSelector.matchExpressions[0]",
            "values must be",
        ),
        (
            "  namespaceSelector:\n    matchExpressions:\n    - {key: env, operator: Near}\n",
            "spec.namespaceSelector.matchExpressions[0].operator",
            "",
        ),
    ];
    for (i, (spec, field, message)) in cases.iter().enumerate() {
        let yaml = policy_yaml(&format!("e2e-refused-{i}"), spec);
        match apply(&yaml, &["--dry-run=server"]) {
            Ok(out) => bail!("accepted {spec:?}: {out}"),
            Err(e) => {
                let e = e.to_string();
                println!("refused: {}", e.trim());
                assert!(e.contains(field), "{spec:?}: {e} does not name {field}");
                assert!(
                    e.contains(message),
                    "{spec:?}: {e} does not say {message:?}"
                );
            }
        }
    }
    // The server fills in the defaults of an empty spec.
    let out = apply(
        &policy_yaml("e2e-defaults", "  {}\n"),
        &["--dry-run=server", "-o", "json"],
    )?;
    let p: EventSeriesPolicy = serde_json::from_str(&out)?;
    assert_eq!(p.spec.heartbeat_interval, "30m");
    assert_eq!(p.spec.finish_after, "6m");
    assert_eq!(p.spec.series_window, "6m");
    assert_eq!(p.spec.max_active_series, 50_000);
    assert_eq!(p.spec.first_refresh, "1m");
    // Early refreshes can be turned off.
    for off in ["\"0\"", "0s"] {
        apply(
            &policy_yaml("e2e-no-refresh", &format!("  firstRefresh: {off}\n")),
            &["--dry-run=server"],
        )
        .with_context(|| format!("firstRefresh: {off} is accepted"))?;
    }
    Ok(())
}

fn ready(p: &EventSeriesPolicy) -> Option<(String, Option<i64>, Option<i64>)> {
    let s = p.status.as_ref()?;
    let c = s.conditions.iter().find(|c| c.type_ == "Ready")?;
    Some((c.status.clone(), s.observed_generation, s.namespaces))
}

/// A kubelet `Unhealthy` raw event counting 4.
fn unhealthy_named(ns: &str, name: &str, pod: &str) -> k8s_openapi::api::core::v1::Event {
    let mut ev = kubelet_backoff(ns, name, pod, 4);
    ev.reason = Some("Unhealthy".into());
    ev
}

/// Polls the policy until its status reports `generation` with Ready=`status`.
async fn wait_status(
    api: &Api<EventSeriesPolicy>,
    name: &str,
    status: &str,
) -> Result<EventSeriesPolicy> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let p = api.get(name).await?;
        if let Some((s, observed, _)) = ready(&p)
            && s == status
            && observed == p.metadata.generation
        {
            return Ok(p);
        }
        if Instant::now() > deadline {
            bail!(
                "policy {name}: status never reached Ready={status} for its generation: {:?}",
                p.status
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Configuration: a policy applies live, without a restart; its status reports the generation it
/// applies; a change of `match` applies too. On a cluster of its own: only an operator watching every
/// namespace writes policy statuses.
#[tokio::test]
async fn a_policy_applies_live_and_reports_its_status() -> Result<()> {
    let cluster = Dedicated::start("policy-live", &[])?;
    let kc = cluster.kubeconfig.as_path();
    let client = client_for(kc).await?;
    let ns = TestNamespace::new(&client, "policy_live").await?;
    // Flag defaults that would keep a series Ongoing for the whole test.
    let op = OPERATOR.launch(
        kc,
        &ns.name,
        &["--finish-after", "10m", "--series-window", "10m"],
    )?;
    let apply = |yaml: &str, extra: &[&str]| apply_on(kc, yaml, extra);
    let raw: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(client.clone(), &ns.name);
    let pp = Default::default();
    raw.create(&pp, &kubelet_backoff(&ns.name, "a", "pod-a", 3))
        .await?;
    wait_for(
        &client,
        &ns.name,
        "an Ongoing series under the defaults",
        |objs| objs.len() == 1 && state(&objs[0]) == "Ongoing" && count(&objs[0]) == 3,
    )
    .await?;

    let name = format!("e2e-{}", ns.name);
    let selector = format!(
        "  namespaceSelector:\n    matchLabels:\n      kubernetes.io/metadata.name: {}\n",
        ns.name
    );
    apply(
        &policy_yaml(
            &name,
            &format!("{selector}  finishAfter: 2s\n  seriesWindow: 2s\n"),
        ),
        &[],
    )?;
    let policies: Api<EventSeriesPolicy> = Api::all(client.clone());
    // The quiet series now outlived finishAfter: Finished, without a restart.
    wait_for(
        &client,
        &ns.name,
        "the series Finished by the new policy",
        |objs| objs.len() == 1 && state(&objs[0]) == "Finished" && count(&objs[0]) == 3,
    )
    .await?;
    let p = wait_status(&policies, &name, "True").await?;
    assert_eq!(
        ready(&p).and_then(|r| r.2),
        Some(1),
        "it governs one namespace"
    );

    // A match change: BackOff no longer makes series, Unhealthy still does.
    apply(
        &policy_yaml(
            &name,
            &format!(
                "{selector}  finishAfter: 2s\n  seriesWindow: 2s\n  match:\n    excludeReasons: [BackOff]\n"
            ),
        ),
        &[],
    )?;
    let p = wait_status(&policies, &name, "True").await?;
    assert_eq!(p.metadata.generation, Some(2));
    raw.create(&pp, &kubelet_backoff(&ns.name, "b", "pod-b", 4))
        .await?;
    raw.create(&pp, &unhealthy_named(&ns.name, "c", "pod-c"))
        .await?;
    let objs = wait_for(&client, &ns.name, "a series for Unhealthy", |objs| {
        objs.iter()
            .any(|e| e.reason.as_deref() == Some("Unhealthy") && count(e) == 4)
    })
    .await?;
    assert!(
        !objs
            .iter()
            .any(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("pod-b")),
        "an excluded reason made a series: {objs:?}"
    );
    assert_eq!(
        op.metric("event_series_dropped_total{reason=\"filtered\"}"),
        4.0
    );
    // A duration that overflows (999,999,999,999 hours) is refused by the API server, naming the
    // field. One it takes but the operator does not (1,000,000 hours, beyond 100 years; a policy
    // stored before a validation change would be the same): the policy is reported InvalidSpec
    // naming the field, and the operator stays alive, applying the last valid settings.
    let overflow = format!("e2e-overflow-{}", ns.name);
    let spec = |d: &str| policy_yaml(&overflow, &format!("{selector}  heartbeatInterval: {d}\n"));
    match apply(&spec("999999999999h"), &[]) {
        Ok(out) => bail!("an overflowing duration was accepted: {out}"),
        Err(e) => assert!(e.to_string().contains("spec.heartbeatInterval"), "{e}"),
    }
    apply(&spec("1000000h"), &[])?;
    let p = wait_status(&policies, &overflow, "False").await?;
    let condition = p
        .status
        .as_ref()
        .and_then(|s| s.conditions.iter().find(|c| c.type_ == "Ready"))
        .cloned();
    let condition = condition.context("a Ready condition")?;
    assert_eq!(condition.reason, "InvalidSpec");
    assert!(
        condition.message.contains("spec.heartbeatInterval"),
        "{}",
        condition.message
    );
    raw.create(&pp, &unhealthy_named(&ns.name, "d", "pod-d"))
        .await?;
    wait_for(&client, &ns.name, "a series after the overflow", |objs| {
        objs.iter().any(|e| {
            e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("pod-d") && count(e) == 4
        })
    })
    .await?;
    assert!(matches!(op.get("/healthz"), Some((200, _))), "alive");
    policies.delete(&overflow, &DeleteParams::default()).await?;
    // Deleted: its namespace is about to go, and a leftover would only show up in `kubectl get esp`.
    policies.delete(&name, &DeleteParams::default()).await?;
    ns.cleanup().await
}
