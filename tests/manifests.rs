//! Install: the Helm chart installs what `config/default` installs, `helm lint` is clean, the
//! alert rules pass `promtool`, and every metric the rules and the dashboard use is one the operator
//! exports. The tools come from `hack/tools.sh` (helm, promtool) and `hack/build-envtest.sh`
//! (kubectl, for kustomize); `just test` builds both first.

// A scenario reads as one story from top to bottom: the function-length lint is for the product.
#![allow(clippy::too_many_lines)]

use event_series::operations::metrics::Metrics;
use event_series_test_support::manifests::{exported_names, metric_names_used};
use event_series_test_support::repo_root;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;

/// A tool built under `target/`, or `None` (a skip, said out loud) when it is missing outside CI.
fn tool(path: &str) -> Option<PathBuf> {
    let bin = repo_root().join(path);
    if bin.exists() {
        return Some(bin);
    }
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "{path} is missing (hack/tools.sh and hack/build-envtest.sh build it)"
    );
    println!("skipped: {path} is missing; run `just tools` and `bash hack/build-envtest.sh`");
    None
}

fn run(bin: &PathBuf, args: &[&str]) -> String {
    let out = Command::new(bin)
        .args(args)
        .current_dir(repo_root())
        .output()
        .expect("the tool runs");
    assert!(
        out.status.success(),
        "{} {args:?}: {}{}",
        bin.display(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Whole numbers written as floats (`1.0`, as the generated CRD has them) as integers, the way
/// kustomize prints them: the same value either way.
fn whole_numbers(v: Value) -> Value {
    match v {
        Value::Number(n) => match n.as_f64() {
            Some(f) if n.is_f64() && f.fract() == 0.0 && f.abs() < 9e15 => Value::from(f as i64),
            _ => Value::Number(n),
        },
        Value::Array(a) => Value::Array(a.into_iter().map(whole_numbers).collect()),
        Value::Object(o) => {
            Value::Object(o.into_iter().map(|(k, v)| (k, whole_numbers(v))).collect())
        }
        other => other,
    }
}

/// Every object of a multi-document YAML stream, by (kind, name, namespace).
fn objects(yaml: &str) -> BTreeMap<(String, String, String), Value> {
    let mut out = BTreeMap::new();
    for doc in serde_yaml_ng::Deserializer::from_str(yaml) {
        let v = whole_numbers(Value::deserialize(doc).expect("valid YAML"));
        if v.is_null() {
            continue;
        }
        let s = |p: &str| {
            v.pointer(p)
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned()
        };
        let key = (s("/kind"), s("/metadata/name"), s("/metadata/namespace"));
        assert!(out.insert(key.clone(), v).is_none(), "{key:?} twice");
    }
    out
}

use serde::Deserialize;

const CHART: &str = "charts/event-series";

/// The Kubernetes version `helm template` renders for: the oldest supported minor, which the
/// chart's `kubeVersion` admits. (A Helm 3 built with `go install` reports v1.20 on its own, which
/// the chart refuses; released Helm binaries report their client-go's version.)
const KUBE_VERSION: &str = "1.34.0";

fn helm_template(helm: &PathBuf, set: &[&str]) -> BTreeMap<(String, String, String), Value> {
    let mut args = vec![
        "template",
        "event-series",
        CHART,
        "--namespace",
        "event-series-system",
        "--include-crds",
        "--kube-version",
        KUBE_VERSION,
    ];
    for s in set {
        args.extend(["--set", s]);
    }
    objects(&run(helm, &args))
}

/// Helm 3 and Helm 4 (`hack/tools.sh` builds both): the chart is linted, rendered and validated by
/// each, since users run either.
fn helms() -> Vec<PathBuf> {
    ["target/tools/bin/helm", "target/tools/bin/helm4"]
        .into_iter()
        .filter_map(tool)
        .collect()
}

#[test]
fn helm_lint_is_clean() {
    for helm in helms() {
        lint_with(&helm);
    }
}

fn lint_with(helm: &PathBuf) {
    let out = run(helm, &["lint", "--strict", CHART]);
    println!("{out}");
    assert!(out.contains("0 chart(s) failed"), "{out}");
    // The values that switch parts on lint as well.
    run(
        helm,
        &[
            "lint",
            "--strict",
            CHART,
            "--set",
            "serviceMonitor.enabled=true,prometheusRule.enabled=true,metrics.certSecret=tls",
        ],
    );
    run(
        helm,
        &[
            "lint",
            "--strict",
            CHART,
            "--kube-version",
            KUBE_VERSION,
            "--set",
            "serviceMonitor.enabled=true,grafanaDashboard.enabled=true,image.digest=sha256:0123456789abcdef0123456789abcdef",
            "--set",
            "metrics.certManager.enabled=true,metrics.certManager.issuerRef.name=ca",
            "--set",
            "metrics.prometheus.serviceAccount.name=prometheus-k8s,metrics.prometheus.serviceAccount.namespace=monitoring",
            "--set",
            "securityContext.runAsUser=null,securityContext.runAsGroup=null",
        ],
    );
}

/// Default values render the objects of `kustomize build config/default`: the same kinds, names and
/// namespaces (the chart leaves the Namespace to Helm), the same RBAC rules, Deployment container,
/// security contexts, Service, PodDisruptionBudget, NetworkPolicy and admission policy.
#[test]
fn the_chart_renders_what_config_default_installs() {
    let (Some(helm), Some(kubectl)) = (
        tool("target/tools/bin/helm"),
        tool("target/envtest/bin/kubectl"),
    ) else {
        return;
    };
    let chart = helm_template(&helm, &[]);
    let mut kustomized = objects(&run(&kubectl, &["kustomize", "config/default"]));
    let namespace = kustomized.remove(&(
        "Namespace".into(),
        "event-series-system".into(),
        String::new(),
    ));
    assert!(namespace.is_some(), "config/default makes the namespace");
    let names =
        |m: &BTreeMap<(String, String, String), Value>| m.keys().cloned().collect::<Vec<_>>();
    assert_eq!(names(&chart), names(&kustomized), "the same objects");

    let same = |kind: &str, name: &str, pointer: &str| {
        let ns = if matches!(
            kind,
            "ClusterRole"
                | "ClusterRoleBinding"
                | "CustomResourceDefinition"
                | "ValidatingAdmissionPolicy"
                | "ValidatingAdmissionPolicyBinding"
                | "FlowSchema"
        ) {
            ""
        } else {
            "event-series-system"
        };
        let key = (kind.to_owned(), name.to_owned(), ns.to_owned());
        let a = chart[&key].pointer(pointer);
        let b = kustomized[&key].pointer(pointer);
        assert!(
            a.is_some(),
            "{kind}/{name} {pointer} missing from the chart"
        );
        assert_eq!(a, b, "{kind}/{name} {pointer}");
    };
    for (kind, name) in [
        ("ClusterRole", "event-series"),
        ("ClusterRole", "event-series-metrics-reader"),
        ("Role", "event-series-leader-election"),
    ] {
        same(kind, name, "/rules");
    }
    for (kind, name) in [
        ("ClusterRoleBinding", "event-series"),
        ("RoleBinding", "event-series-leader-election"),
    ] {
        same(kind, name, "/roleRef");
        same(kind, name, "/subjects");
    }
    let pod = "/spec/template/spec";
    for field in [
        "/serviceAccountName",
        "/automountServiceAccountToken",
        "/securityContext",
        "/terminationGracePeriodSeconds",
        "/topologySpreadConstraints",
        "/containers/0/image",
        "/containers/0/args",
        "/containers/0/env",
        "/containers/0/ports",
        "/containers/0/livenessProbe",
        "/containers/0/readinessProbe",
        "/containers/0/resources",
        "/containers/0/securityContext",
    ] {
        same("Deployment", "event-series", &format!("{pod}{field}"));
    }
    same("Deployment", "event-series", "/spec/replicas");
    same("Deployment", "event-series", "/spec/selector");
    same("Deployment", "event-series", "/spec/strategy");
    // A rollout stops an old replica only once the new one is Ready, that is warm.
    let deployment = &kustomized[&(
        "Deployment".to_owned(),
        "event-series".to_owned(),
        "event-series-system".to_owned(),
    )];
    assert_eq!(
        deployment.pointer("/spec/strategy/rollingUpdate/maxUnavailable"),
        Some(&Value::from(0)),
        "{deployment}"
    );
    same("Service", "event-series-metrics", "/spec");
    same("PodDisruptionBudget", "event-series", "/spec");
    same("NetworkPolicy", "event-series", "/spec");
    same(
        "ServiceAccount",
        "event-series",
        "/automountServiceAccountToken",
    );
    same(
        "ValidatingAdmissionPolicy",
        "event-series-series-objects",
        "/spec",
    );
    same(
        "ValidatingAdmissionPolicyBinding",
        "event-series-series-objects",
        "/spec",
    );
    same(
        "CustomResourceDefinition",
        "eventseriespolicies.eventseries.dev",
        "/spec",
    );
    same("FlowSchema", "event-series-leader-election", "/spec");
}

/// The values do what the chart's README says.
#[test]
fn chart_values_switch_metrics_security_and_the_optional_parts() {
    let Some(helm) = tool("target/tools/bin/helm") else {
        return;
    };
    let args = |m: &BTreeMap<(String, String, String), Value>| -> Vec<String> {
        let key = (
            "Deployment".to_owned(),
            "event-series".to_owned(),
            "event-series-system".to_owned(),
        );
        serde_json::from_value(m[&key]["spec"]["template"]["spec"]["containers"][0]["args"].clone())
            .unwrap_or_default()
    };
    let plain = helm_template(&helm, &["metrics.secure=false"]);
    assert!(args(&plain).contains(&"--metrics-secure=false".to_owned()));
    let own_cert = helm_template(&helm, &["metrics.certSecret=event-series-tls"]);
    assert!(
        args(&own_cert)
            .iter()
            .any(|a| a.starts_with("--metrics-cert-dir="))
    );
    let without = helm_template(
        &helm,
        &[
            "networkPolicy.enabled=false,admissionPolicy.enabled=false,podDisruptionBudget.enabled=false",
        ],
    );
    let kinds: BTreeSet<&str> = without.keys().map(|k| k.0.as_str()).collect();
    for gone in [
        "NetworkPolicy",
        "ValidatingAdmissionPolicy",
        "PodDisruptionBudget",
    ] {
        assert!(!kinds.contains(gone), "{gone} still rendered");
    }
    // Another release name and namespace: the admission policy exempts that ServiceAccount.
    let other = objects(&run(
        &helm,
        &[
            "template",
            "obs",
            CHART,
            "--namespace",
            "ops",
            "--kube-version",
            KUBE_VERSION,
        ],
    ));
    let vap = other
        .iter()
        .find(|(k, _)| k.0 == "ValidatingAdmissionPolicy")
        .map(|(_, v)| v.to_string())
        .unwrap_or_default();
    assert!(
        vap.contains("system:serviceaccount:ops:event-series"),
        "{vap}"
    );
    let monitoring = helm_template(
        &helm,
        &["serviceMonitor.enabled=true,prometheusRule.enabled=true"],
    );
    let kinds: BTreeSet<&str> = monitoring.keys().map(|k| k.0.as_str()).collect();
    assert!(kinds.contains("ServiceMonitor") && kinds.contains("PrometheusRule"));
    let monitor = |m: &BTreeMap<(String, String, String), Value>| {
        m.iter()
            .find(|(k, _)| k.0 == "ServiceMonitor")
            .map(|(_, v)| v["spec"]["endpoints"][0]["tlsConfig"].clone())
            .unwrap_or_default()
    };
    // The self-signed certificate cannot be verified; one of the user's own is (the token was
    // sent to whatever answered even then).
    assert_eq!(monitor(&monitoring)["insecureSkipVerify"], true);
    let verified = monitor(&helm_template(
        &helm,
        &["serviceMonitor.enabled=true,metrics.certSecret=event-series-tls"],
    ));
    assert_eq!(verified["insecureSkipVerify"], false, "{verified}");
    assert_eq!(verified["ca"]["secret"]["name"], "event-series-tls");
    assert_eq!(verified["ca"]["secret"]["key"], "ca.crt");
    assert_eq!(
        verified["serverName"],
        "event-series-metrics.event-series-system.svc"
    );
}

/// Without leader election, two replicas would both write every series: the chart refuses to
/// render that, saying why; one replica renders.
#[test]
fn the_chart_refuses_two_writers() {
    let Some(helm) = tool("target/tools/bin/helm") else {
        return;
    };
    let out = Command::new(&helm)
        .args([
            "template",
            "event-series",
            CHART,
            "--kube-version",
            KUBE_VERSION,
            "--set",
            "leaderElection.enabled=false",
        ])
        .current_dir(repo_root())
        .output()
        .expect("helm runs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "rendered two writers");
    assert!(
        err.contains("without leader election every replica writes"),
        "{err}"
    );
    let one = helm_template(&helm, &["leaderElection.enabled=false,replicas=1"]);
    assert!(one.keys().any(|k| k.0 == "Deployment"));
}

/// `values.schema.json`: a wrong type, a value out of its set or an unknown key (a typo) fails the
/// render with a message naming it; the placement values render where a user expects them.
#[test]
fn the_values_schema_refuses_wrong_values_by_name_and_placement_values_render() {
    for helm in helms() {
        schema_with(&helm);
    }
}

/// The chart's template unit tests (`charts/event-series/tests/*_test.yaml`, helm-unittest): what
/// each value changes in the Deployment, the CRD and the NetworkPolicy, and the refusal of two
/// writers. Every suite must run and pass; a suite file that matches no template fails.
#[test]
fn the_charts_template_unit_tests_pass() {
    let Some(unittest) = tool("target/tools/bin/helm-unittest") else {
        return;
    };
    let out = Command::new(&unittest)
        .args(["--color=false", CHART])
        .current_dir(repo_root())
        .output()
        .expect("helm-unittest runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    println!("{text}");
    assert!(out.status.success(), "helm-unittest failed:\n{text}");
    let suites = std::fs::read_dir(repo_root().join(CHART).join("tests"))
        .expect("the chart's tests")
        .filter(|e| {
            e.as_ref()
                .is_ok_and(|e| e.file_name().to_string_lossy().ends_with("_test.yaml"))
        })
        .count();
    assert!(
        text.contains(&format!("Test Suites: {suites} passed, {suites} total")),
        "not every one of the {suites} suites ran and passed:\n{text}"
    );
}

/// Helm 4 renders the chart exactly as Helm 3 does, with the default values and with every
/// optional part switched on.
#[test]
fn helm_4_renders_what_helm_3_renders() {
    let (Some(helm3), Some(helm4)) = (
        tool("target/tools/bin/helm"),
        tool("target/tools/bin/helm4"),
    ) else {
        return;
    };
    let version = run(&helm4, &["version", "--short"]);
    assert!(version.starts_with("v4."), "{version}");
    for set in [
        &[][..],
        &[
            "serviceMonitor.enabled=true,prometheusRule.enabled=true,metrics.certSecret=tls",
            "alertmanager.urls={https://am.monitoring:9093},alertmanager.secret.name=am",
            "priorityClassName=system-cluster-critical,podLabels.team=platform",
            "grafanaDashboard.enabled=true,image.digest=sha256:0123456789abcdef0123456789abcdef",
            "metrics.prometheus.serviceAccount.name=p,metrics.prometheus.serviceAccount.namespace=m",
        ][..],
        &[
            "serviceMonitor.enabled=true,metrics.certManager.enabled=true",
            "metrics.certManager.issuerRef.name=ca,securityContext.runAsUser=null",
        ][..],
    ] {
        let (three, four) = (helm_template(&helm3, set), helm_template(&helm4, set));
        assert!(three.len() > 10, "{} objects", three.len());
        assert_eq!(
            three.keys().collect::<Vec<_>>(),
            four.keys().collect::<Vec<_>>()
        );
        for (key, object) in &three {
            assert_eq!(Some(object), four.get(key), "{key:?} differs under {set:?}");
        }
    }
}

fn schema_with(helm: &PathBuf) {
    let refused = |set: &str| -> String {
        let out = Command::new(helm)
            .args([
                "template",
                "event-series",
                CHART,
                "--kube-version",
                KUBE_VERSION,
                "--set",
                set,
            ])
            .current_dir(repo_root())
            .output()
            .expect("helm runs");
        assert!(!out.status.success(), "{set} rendered");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    for (set, names) in [
        ("replicas=two", "replicas"),
        ("logFormat=xml", "logFormat"),
        ("metrics.port=70000", "metrics/port"),
        (
            "leaderElection.leaseDuration=15",
            "leaderElection/leaseDuration",
        ),
        ("replica=3", "replica"),
        ("metrics.secured=false", "secured"),
    ] {
        let err = refused(set);
        assert!(
            err.contains("values don't meet the specifications of the schema"),
            "{set}: {err}"
        );
        assert!(
            err.contains(names),
            "{set}: the message does not name {names}: {err}"
        );
    }
    let placed = helm_template(
        helm,
        &[
            "priorityClassName=system-cluster-critical,podLabels.team=platform,logLevel=debug",
            "topologySpreadConstraints[0].maxSkew=2,topologySpreadConstraints[0].topologyKey=zone",
            "topologySpreadConstraints[0].whenUnsatisfiable=DoNotSchedule",
        ],
    );
    let deployment = placed
        .iter()
        .find(|(k, _)| k.0 == "Deployment")
        .map(|(_, v)| v)
        .expect("a Deployment");
    let pod = &deployment["spec"]["template"];
    assert_eq!(pod["spec"]["priorityClassName"], "system-cluster-critical");
    assert_eq!(pod["metadata"]["labels"]["team"], "platform");
    assert_eq!(
        pod["spec"]["topologySpreadConstraints"][0]["topologyKey"],
        "zone"
    );
    assert_eq!(
        pod["spec"]["topologySpreadConstraints"]
            .as_array()
            .map(Vec::len),
        Some(1)
    );
    let args = pod["spec"]["containers"][0]["args"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(args.contains(&Value::from("--log-level=debug")), "{args:?}");
}

/// `alertmanager.*` values: the flags, the credentials Secret mounted where the flags point, and
/// egress to Alertmanager and DNS; a URL that is not http(s) is refused by the schema.
#[test]
fn the_chart_sends_loops_to_alertmanager_with_credentials_from_a_secret() {
    let Some(helm) = tool("target/tools/bin/helm") else {
        return;
    };
    let rendered = helm_template(
        &helm,
        &[
            "alertmanager.urls={https://am-0.monitoring:9093,https://am-1.monitoring:9093}",
            "alertmanager.secret.name=am-credentials,alertmanager.secret.caKey=ca.crt",
            "alertmanager.secret.tokenKey=token,alertmanager.resendInterval=30s",
        ],
    );
    let find = |kind: &str| {
        rendered
            .iter()
            .find(|(k, _)| k.0 == kind)
            .map(|(_, v)| v.clone())
            .unwrap_or_else(|| panic!("a {kind}"))
    };
    let pod = find("Deployment")["spec"]["template"]["spec"].clone();
    let args: Vec<String> = pod["containers"][0]["args"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|a| a.as_str().map(str::to_owned))
        .collect();
    for want in [
        "--alertmanager-url=https://am-0.monitoring:9093,https://am-1.monitoring:9093",
        "--alert-resend-interval=30s",
        "--alertmanager-ca-file=/etc/event-series/alertmanager/ca.crt",
        "--alertmanager-bearer-token-file=/etc/event-series/alertmanager/token",
    ] {
        assert!(args.iter().any(|a| a == want), "{want} missing: {args:?}");
    }
    assert!(
        !args.iter().any(|a| a.starts_with("--max-alerts")),
        "a default is not repeated"
    );
    assert_eq!(pod["volumes"][0]["secret"]["secretName"], "am-credentials");
    assert_eq!(
        pod["containers"][0]["volumeMounts"][0]["mountPath"],
        "/etc/event-series/alertmanager"
    );
    let egress = find("NetworkPolicy")["spec"]["egress"].to_string();
    assert!(egress.contains("9093") && egress.contains("53"), "{egress}");
    let out = Command::new(&helm)
        .args([
            "template",
            "event-series",
            CHART,
            "--kube-version",
            KUBE_VERSION,
            "--set",
            "alertmanager.urls={am:9093}",
        ])
        .current_dir(repo_root())
        .output()
        .expect("helm runs");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("alertmanager/urls/0"));
}

/// The chart's ServiceMonitor, scraper token and binding are those of `config/prometheus`: one way
/// to scrape, whichever way it is installed (the PrometheusRule is one file for both). Neither uses
/// the deprecated `bearerTokenFile`.
#[test]
fn the_charts_monitoring_is_config_prometheus() {
    let (Some(helm), Some(kubectl)) = (
        tool("target/tools/bin/helm"),
        tool("target/envtest/bin/kubectl"),
    ) else {
        return;
    };
    let kustomized = run(&kubectl, &["kustomize", "config/prometheus"]);
    let chart = helm_template(
        &helm,
        &["serviceMonitor.enabled=true,prometheusRule.enabled=true"],
    );
    let kustomized_objects = objects(&kustomized);
    let find = |m: &BTreeMap<(String, String, String), Value>, kind: &str, name: &str| {
        m.iter()
            .find(|(k, _)| k.0 == kind && k.1 == name)
            .map(|(_, v)| v.clone())
            .unwrap_or_else(|| panic!("{kind}/{name}"))
    };
    for (kind, name, pointer) in [
        ("ServiceMonitor", "event-series", "/spec"),
        ("Secret", "event-series-metrics-scraper-token", "/type"),
        (
            "Secret",
            "event-series-metrics-scraper-token",
            "/metadata/annotations",
        ),
        (
            "ServiceAccount",
            "event-series-metrics-scraper",
            "/automountServiceAccountToken",
        ),
        (
            "ClusterRoleBinding",
            "event-series-metrics-reader",
            "/roleRef",
        ),
        (
            "ClusterRoleBinding",
            "event-series-metrics-reader",
            "/subjects",
        ),
    ] {
        let a = find(&chart, kind, name).pointer(pointer).cloned();
        let b = find(&kustomized_objects, kind, name)
            .pointer(pointer)
            .cloned();
        assert!(
            a.is_some(),
            "{kind}/{name} {pointer} missing from the chart"
        );
        assert_eq!(a, b, "{kind}/{name} {pointer}");
    }
    let endpoint = &find(&chart, "ServiceMonitor", "event-series")["spec"]["endpoints"][0];
    assert_eq!(endpoint["honorLabels"], true, "{endpoint}");
    let everything = helm_template(
        &helm,
        &[
            "serviceMonitor.enabled=true,metrics.certManager.enabled=true",
            "metrics.certManager.issuerRef.name=ca",
        ],
    );
    for text in [
        kustomized,
        serde_json::to_string(&everything.values().collect::<Vec<_>>()).unwrap_or_default(),
    ] {
        assert!(
            !text.contains("bearerTokenFile"),
            "bearerTokenFile is deprecated"
        );
    }
}

/// Each monitoring option renders its objects: a cert-manager Certificate whose CA the
/// ServiceMonitor verifies, the binding of a named Prometheus ServiceAccount, the dashboard
/// ConfigMap; and the ServiceMonitor skips verification only when no certificate is configured.
#[test]
fn each_monitoring_option_renders() {
    let Some(helm) = tool("target/tools/bin/helm") else {
        return;
    };
    let kinds = |m: &BTreeMap<(String, String, String), Value>| -> BTreeSet<String> {
        m.keys().map(|k| format!("{}/{}", k.0, k.1)).collect()
    };
    let default = kinds(&helm_template(&helm, &[]));
    for (set, added) in [
        (
            "serviceMonitor.enabled=true",
            &[
                "ServiceMonitor/event-series",
                "ServiceAccount/event-series-metrics-scraper",
                "Secret/event-series-metrics-scraper-token",
                "ClusterRoleBinding/event-series-metrics-reader",
            ][..],
        ),
        (
            "serviceMonitor.enabled=true,serviceMonitor.authorization.mode=scrapeClass,serviceMonitor.scrapeClass=sa",
            &["ServiceMonitor/event-series"][..],
        ),
        (
            "metrics.prometheus.serviceAccount.name=prometheus-k8s,metrics.prometheus.serviceAccount.namespace=monitoring",
            &["ClusterRoleBinding/event-series-metrics-reader"][..],
        ),
        (
            "metrics.certManager.enabled=true,metrics.certManager.issuerRef.name=ca",
            &["Certificate/event-series-metrics"][..],
        ),
        (
            "grafanaDashboard.enabled=true",
            &["ConfigMap/event-series-dashboard"][..],
        ),
        (
            "prometheusRule.enabled=true",
            &["PrometheusRule/event-series"][..],
        ),
    ] {
        let rendered = kinds(&helm_template(&helm, &[set]));
        let new: Vec<&String> = rendered.difference(&default).collect();
        let want: BTreeSet<String> = added.iter().map(|s| (*s).to_owned()).collect();
        assert_eq!(new, want.iter().collect::<Vec<_>>(), "{set}");
    }
    let tls = |set: &[&str]| {
        helm_template(&helm, set)
            .iter()
            .find(|(k, _)| k.0 == "ServiceMonitor")
            .map(|(_, v)| v["spec"]["endpoints"][0]["tlsConfig"].clone())
            .unwrap_or_default()
    };
    let cert_manager = tls(&[
        "serviceMonitor.enabled=true,metrics.certManager.enabled=true",
        "metrics.certManager.issuerRef.name=ca",
    ]);
    assert_eq!(cert_manager["insecureSkipVerify"], false, "{cert_manager}");
    assert_eq!(
        cert_manager["ca"]["secret"]["name"],
        "event-series-metrics-tls"
    );
    assert_eq!(
        tls(&["serviceMonitor.enabled=true"])["insecureSkipVerify"],
        true
    );
    let binding = helm_template(
        &helm,
        &["metrics.prometheus.serviceAccount.name=prometheus-k8s,metrics.prometheus.serviceAccount.namespace=monitoring"],
    )
    .into_iter()
    .find(|(k, _)| k.0 == "ClusterRoleBinding" && k.1 == "event-series-metrics-reader")
    .map(|(_, v)| v)
    .expect("the binding");
    assert_eq!(
        binding["subjects"],
        serde_json::json!([{"kind": "ServiceAccount", "name": "prometheus-k8s", "namespace": "monitoring"}])
    );
    let dashboard = helm_template(&helm, &["grafanaDashboard.enabled=true"])
        .into_iter()
        .find(|(k, _)| k.0 == "ConfigMap")
        .map(|(_, v)| v)
        .expect("the dashboard");
    let json: Value = serde_json::from_str(
        dashboard["data"]["event-series.json"]
            .as_str()
            .unwrap_or_default(),
    )
    .expect("the dashboard is JSON");
    let shipped: Value = serde_json::from_str(
        &std::fs::read_to_string(repo_root().join("config/grafana/event-series.json"))
            .unwrap_or_default(),
    )
    .expect("config/grafana's dashboard");
    assert_eq!(json, shipped);
    assert_eq!(dashboard["metadata"]["labels"]["grafana_dashboard"], "1");
}

/// What an adopter reads about the chart agrees with the project: the chart's `kubeVersion` and
/// its README's minimum are the oldest minor of the README's table of supported versions; the
/// default image (appVersion, the Artifact Hub annotation, the chart README) is the tag
/// `just image` builds; the license is Cargo.toml's, with its text in LICENSE; the dashboard the
/// chart ships is config/grafana's.
#[test]
fn the_charts_metadata_matches_the_project() {
    let root = repo_root();
    let read = |p: &str| std::fs::read_to_string(root.join(p)).unwrap_or_else(|_| panic!("{p}"));
    let readme = read("README.md");
    let oldest = readme
        .lines()
        .skip_while(|l| !l.starts_with("### Supported Kubernetes versions"))
        .filter_map(|l| l.strip_prefix("| 1."))
        .filter_map(|l| l.split(' ').next()?.parse::<u32>().ok())
        .min()
        .expect("the README's table of supported minors");
    let chart: Value =
        serde_yaml_ng::from_str(&read("charts/event-series/Chart.yaml")).expect("Chart.yaml");
    assert_eq!(chart["kubeVersion"], format!(">=1.{oldest}.0-0"));
    assert_eq!(KUBE_VERSION, format!("1.{oldest}.0"));
    let chart_readme = read("charts/event-series/README.md");
    assert!(
        chart_readme.contains(&format!("Kubernetes 1.{oldest} or later")),
        "the chart README states another minimum than 1.{oldest}"
    );
    assert!(
        readme.contains(&format!("Kubernetes 1.{oldest} or later")),
        "the README states no minimum of 1.{oldest}"
    );
    let tag = concat!("v", env!("CARGO_PKG_VERSION"));
    assert_eq!(chart["appVersion"], tag);
    let annotations = &chart["annotations"];
    let images: Value = serde_yaml_ng::from_str(
        annotations["artifacthub.io/images"]
            .as_str()
            .unwrap_or_default(),
    )
    .expect("artifacthub.io/images");
    assert_eq!(
        images[0]["image"],
        format!("ghcr.io/event-series/event-series:{tag}")
    );
    assert!(
        chart_readme.contains(&format!("`{tag}`")),
        "the chart README names another tag than {tag}"
    );
    assert_eq!(annotations["artifacthub.io/license"], "Apache-2.0");
    assert!(read("Cargo.toml").contains("license = \"Apache-2.0\""));
    assert!(
        read("LICENSE")
            .contains("Apache License\n                           Version 2.0, January 2004")
    );
    let links: Value = serde_yaml_ng::from_str(
        annotations["artifacthub.io/links"]
            .as_str()
            .unwrap_or_default(),
    )
    .expect("artifacthub.io/links");
    assert!(links.as_array().is_some_and(|l| l.len() >= 2), "{links}");
    assert_eq!(
        read("charts/event-series/files/grafana-dashboard.json"),
        read("config/grafana/event-series.json"),
        "`just crds` copies the dashboard into the chart"
    );
}

/// The CRD in the chart is the generated one.
#[test]
fn the_chart_crd_is_the_generated_crd() {
    let root = repo_root();
    let chart = std::fs::read_to_string(
        root.join("charts/event-series/files/eventseries.dev_eventseriespolicies.yaml"),
    )
    .unwrap_or_default();
    let generated =
        std::fs::read_to_string(root.join("crds/eventseries.dev_eventseriespolicies.yaml"))
            .unwrap_or_default();
    assert!(!generated.is_empty());
    assert_eq!(
        chart, generated,
        "`just crds` copies the CRD into the chart"
    );
}

fn rule_spec() -> Value {
    let text =
        std::fs::read_to_string(repo_root().join("charts/event-series/files/prometheus-rule.yaml"))
            .unwrap_or_default();
    let rule: Value = serde_yaml_ng::from_str(&text).unwrap_or(Value::Null);
    rule["spec"].clone()
}

#[test]
fn the_alert_rules_pass_promtool() {
    let Some(promtool) = tool("target/tools/bin/promtool") else {
        return;
    };
    let path = std::env::temp_dir().join(format!("event-series-rules-{}.yaml", std::process::id()));
    std::fs::write(
        &path,
        serde_yaml_ng::to_string(&rule_spec()).unwrap_or_default(),
    )
    .expect("writes the rule groups");
    let out = run(&promtool, &["check", "rules", &path.to_string_lossy()]);
    let _ = std::fs::remove_file(&path);
    println!("{out}");
    assert!(out.contains("SUCCESS: 13 rules found"), "{out}");
}

/// Every alert rule, as parsed from the rule file.
fn alert_rules() -> Vec<Value> {
    rule_spec()["groups"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|g| g["rules"].as_array().cloned().unwrap_or_default())
        .filter(|r| r["alert"].is_string())
        .collect()
}

const RUNBOOKS: &str = "https://github.com/event-series/event-series/blob/main/docs/runbooks.md#";

/// Every alert links its runbook: a section of docs/runbooks.md headed by the alert's name (the
/// anchor GitHub makes of it). Every alert has a `for:` unless it counts discrete events over a
/// window (`increase(...) > 0`), which cannot flap faster than its window (the rule file says why).
#[test]
fn every_alert_has_a_runbook_and_a_for_unless_it_counts_events() {
    let runbooks =
        std::fs::read_to_string(repo_root().join("docs/runbooks.md")).expect("docs/runbooks.md");
    let rules = alert_rules();
    assert_eq!(rules.len(), 13);
    for rule in &rules {
        let alert = rule["alert"].as_str().unwrap_or_default();
        let url = rule["annotations"]["runbook_url"]
            .as_str()
            .unwrap_or_default();
        assert_eq!(
            url,
            format!("{RUNBOOKS}{}", alert.to_lowercase()),
            "{alert}: runbook_url"
        );
        assert!(
            runbooks.lines().any(|l| l == format!("## {alert}")),
            "docs/runbooks.md has no section `## {alert}`"
        );
        for part in [
            "**What it means.**",
            "**What to check.**",
            "**What to do.**",
        ] {
            let section = runbooks
                .split(&format!("## {alert}\n"))
                .nth(1)
                .and_then(|rest| rest.split("\n## ").next())
                .unwrap_or_default();
            assert!(section.contains(part), "{alert}'s runbook lacks {part}");
        }
        if rule["for"].is_null() {
            let expr = rule["expr"].as_str().unwrap_or_default();
            assert!(
                expr.contains("increase(") && expr.trim_end().ends_with("> 0"),
                "{alert} has no `for:` and is not an event count: {expr}"
            );
        }
    }
}

/// promtool fires `EventSeriesDown` when no replica is scraped, with its runbook_url: the
/// annotation reaches Alertmanager as written.
#[test]
fn promtool_fires_an_alert_with_its_runbook_url() {
    let Some(promtool) = tool("target/tools/bin/promtool") else {
        return;
    };
    let down = alert_rules()
        .into_iter()
        .find(|r| r["alert"] == "EventSeriesDown")
        .expect("the rule");
    assert!(down["annotations"]["runbook_url"].is_string());
    let dir = std::env::temp_dir().join(format!("event-series-runbook-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temporary directory");
    let rules = dir.join("rules.yaml");
    std::fs::write(
        &rules,
        serde_yaml_ng::to_string(&rule_spec()).unwrap_or_default(),
    )
    .expect("the rules");
    let test = serde_json::json!({
        "rule_files": [rules.to_string_lossy()],
        "evaluation_interval": "1m",
        "tests": [{
            "interval": "1m",
            "input_series": [{"series": "up{job=\"other\"}", "values": "1x10"}],
            "alert_rule_test": [{
                "alertname": "EventSeriesDown",
                "eval_time": "6m",
                "exp_alerts": [{
                    "exp_labels": down["labels"],
                    "exp_annotations": down["annotations"],
                }],
            }],
        }],
    });
    let path = dir.join("test.yaml");
    std::fs::write(&path, serde_yaml_ng::to_string(&test).unwrap_or_default()).expect("the test");
    let out = run(&promtool, &["test", "rules", &path.to_string_lossy()]);
    let _ = std::fs::remove_dir_all(&dir);
    println!("{out}");
    assert!(out.contains("SUCCESS"), "{out}");
}

/// Families a warm standby exports as well as the leader (its engine is current): summed over
/// the replicas they count every loop twice.
const ENGINE_FAMILIES: [&str; 9] = [
    "event_series_occurrences_total",
    "event_series_series_active",
    "event_series_series_started_total",
    "event_series_series_finished_total",
    "event_series_series_reopened_total",
    "event_series_series_evicted_total",
    "event_series_dropped_total",
    "event_series_loops",
    "event_series_fields_truncated_total",
];

/// Every PromQL expression of the rules and of the dashboard's panels.
fn expressions() -> Vec<String> {
    let mut exprs: Vec<String> = rule_spec()["groups"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|g| g["rules"].as_array().cloned().unwrap_or_default())
        .filter_map(|r| r["expr"].as_str().map(str::to_owned))
        .collect();
    let text = std::fs::read_to_string(repo_root().join("config/grafana/event-series.json"))
        .unwrap_or_default();
    let dash: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
    for panel in dash["panels"].as_array().into_iter().flatten() {
        for target in panel["targets"].as_array().into_iter().flatten() {
            exprs.extend(target["expr"].as_str().map(str::to_owned));
        }
    }
    exprs
}

/// A sum over the replicas of an engine family counts only the leader's series, so that a warm
/// standby does not double what the rules and panels show.
#[test]
fn sums_of_engine_families_count_only_the_leaders_series() {
    let exprs = expressions();
    assert!(exprs.len() >= 20, "{exprs:?}");
    let doubled: Vec<&String> = exprs
        .iter()
        .filter(|e| e.contains("sum") && ENGINE_FAMILIES.iter().any(|f| e.contains(f)))
        .filter(|e| !e.contains("and on(instance) (event_series_leader == 1)"))
        .collect();
    assert!(
        doubled.is_empty(),
        "summed over leader and standby: {doubled:#?}"
    );
}

/// `EventSeriesNamespaceLooping` evaluated by promtool on two replicas that both export 25
/// Warning loops of one namespace, one of them leading: 25, not 50.
#[test]
fn a_warm_standby_does_not_double_the_namespace_looping_rule() {
    let Some(promtool) = tool("target/tools/bin/promtool") else {
        return;
    };
    let expr = rule_spec()["groups"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|g| g["rules"].as_array().cloned().unwrap_or_default())
        .find(|r| r["alert"] == "EventSeriesNamespaceLooping")
        .and_then(|r| r["expr"].as_str().map(str::to_owned))
        .expect("the rule");
    let dir = std::env::temp_dir().join(format!("event-series-rule-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temporary directory");
    let loops = |instance: &str| {
        format!(
            "event_series_loops{{instance=\"{instance}\",namespace=\"shop\",reason=\"BackOff\",\
             state=\"Ongoing\",type=\"Warning\"}}"
        )
    };
    let test = serde_json::json!({
        "rule_files": [],
        "evaluation_interval": "1m",
        "tests": [{
            "interval": "1m",
            "input_series": [
                {"series": loops("10.0.0.1:8443"), "values": "25x20"},
                {"series": loops("10.0.0.2:8443"), "values": "25x20"},
                {"series": "event_series_leader{instance=\"10.0.0.1:8443\"}", "values": "1x20"},
                {"series": "event_series_leader{instance=\"10.0.0.2:8443\"}", "values": "0x20"},
            ],
            "promql_expr_test": [{
                "expr": expr,
                "eval_time": "10m",
                "exp_samples": [{"labels": "{namespace=\"shop\"}", "value": 25}],
            }],
        }],
    });
    let path = dir.join("test.yaml");
    std::fs::write(&path, serde_yaml_ng::to_string(&test).unwrap_or_default()).expect("the test");
    let out = run(&promtool, &["test", "rules", &path.to_string_lossy()]);
    let _ = std::fs::remove_dir_all(&dir);
    println!("{out}");
    assert!(out.contains("SUCCESS"), "{out}");
}

/// Every `event_series_*` name in the rules and the dashboard is one the operator exports (its
/// registry as `/metrics` encodes it; `e2e::observability` checks a running operator's scrape).
#[test]
fn rules_and_dashboard_use_only_exported_metrics() {
    let root = repo_root();
    let rules =
        std::fs::read_to_string(root.join("charts/event-series/files/prometheus-rule.yaml"))
            .unwrap_or_default();
    let dashboard =
        std::fs::read_to_string(root.join("config/grafana/event-series.json")).unwrap_or_default();
    let used = metric_names_used(&format!("{rules}\n{dashboard}"));
    assert!(used.len() >= 12, "{used:?}");
    let metrics = Arc::new(Metrics::default());
    let registry = Metrics::registry(&metrics);
    // A labelled family without a sample is not encoded at all: make one request, as the operator does.
    metrics.request("patch", 200);
    let scrape = event_series::operations::metrics::encode(&registry);
    let exported = exported_names(&scrape);
    let unknown: Vec<_> = used.difference(&exported).collect();
    assert!(unknown.is_empty(), "not exported: {unknown:?}");
    let dash: Value = serde_json::from_str(&dashboard).expect("the dashboard is JSON");
    assert_eq!(dash["uid"], "event-series");
    assert!(dash["panels"].as_array().is_some_and(|p| p.len() >= 10));
}

/// `just image` (buildah on hack/image.Containerfile) and the Dockerfile's runtime stage build one
/// image: the same instructions after `FROM scratch`, bar where the binary is copied from.
#[test]
fn the_dockerfile_runtime_stage_is_the_image_just_image_builds() {
    let instructions = |path: &str, from: &str| -> Vec<String> {
        let text = std::fs::read_to_string(repo_root().join(path)).expect(path);
        let stage = text
            .split_once(from)
            .unwrap_or_else(|| panic!("{path} has no `{from}`"))
            .1;
        stage
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .map(|l| l.replace("COPY --from=builder /out/event-series", "COPY event-series"))
            .collect()
    };
    let docker = instructions("Dockerfile", "FROM scratch AS runtime");
    let buildah = instructions("hack/image.Containerfile", "FROM scratch");
    assert_eq!(docker, buildah);
    assert!(
        buildah.contains(&"USER 65532:65532".to_owned()),
        "{buildah:?}"
    );
}

/// `just image` tags the image `ghcr.io/event-series/event-series:v<crate version>` (hack/image.sh
/// reads the version from Cargo.toml); `config/default` must run exactly that, or the node's
/// imported image is not the one the Deployment asks for.
#[test]
fn config_default_runs_the_tag_just_image_builds() {
    let text = std::fs::read_to_string(repo_root().join("config/default/kustomization.yaml"))
        .expect("config/default/kustomization.yaml");
    let tag = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("newTag:"))
        .map(str::trim)
        .expect("an images: entry with newTag");
    assert_eq!(tag, concat!("v", env!("CARGO_PKG_VERSION")));
    assert!(
        text.contains("newName: ghcr.io/event-series/event-series"),
        "{text}"
    );
}
