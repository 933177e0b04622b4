//! A real Prometheus scrapes the operator the way the chart sets it up, on the real node: the chart
//! installed with Helm beside the Prometheus Operator's real ServiceMonitor CRD (from its Go module;
//! the operator itself is not run), the metrics certificate a Secret signed by a CA of the test's
//! (`metrics.certSecret`, what cert-manager would write), Prometheus (built from its Go module by
//! `hack/tools.sh`) as a Pod from a `FROM scratch` image, its ServiceAccount named to the chart
//! (`metrics.prometheus.serviceAccount`). The test plays the Prometheus Operator's part: it turns
//! the ServiceMonitor into Prometheus' scrape configuration (Kubernetes service discovery of the
//! metrics Service's endpoints, its port, path and scheme, the token of the Secret it names, its CA
//! and server name), then checks what Prometheus loaded against the ServiceMonitor and what it
//! scraped: `up == 1` on both replicas, the operator's own families stored, TLS verified.
//!
//! Three scrape jobs, one Prometheus:
//! - `serviceMonitor`: the ServiceMonitor the chart installs with its defaults (the token of the
//!   chart's scraper ServiceAccount, from the Secret it names);
//! - `scrapeClass`: the same ServiceMonitor rendered with `serviceMonitor.authorization.mode=
//!   scrapeClass`, the scrape class supplying Prometheus' own projected token: it reads `/metrics`
//!   only through the chart's binding of the named ServiceAccount, so before that name is given
//!   (the first install) it must get 403, and after `helm upgrade` with it, 200;
//! - `wrongName`: the first with another server name, which must fail on the certificate (the
//!   check is real, not skipped).
//!
//! A test binary of its own (not in `tests/node`), because it replaces the operator the node tests
//! share with the chart's (two installs would both write every series, and each one's admission
//! policy would refuse the other's writes).

// A scenario reads as one story from top to bottom: the function-length lint is for the product.
#![allow(clippy::too_many_lines)]

use anyhow::{Context, Result, bail, ensure};
use event_series_test_support::cluster::{apply_on, kubectl_on};
use event_series_test_support::node::{self, eventually, import_image};
use event_series_test_support::repo_root;
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::Client;
use kube::api::Api;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// The release's namespace (not config/default's, so that the server name the ServiceMonitor
/// derives is checked with a namespace of the user's choosing).
const NS: &str = "event-series-scrape";
/// Prometheus' namespace and ServiceAccount, which the chart binds to the metrics-reader role.
const MONITORING: &str = "monitoring";
const PROMETHEUS_SA: &str = "prometheus";
/// The serving certificate the chart mounts (`metrics.certSecret`): tls.crt, tls.key, ca.crt.
const CERT_SECRET: &str = "event-series-metrics-cert";
/// The scrape class of the `scrapeClass` job, and the token it supplies: the Pod's own, projected.
const SCRAPE_CLASS: &str = "service-account-token";
const TOKEN_FILE: &str = "/var/run/secrets/kubernetes.io/serviceaccount/token";
/// The Prometheus Operator whose ServiceMonitor CRD is installed (its Go module holds the CRDs).
const PROMETHEUS_OPERATOR: &str = "github.com/prometheus-operator/prometheus-operator@v0.85.0";
const SERVICEMONITOR_CRD: &str =
    "example/prometheus-operator-crd/monitoring.coreos.com_servicemonitors.yaml";
/// The chart's fullname for the release `event-series` (the metrics Service is `<fullname>-metrics`).
const RELEASE: &str = "event-series";
const SERVICE: &str = "event-series-metrics";

#[tokio::test]
async fn a_real_prometheus_scrapes_the_chart_with_verified_tls_and_the_bound_token() -> Result<()> {
    let Some(kubeconfig) = node::node() else {
        return Ok(());
    };
    let client = node::client(kubeconfig).await?;
    let tools = tools()?;

    // The chart replaces config/default's install (one event-series per cluster); what an earlier
    // run on this node (EVENT_SERIES_NODE_KUBECONFIG) left goes too.
    helm(
        &tools.helm,
        kubeconfig,
        &[
            "uninstall",
            RELEASE,
            "--namespace",
            NS,
            "--ignore-not-found",
            "--wait",
        ],
    )?;
    kubectl_on(
        kubeconfig,
        &[
            "delete",
            "namespace",
            MONITORING,
            "--ignore-not-found",
            "--wait=true",
        ],
    )?;
    let config = repo_root().join("config/default");
    kubectl_on(
        kubeconfig,
        &[
            "delete",
            "-k",
            &config.to_string_lossy(),
            "--ignore-not-found",
            "--wait=true",
        ],
    )?;
    let crd = servicemonitor_crd()?;
    kubectl_on(
        kubeconfig,
        &["apply", "--server-side", "-f", &crd.to_string_lossy()],
    )?;
    // (`kubectl wait` gives up at once on a CRD that has no conditions yet.)
    eventually(
        Duration::from_secs(60),
        "the ServiceMonitor CRD established",
        || async {
            let established = kubectl_on(
                kubeconfig,
                &[
                    "get",
                    "crd/servicemonitors.monitoring.coreos.com",
                    "-o",
                    "jsonpath={.status.conditions[?(@.type==\"Established\")].status}",
                ],
            )?;
            Ok((established == "True").then_some(()))
        },
    )
    .await?;

    // The serving certificate, signed by the test's CA, for the names the ServiceMonitor verifies.
    let ca = certificate_secret()?;
    apply_on(
        kubeconfig,
        &format!("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {NS}\n"),
        &[],
    )?;
    apply_on(kubeconfig, &ca.secret, &[])?;

    // First without Prometheus' ServiceAccount: its own token must be refused.
    let values = [
        "--set",
        "serviceMonitor.enabled=true",
        "--set",
        &format!("metrics.certSecret={CERT_SECRET}"),
    ];
    let installed = helm(
        &tools.helm,
        kubeconfig,
        &[
            &[
                "install",
                RELEASE,
                "charts/event-series",
                "--namespace",
                NS,
                "--wait",
                "--timeout",
                "5m",
            ][..],
            &values[..],
        ]
        .concat(),
    )?;
    ensure!(installed.contains("STATUS: deployed"), "{installed}");

    // The ServiceMonitor as installed (defaults: the scraper's token Secret), and as rendered for a
    // scrape class.
    let monitor: Value = serde_json::from_str(&kubectl_on(
        kubeconfig,
        &["-n", NS, "get", "servicemonitor", RELEASE, "-o", "json"],
    )?)?;
    let rendered = helm(
        &tools.helm,
        kubeconfig,
        &[
            &[
                "template",
                RELEASE,
                "charts/event-series",
                "--namespace",
                NS,
            ][..],
            &values[..],
            &[
                "--set",
                "serviceMonitor.authorization.mode=scrapeClass",
                "--set",
                &format!("serviceMonitor.scrapeClass={SCRAPE_CLASS}"),
                "--show-only",
                "templates/servicemonitor.yaml",
                // against the cluster: its version, and the schema of the installed CRD
                "--validate",
            ][..],
        ]
        .concat(),
    )?;
    let by_class: Value = serde_yaml_ng::from_str(&rendered)?;
    let endpoint = &monitor["spec"]["endpoints"][0];
    assert_eq!(endpoint["scheme"], "https");
    assert_eq!(endpoint["port"], "metrics");
    assert_eq!(endpoint["path"], "/metrics");
    assert_eq!(endpoint["tlsConfig"]["insecureSkipVerify"], false);
    assert_eq!(
        endpoint["tlsConfig"]["serverName"],
        format!("{SERVICE}.{NS}.svc")
    );
    assert_eq!(endpoint["tlsConfig"]["ca"]["secret"]["name"], CERT_SECRET);
    assert_eq!(
        endpoint["authorization"]["credentials"]["name"],
        format!("{RELEASE}-metrics-scraper-token")
    );
    let class_endpoint = &by_class["spec"]["endpoints"][0];
    assert_eq!(by_class["spec"]["scrapeClass"], SCRAPE_CLASS);
    assert!(
        class_endpoint.get("authorization").is_none(),
        "{class_endpoint}"
    );
    for field in ["scheme", "port", "path", "tlsConfig"] {
        assert_eq!(class_endpoint[field], endpoint[field], "{field}");
    }

    // Prometheus, configured from them, as a Pod.
    let ca_pem = secret_value(&client, NS, &endpoint["tlsConfig"]["ca"]["secret"]).await?;
    assert_eq!(ca_pem, ca.pem, "the ServiceMonitor's CA is the test's");
    let token = secret_value(&client, NS, &endpoint["authorization"]["credentials"]).await?;
    let jobs = [
        scrape_job(
            &monitor,
            "serviceMonitor",
            json!({"type": "Bearer", "credentials": token}),
            &ca_pem,
            None,
        )?,
        scrape_job(
            &by_class,
            "scrapeClass",
            json!({"type": "Bearer", "credentials_file": TOKEN_FILE}),
            &ca_pem,
            None,
        )?,
        scrape_job(
            &monitor,
            "wrongName",
            json!({"type": "Bearer", "credentials": token}),
            &ca_pem,
            Some("wrong.example.invalid"),
        )?,
    ];
    let ip = start_prometheus(&client, kubeconfig, &tools.prometheus, &jobs).await?;

    // What Prometheus loaded is what the ServiceMonitors say.
    let loaded = prometheus(&ip, "/api/v1/status/config")?;
    let loaded: Value =
        serde_yaml_ng::from_str(loaded["data"]["yaml"].as_str().context("no config")?)?;
    let loaded_job = |name: &str| -> Result<Value> {
        loaded["scrape_configs"]
            .as_array()
            .and_then(|jobs| jobs.iter().find(|j| j["job_name"] == name))
            .cloned()
            .with_context(|| format!("no job {name} in the loaded configuration"))
    };
    for (name, sm) in [("serviceMonitor", &monitor), ("scrapeClass", &by_class)] {
        let job = loaded_job(name)?;
        let ep = &sm["spec"]["endpoints"][0];
        assert_eq!(job["scheme"], ep["scheme"], "{name}: scheme");
        assert_eq!(job["metrics_path"], ep["path"], "{name}: path");
        assert_eq!(
            job["honor_labels"], ep["honorLabels"],
            "{name}: honorLabels"
        );
        assert_eq!(
            job["tls_config"]["server_name"], ep["tlsConfig"]["serverName"],
            "{name}: server name"
        );
        assert_eq!(
            job["tls_config"]["insecure_skip_verify"], false,
            "{name}: TLS verified"
        );
        assert_eq!(job["tls_config"]["ca"], json!(ca_pem), "{name}: CA");
        let ports: Vec<&Value> = job["relabel_configs"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|r| r["source_labels"] == json!(["__meta_kubernetes_endpointslice_port_name"]))
            .map(|r| &r["regex"])
            .collect();
        assert_eq!(ports, [&ep["port"]], "{name}: the port kept");
        assert_eq!(
            job["authorization"]["type"], "Bearer",
            "{name}: authorization"
        );
    }
    assert_eq!(
        loaded_job("serviceMonitor")?["authorization"]["credentials"],
        "<secret>"
    );
    assert_eq!(
        loaded_job("scrapeClass")?["authorization"]["credentials_file"],
        TOKEN_FILE
    );

    // The scraper's token reads /metrics on both replicas, over verified TLS.
    let up = eventually(
        Duration::from_secs(120),
        "both replicas up for serviceMonitor",
        || async {
            let t = all_up(targets(&ip, "serviceMonitor")?)?;
            Ok(Some(t))
        },
    )
    .await?;
    for t in &up {
        let url = t["scrapeUrl"].as_str().unwrap_or_default();
        assert!(
            url.starts_with("https://10.244.0.") && url.ends_with(":8443/metrics"),
            "{url}"
        );
    }
    // Prometheus' own token is refused before the chart binds its ServiceAccount.
    let refused = eventually(
        Duration::from_secs(120),
        "scrapeClass refused on both replicas",
        || async {
            let t = targets(&ip, "scrapeClass")?;
            Ok((t.len() == 2
                && t.iter().all(|t| {
                    t["health"] == "down"
                        && t["lastError"].as_str().unwrap_or_default().contains("403")
                }))
            .then_some(t))
        },
    )
    .await?;
    println!("before the binding: {}", refused[0]["lastError"]);
    let wrong = eventually(
        Duration::from_secs(120),
        "wrongName failing on the certificate",
        || async {
            let t = targets(&ip, "wrongName")?;
            Ok(t.iter()
                .find(|t| {
                    t["health"] == "down"
                        && t["lastError"].as_str().unwrap_or_default().contains("x509")
                })
                .cloned())
        },
    )
    .await?;
    println!("another server name: {}", wrong["lastError"]);
    assert_eq!(query(&ip, "up{job=\"scrapeClass\"}")?, [0.0, 0.0]);

    // The chart as the README says: its values plus Prometheus' ServiceAccount.
    let upgraded = helm(
        &tools.helm,
        kubeconfig,
        &[
            &[
                "upgrade",
                RELEASE,
                "charts/event-series",
                "--namespace",
                NS,
                "--reuse-values",
                "--wait",
            ][..],
            &[
                "--set",
                &format!("metrics.prometheus.serviceAccount.name={PROMETHEUS_SA}"),
                "--set",
                &format!("metrics.prometheus.serviceAccount.namespace={MONITORING}"),
            ][..],
        ]
        .concat(),
    )?;
    ensure!(upgraded.contains("STATUS: deployed"), "{upgraded}");
    eventually(
        Duration::from_secs(120),
        "scrapeClass up on both replicas",
        || async {
            all_up(targets(&ip, "scrapeClass")?)?;
            Ok(Some(()))
        },
    )
    .await?;
    eventually(
        Duration::from_secs(60),
        "up == 1 for every replica of both jobs",
        || async {
            let both = [
                query(&ip, "up{job=\"serviceMonitor\"}")?,
                query(&ip, "up{job=\"scrapeClass\"}")?,
            ];
            Ok(both
                .iter()
                .all(|v| v.as_slice() == [1.0, 1.0])
                .then_some(()))
        },
    )
    .await?;
    // What was scraped is the operator's: its build on both replicas, one leader of two.
    eventually(
        Duration::from_secs(60),
        "the operator's families stored",
        || async {
            let builds = query(&ip, "event_series_build_info{job=\"scrapeClass\"}")?;
            let leaders = query(&ip, "sum(event_series_leader{job=\"serviceMonitor\"})")?;
            Ok((builds.len() == 2 && leaders == [1.0]).then_some(()))
        },
    )
    .await?;

    // Leave the node to the next test binary (which installs config/default again).
    helm(
        &tools.helm,
        kubeconfig,
        &["uninstall", RELEASE, "--namespace", NS, "--wait"],
    )?;
    kubectl_on(
        kubeconfig,
        &["delete", "namespace", MONITORING, NS, "--wait=false"],
    )?;
    kubectl_on(
        kubeconfig,
        &["delete", "-f", &crd.to_string_lossy(), "--wait=true"],
    )?;
    Ok(())
}

/// The tools the test runs, built from their Go modules when missing (`hack/tools.sh`).
struct Tools {
    helm: PathBuf,
    /// The static binary and the version it was built from (`v0.316.0`).
    prometheus: (PathBuf, String),
}

fn tools() -> Result<Tools> {
    let status = Command::new("bash")
        .arg(repo_root().join("hack/tools.sh"))
        .args(["helm", "prometheus"])
        .status()?;
    ensure!(status.success(), "hack/tools.sh helm prometheus failed");
    let bin = repo_root().join("target/tools/bin");
    let module = std::fs::read_to_string(bin.join(".prometheus.version"))?;
    let version = module
        .trim()
        .rsplit('@')
        .next()
        .context("no version")?
        .to_owned();
    Ok(Tools {
        helm: bin.join("helm"),
        prometheus: (bin.join("prometheus"), version),
    })
}

/// `helm --kubeconfig KUBECONFIG ARGS` in the repository's root; its stdout.
fn helm(helm: &Path, kubeconfig: &Path, args: &[&str]) -> Result<String> {
    let out = Command::new(helm)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(args)
        .current_dir(repo_root())
        .output()?;
    ensure!(
        out.status.success(),
        "helm {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8(out.stdout)?)
}

/// The ServiceMonitor CRD of the Prometheus Operator's release, from its Go module (the module
/// cache keeps it: downloaded once per machine).
fn servicemonitor_crd() -> Result<PathBuf> {
    let out = Command::new(go())
        .args(["mod", "download", "-json", PROMETHEUS_OPERATOR])
        .env("GOTOOLCHAIN", "local")
        .current_dir(std::env::temp_dir())
        .output()?;
    ensure!(
        out.status.success(),
        "go mod download {PROMETHEUS_OPERATOR}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let info: Value = serde_json::from_slice(&out.stdout)?;
    let dir = info["Dir"].as_str().context("go mod download: no Dir")?;
    Ok(Path::new(dir).join(SERVICEMONITOR_CRD))
}

/// `go`: on PATH or where the Go distribution installs it.
fn go() -> PathBuf {
    let fallback = PathBuf::from("/usr/local/go/bin/go");
    let on_path = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .map(|d| d.join("go"))
        .find(|p| p.is_file());
    on_path.unwrap_or(fallback)
}

/// The test's CA and the Secret of a certificate it signed for the metrics Service's names.
struct Certificate {
    pem: String,
    secret: String,
}

fn certificate_secret() -> Result<Certificate> {
    let dn = |name: &str| {
        let mut dn = rcgen::DistinguishedName::new();
        dn.push(rcgen::DnType::CommonName, name);
        dn
    };
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new())?;
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params.distinguished_name = dn("event-series scrape test CA");
    let ca = rcgen::CertifiedIssuer::self_signed(ca_params, rcgen::KeyPair::generate()?)?;
    // The names cert-manager's Certificate of the chart asks for.
    let names = vec![
        SERVICE.to_owned(),
        format!("{SERVICE}.{NS}"),
        format!("{SERVICE}.{NS}.svc"),
        format!("{SERVICE}.{NS}.svc.cluster.local"),
    ];
    let mut leaf = rcgen::CertificateParams::new(names)?;
    leaf.distinguished_name = dn(&format!("{SERVICE}.{NS}.svc"));
    leaf.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
    let key = rcgen::KeyPair::generate()?;
    let cert = leaf.signed_by(&key, &*ca)?;
    let secret = json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "kubernetes.io/tls",
        "metadata": {"name": CERT_SECRET, "namespace": NS},
        "stringData": {"tls.crt": cert.pem(), "tls.key": key.serialize_pem(), "ca.crt": ca.pem()},
    });
    Ok(Certificate {
        pem: ca.pem(),
        secret: serde_json::to_string(&secret)?,
    })
}

/// The value a ServiceMonitor's `{name, key}` reference names in a Secret of `ns`.
async fn secret_value(client: &Client, ns: &str, reference: &Value) -> Result<String> {
    let name = reference["name"].as_str().context("no Secret name")?;
    let key = reference["key"].as_str().context("no Secret key")?;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    // The token controller fills a service-account-token Secret shortly after it is made.
    eventually(Duration::from_secs(60), "the Secret's value", || async {
        let secret = secrets.get(name).await?;
        Ok(secret
            .data
            .and_then(|d| d.get(key).cloned())
            .map(|v| String::from_utf8_lossy(&v.0).into_owned())
            .filter(|v| !v.is_empty()))
    })
    .await
    .with_context(|| format!("Secret {ns}/{name} key {key}"))
}

/// What the Prometheus Operator makes of endpoint 0 of the ServiceMonitor `sm`: Kubernetes service
/// discovery of the EndpointSlices in its namespaces, kept by its Service's labels and port name,
/// its scheme, path and honorLabels, `authorization` and the CA given, its server name (or
/// `server_name`). Scraped every 5 s instead of its interval, so that the test is quick.
fn scrape_job(
    sm: &Value,
    job: &str,
    authorization: Value,
    ca: &str,
    server_name: Option<&str>,
) -> Result<Value> {
    let spec = &sm["spec"];
    let endpoint = &spec["endpoints"][0];
    let mut relabel = Vec::new();
    for (label, value) in spec["selector"]["matchLabels"]
        .as_object()
        .context("no matchLabels")?
    {
        let label: String = label
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
            .collect();
        relabel.push(json!({
            "action": "keep",
            "source_labels": [format!("__meta_kubernetes_service_label_{label}"), format!("__meta_kubernetes_service_labelpresent_{label}")],
            "regex": format!("({});true", regex_escape(value.as_str().context("a label value")?)),
        }));
    }
    relabel.push(json!({
        "action": "keep",
        "source_labels": ["__meta_kubernetes_endpointslice_port_name"],
        "regex": endpoint["port"],
    }));
    relabel.push(json!({"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"}));
    let server_name = match server_name {
        Some(name) => json!(name),
        None => endpoint["tlsConfig"]["serverName"].clone(),
    };
    Ok(json!({
        "job_name": job,
        "scrape_interval": "5s",
        "scrape_timeout": "4s",
        "honor_labels": endpoint["honorLabels"],
        "metrics_path": endpoint["path"],
        "scheme": endpoint["scheme"],
        "authorization": authorization,
        "tls_config": {
            "ca": ca,
            "server_name": server_name,
            "insecure_skip_verify": endpoint["tlsConfig"]["insecureSkipVerify"],
        },
        "kubernetes_sd_configs": [{
            "role": "endpointslice",
            "namespaces": {"names": spec["namespaceSelector"]["matchNames"]},
        }],
        "relabel_configs": relabel,
    }))
}

fn regex_escape(s: &str) -> String {
    s.chars()
        .flat_map(|c| {
            let special = "\\.+*?()|[]{}^$".contains(c);
            special
                .then_some('\\')
                .into_iter()
                .chain(std::iter::once(c))
        })
        .collect()
}

/// Prometheus' image (`hack/image.sh --binary`) on the node, its ServiceAccount (with what
/// Kubernetes service discovery reads in the release's namespace), its configuration in a Secret
/// (it holds a token), and the Pod; its IP once Ready.
async fn start_prometheus(
    client: &Client,
    kubeconfig: &Path,
    (binary, version): &(PathBuf, String),
    jobs: &[Value],
) -> Result<String> {
    let image = format!("localhost/event-series/prometheus:{version}");
    let status = Command::new("bash")
        .arg(repo_root().join("hack/image.sh"))
        .args(["--binary", "prometheus", &image])
        .arg(binary)
        .arg("65534")
        .status()?;
    ensure!(status.success(), "hack/image.sh --binary prometheus failed");
    import_image(&repo_root().join("target/image/prometheus.oci.tar"))?;
    let config = json!({"global": {"scrape_interval": "5s"}, "scrape_configs": jobs});
    let config = serde_yaml_ng::to_string(&config)?;
    let objects = json!({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": MONITORING}},
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": PROMETHEUS_SA, "namespace": MONITORING}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
         "metadata": {"name": "prometheus-discovery", "namespace": NS},
         "rules": [
            {"apiGroups": [""], "resources": ["services", "endpoints", "pods"], "verbs": ["get", "list", "watch"]},
            {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["get", "list", "watch"]},
         ]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
         "metadata": {"name": "prometheus-discovery", "namespace": NS},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "prometheus-discovery"},
         "subjects": [{"kind": "ServiceAccount", "name": PROMETHEUS_SA, "namespace": MONITORING}]},
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "prometheus-config", "namespace": MONITORING},
         "stringData": {"prometheus.yml": config}},
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "prometheus", "namespace": MONITORING},
         "spec": {
            "serviceAccountName": PROMETHEUS_SA,
            "terminationGracePeriodSeconds": 5,
            "securityContext": {"runAsNonRoot": true, "runAsUser": 65534, "runAsGroup": 65534,
                                "fsGroup": 65534, "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [{
                "name": "prometheus",
                "image": image,
                "imagePullPolicy": "Never",
                "args": ["--config.file=/etc/prometheus/prometheus.yml", "--storage.tsdb.path=/data",
                         "--web.listen-address=:9090"],
                "ports": [{"name": "web", "containerPort": 9090}],
                "readinessProbe": {"httpGet": {"path": "/-/ready", "port": "web"}, "periodSeconds": 2},
                "securityContext": {"allowPrivilegeEscalation": false, "readOnlyRootFilesystem": true,
                                    "capabilities": {"drop": ["ALL"]}},
                "volumeMounts": [
                    {"name": "config", "mountPath": "/etc/prometheus", "readOnly": true},
                    {"name": "data", "mountPath": "/data"},
                ],
            }],
            "volumes": [
                {"name": "config", "secret": {"secretName": "prometheus-config"}},
                {"name": "data", "emptyDir": {}},
            ],
         }},
    ]});
    apply_on(kubeconfig, &serde_json::to_string(&objects)?, &[])?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), MONITORING);
    let ready = eventually(Duration::from_secs(120), "Prometheus Ready", || async {
        let pod = pods.get("prometheus").await?;
        let status = pod.status.unwrap_or_default();
        let ready = status
            .conditions
            .unwrap_or_default()
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True");
        Ok(ready.then_some(status.pod_ip).flatten())
    })
    .await;
    if ready.is_err() {
        let pod = kubectl_on(
            kubeconfig,
            &["-n", MONITORING, "get", "pod", "prometheus", "-o", "yaml"],
        );
        let logs = kubectl_on(
            kubeconfig,
            &["-n", MONITORING, "logs", "prometheus", "--tail=40"],
        );
        eprintln!("the Prometheus Pod: {pod:?}\nits logs: {logs:?}");
    }
    ready
}

/// GET `path` of Prometheus' API on `ip`, its JSON (status success).
fn prometheus(ip: &str, path: &str) -> Result<Value> {
    let out = Command::new("curl")
        .args(["-sS", "--fail-with-body", "--max-time", "10", "--get"])
        .arg(format!(
            "http://{ip}:9090{}",
            path.split('?').next().unwrap_or(path)
        ))
        .args(
            path.split_once('?')
                .map(|(_, q)| vec!["--data-urlencode".to_owned(), q.to_owned()])
                .unwrap_or_default(),
        )
        .output()?;
    if !out.status.success() {
        bail!(
            "GET {path}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let body: Value = serde_json::from_slice(&out.stdout)?;
    ensure!(body["status"] == "success", "GET {path}: {body}");
    Ok(body)
}

/// The active targets of `job`.
fn targets(ip: &str, job: &str) -> Result<Vec<Value>> {
    let body = prometheus(ip, "/api/v1/targets?state=active")?;
    Ok(body["data"]["activeTargets"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|t| t["scrapePool"] == job)
        .cloned()
        .collect())
}

/// `targets` when they are the two replicas, both up; else an error with what Prometheus says of
/// them (the error `eventually` reports when it gives up).
fn all_up(targets: Vec<Value>) -> Result<Vec<Value>> {
    let states: Vec<String> = targets
        .iter()
        .map(|t| format!("{} {}: {}", t["scrapeUrl"], t["health"], t["lastError"]))
        .collect();
    ensure!(
        targets.len() == 2 && targets.iter().all(|t| t["health"] == "up"),
        "not two targets up: {states:?}"
    );
    Ok(targets)
}

/// The values of an instant query, sorted.
fn query(ip: &str, promql: &str) -> Result<Vec<f64>> {
    let body = prometheus(ip, &format!("/api/v1/query?query={promql}"))?;
    let mut values: Vec<f64> = body["data"]["result"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| r["value"][1].as_str()?.parse().ok())
        .collect();
    values.sort_by(f64::total_cmp);
    Ok(values)
}
