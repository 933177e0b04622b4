//! The one-node cluster (`hack/cluster-up-node.sh`): a kubelet with containerd, the scheduler, the
//! controller-manager and kube-proxy beside the real apiserver, and event-series installed on it as
//! Pods from its own image with the plain `kubectl apply -k config/default`, plus the
//! `--alertmanager-url` of `config/alertmanager` pointing at the tests' own Alertmanager.
//!
//! The node is shared by the node tests of one process and started once, when the first of them
//! runs (so not beside the other end-to-end tests): the cluster `EVENT_SERIES_NODE_KUBECONFIG` points
//! to, or else one the harness starts in `target/envtest-node` (and `just test` stops). A machine
//! that cannot run a node (not Linux, not root, tools missing) skips the node tests with a line on
//! stderr, except under `CI=true`, where that is a failure.

use crate::alertmanager::{Alertmanager, Webhook};
use crate::cluster::{client_for, kubectl_on};
use crate::repo_root;
use anyhow::{Context, Result, bail};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Event, Namespace, Pod};
use k8s_openapi::api::events::v1::Event as Series;
use kube::Client;
use kube::api::{Api, ListParams, PostParams};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Where the operator runs on the node.
pub const NAMESPACE: &str = "event-series-system";
/// The node's address on its bridge (hack/envtest-lib.sh): where a service of the tests listens for
/// the operator's Pods to reach it.
pub const NODE_IP: &str = "10.244.0.1";
/// The label every node test namespace carries, which the tests' policy selects.
pub const TEST_LABEL: &str = "event-series.dev/node-test";

/// The shared node cluster, with the operator installed (2 replicas, one leader) and the tests'
/// policy applied; `None` (after saying why) where the machine cannot run a node outside CI.
pub fn node() -> Option<&'static Path> {
    static NODE: OnceLock<Option<PathBuf>> = OnceLock::new();
    NODE.get_or_init(|| {
        let kubeconfig = match std::env::var("EVENT_SERIES_NODE_KUBECONFIG") {
            Ok(path) => PathBuf::from(path),
            Err(_) => {
                let dir = repo_root().join("target/envtest-node");
                let status = Command::new("bash")
                    .arg(repo_root().join("hack/cluster-up-node.sh"))
                    .env("ENVTEST_DIR", &dir)
                    .status();
                match status {
                    Ok(s) if s.success() => dir.join("kubeconfig"),
                    other => {
                        let why = format!("hack/cluster-up-node.sh failed: {other:?}");
                        if std::env::var("CI").as_deref() == Ok("true") {
                            panic!("{why} (CI=true: the node tests must run)");
                        }
                        eprintln!("node tests skipped on this machine: {why}");
                        return None;
                    }
                }
            }
        };
        let alerting = match alerting() {
            Ok(a) => a,
            Err(e) => panic!("starting the node tests' Alertmanager: {e:#}"),
        };
        if let Err(e) = install(&kubeconfig, &alerting.alertmanager.url()) {
            panic!("installing event-series on the node: {e:#}");
        }
        Some(kubeconfig)
    })
    .as_deref()
}

/// A client for the node cluster's admin.
pub async fn client(kubeconfig: &Path) -> Result<Client> {
    client_for(kubeconfig).await
}

/// The Alertmanager the operator's Pods send loop alerts to, on the node's bridge address, and the
/// webhook it notifies: one for the process, started with the node, stopped when the process ends.
pub struct Alerting {
    pub webhook: Webhook,
    pub alertmanager: Alertmanager,
}

/// The node tests' [`Alerting`], started once (by a thread that lives as long as the process, so
/// that Alertmanager, which dies with the thread that started it, does too).
pub fn alerting() -> Result<&'static Alerting> {
    static ALERTING: OnceLock<Result<Alerting, String>> = OnceLock::new();
    ALERTING
        .get_or_init(|| {
            let (tx, rx) = std::sync::mpsc::channel();
            std::thread::spawn(move || {
                let started = (|| {
                    let ip: std::net::IpAddr = NODE_IP.parse()?;
                    let webhook = Webhook::start_on(ip)?;
                    let alertmanager = Alertmanager::start_on(ip, &webhook, "node")?;
                    anyhow::Ok(Alerting {
                        webhook,
                        alertmanager,
                    })
                })();
                let _ = tx.send(started.map_err(|e| format!("{e:#}")));
                loop {
                    std::thread::park();
                }
            });
            rx.recv().map_err(|e| e.to_string()).and_then(|r| r)
        })
        .as_ref()
        .map_err(|e| anyhow::anyhow!("{e}"))
}

/// `kubectl apply -k config/default` as the README says, with `--alertmanager-url` added as
/// `config/alertmanager` adds it (pointing at the tests' Alertmanager), the policies the tests share
/// (short finishAfter, for namespaces labelled [`TEST_LABEL`]=fast, ...), then waits for two Ready
/// replicas and a leader. Idempotent: a second call finds it all in place.
fn install(kubeconfig: &Path, alertmanager: &str) -> Result<()> {
    let config = repo_root().join("config/default");
    kubectl_on(kubeconfig, &["apply", "-k", &config.to_string_lossy()])?;
    let args: serde_json::Value = serde_json::from_str(&kubectl_on(
        kubeconfig,
        &[
            "-n",
            NAMESPACE,
            "get",
            "deployment",
            "event-series",
            "-o",
            "jsonpath={.spec.template.spec.containers[0].args}",
        ],
    )?)?;
    let mut args: Vec<String> = serde_json::from_value(args)?;
    args.retain(|a| {
        !a.starts_with("--alertmanager-url=") && !a.starts_with("--alert-resend-interval=")
    });
    args.push(format!("--alertmanager-url={alertmanager}"));
    args.push("--alert-resend-interval=10s".to_owned());
    let patch = serde_json::json!([{
        "op": "replace",
        "path": "/spec/template/spec/containers/0/args",
        "value": args,
    }]);
    kubectl_on(
        kubeconfig,
        &[
            "-n",
            NAMESPACE,
            "patch",
            "deployment",
            "event-series",
            "--type=json",
            "-p",
            &patch.to_string(),
        ],
    )?;
    crate::cluster::apply_on(kubeconfig, TEST_POLICIES, &[])?;
    rollout_status(kubeconfig, Duration::from_secs(180))
        .context("the operator's Deployment did not become available")?;
    Ok(())
}

/// Waits until the operator's Deployment has rolled out (`kubectl rollout status`).
pub fn rollout_status(kubeconfig: &Path, limit: Duration) -> Result<String> {
    let timeout = format!("--timeout={}s", limit.as_secs());
    kubectl_on(
        kubeconfig,
        &[
            "-n",
            NAMESPACE,
            "rollout",
            "status",
            "deployment/event-series",
            &timeout,
        ],
    )
}

/// Four policies for the node tests (`alerts` is `fast` with Warning loops of 3 or more alerting):
/// `fast` writes a heartbeat every 30 s (so a test sees the count
/// grow) and finishes a loop after 45 s of quiet (the kubelet's crash-loop BackOff comes every 10 to
/// 20 s here); `note` does the same and also keys by the message; `fresh` keeps the default
/// heartbeat (30m) and early refreshes (1m), so that only the refreshes make the count grow.
const TEST_POLICIES: &str = r#"apiVersion: eventseries.dev/v1alpha1
kind: EventSeriesPolicy
metadata:
  name: node-tests-fast
spec:
  namespaceSelector:
    matchLabels:
      event-series.dev/node-test: fast
  heartbeatInterval: 30s
  finishAfter: 45s
  seriesWindow: 5m
---
apiVersion: eventseries.dev/v1alpha1
kind: EventSeriesPolicy
metadata:
  name: node-tests-note
spec:
  namespaceSelector:
    matchLabels:
      event-series.dev/node-test: note
  heartbeatInterval: 30s
  finishAfter: 45s
  seriesWindow: 5m
  isomorphism:
    includeNote: true
---
apiVersion: eventseries.dev/v1alpha1
kind: EventSeriesPolicy
metadata:
  name: node-tests-fresh
spec:
  namespaceSelector:
    matchLabels:
      event-series.dev/node-test: fresh
  heartbeatInterval: 30m
  firstRefresh: 1m
  finishAfter: 45s
  seriesWindow: 5m
---
apiVersion: eventseries.dev/v1alpha1
kind: EventSeriesPolicy
metadata:
  name: node-tests-alerts
spec:
  namespaceSelector:
    matchLabels:
      event-series.dev/node-test: alerts
  heartbeatInterval: 30s
  finishAfter: 45s
  seriesWindow: 5m
  alert:
    minCount: 3
    types: [Warning]
"#;

/// Loads an image archive (OCI) into the node's containerd, where the kubelet finds it without a
/// registry, as `hack/cluster-up-node.sh` loads this checkout's.
pub fn import_image(archive: &Path) -> Result<()> {
    let out = Command::new("ctr")
        .args(["--address", "/run/event-series-node/containerd.sock"])
        .args(["-n", "k8s.io", "images", "import"])
        .arg(archive)
        .output()?;
    if !out.status.success() {
        bail!(
            "ctr images import {}: {}",
            archive.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}

/// A namespace of the test's own, labelled for one of the tests' policies (`fast` or `note`).
pub async fn namespace(client: &Client, name: &str, policy: &str) -> Result<String> {
    let name = format!("node-{name}-{}", std::process::id());
    let ns: Namespace = serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {TEST_LABEL: policy}}
    }))?;
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await?;
    // The ServiceAccount admission plugin needs the namespace's default ServiceAccount.
    let sas: Api<k8s_openapi::api::core::v1::ServiceAccount> =
        Api::namespaced(client.clone(), &name);
    eventually(
        Duration::from_secs(60),
        "no default ServiceAccount",
        || async { Ok(sas.get_opt("default").await?.map(|_| ())) },
    )
    .await?;
    Ok(name)
}

/// A Pod whose container exits 1 at once: an operator image (on the node already) with an argument
/// it refuses.
pub fn crash_pod(name: &str, image: &str) -> Result<Pod> {
    Ok(serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {
            "dnsPolicy": "Default",
            "automountServiceAccountToken": false,
            "terminationGracePeriodSeconds": 0,
            "containers": [{
                "name": "crash",
                "image": image,
                "imagePullPolicy": "IfNotPresent",
                "args": ["--no-such-flag"],
            }],
        }
    }))?)
}

/// The series objects of `ns` whose reason is `reason`.
pub async fn series_for(client: &Client, ns: &str, reason: &str) -> Result<Vec<Series>> {
    Ok(crate::cluster::series(client, ns)
        .await?
        .into_iter()
        .filter(|s| s.reason.as_deref() == Some(reason))
        .collect())
}

/// The occurrences the raw events of `ns` with `reason` about `name` stand for.
pub async fn raw_total(client: &Client, ns: &str, reason: &str, name: &str) -> Result<u64> {
    Ok(raw_events(client, ns, reason, name)
        .await?
        .iter()
        .map(raw_count)
        .sum())
}

/// The operator's Pods that are Ready, by name.
pub async fn ready_operator_pods(client: &Client) -> Result<Vec<String>> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    let list = pods
        .list(&ListParams::default().labels("app.kubernetes.io/name=event-series"))
        .await?;
    Ok(list
        .items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter(|p| {
            p.status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
        })
        .filter_map(|p| p.metadata.name)
        .collect())
}

/// The holder of the operator's Lease, if any.
pub async fn leader(client: &Client) -> Result<Option<String>> {
    let leases: Api<Lease> = Api::namespaced(client.clone(), NAMESPACE);
    Ok(leases
        .get_opt("event-series")
        .await?
        .and_then(|l| l.spec)
        .and_then(|s| s.holder_identity)
        .filter(|h| !h.is_empty()))
}

/// Polls `check` every second until it returns `Some`, or fails after `limit` with `what`.
pub async fn eventually<T, F, Fut>(limit: Duration, what: &str, mut check: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<Option<T>>>,
{
    let start = Instant::now();
    let mut last_err = None;
    loop {
        match check().await {
            Ok(Some(v)) => return Ok(v),
            Ok(None) => {}
            Err(e) => last_err = Some(e),
        }
        if start.elapsed() > limit {
            match last_err {
                Some(e) => bail!("{what} (after {limit:?}; last error: {e:#})"),
                None => bail!("{what} (after {limit:?})"),
            }
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// The occurrences a raw event object stands for, as its emitter wrote them: `series.count` for the
/// events.k8s.io recorder, `count` for the legacy one, 1 for a single event.
pub fn raw_count(e: &Event) -> u64 {
    match (&e.series, e.count) {
        (Some(s), _) => s.count.unwrap_or(1).max(1) as u64,
        (None, Some(c)) => c.max(1) as u64,
        (None, None) => 1,
    }
}

/// The raw (non-series) events of `ns` with `reason` about the object named `name`.
pub async fn raw_events(client: &Client, ns: &str, reason: &str, name: &str) -> Result<Vec<Event>> {
    let events: Api<Event> = Api::namespaced(client.clone(), ns);
    let list = events
        .list(&ListParams::default().labels("!app.kubernetes.io/managed-by"))
        .await?;
    Ok(list
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some(reason))
        .filter(|e| e.involved_object.name.as_deref() == Some(name))
        .collect())
}

/// Metrics of the operator Pod `pod`, scraped over HTTPS on its Pod IP with a token of a
/// ServiceAccount bound to `event-series-metrics-reader` (made on first use).
pub async fn scrape(client: &Client, kubeconfig: &Path, pod: &str) -> Result<String> {
    static TOKEN: tokio::sync::OnceCell<String> = tokio::sync::OnceCell::const_new();
    let token = TOKEN
        .get_or_try_init(|| async {
            crate::cluster::apply_on(kubeconfig, SCRAPER, &[])?;
            let token = kubectl_on(
                kubeconfig,
                &[
                    "-n",
                    NAMESPACE,
                    "create",
                    "token",
                    "node-test-scraper",
                    "--duration=2h",
                ],
            )?;
            anyhow::Ok(token.trim().to_owned())
        })
        .await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    let ip = pods
        .get(pod)
        .await?
        .status
        .and_then(|s| s.pod_ip)
        .context("the operator Pod has no IP")?;
    let out = Command::new("curl")
        .args(["-sS", "--fail", "--max-time", "10", "-k", "-H"])
        .arg(format!("Authorization: Bearer {token}"))
        .arg(format!("https://{ip}:8443/metrics"))
        .output()?;
    if !out.status.success() {
        bail!("scraping {pod}: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(String::from_utf8(out.stdout)?)
}

const SCRAPER: &str = r#"apiVersion: v1
kind: ServiceAccount
metadata:
  name: node-test-scraper
  namespace: event-series-system
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: node-test-scraper
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: event-series-metrics-reader
subjects:
  - kind: ServiceAccount
    name: node-test-scraper
    namespace: event-series-system
"#;

/// The sum of a metric family's samples whose labels contain every one of `labels` (`k="v"`).
pub fn metric_sum(scrape: &str, family: &str, labels: &[&str]) -> f64 {
    scrape
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| {
            l.strip_prefix(family)
                .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
        })
        .filter(|l| labels.iter().all(|want| l.contains(want)))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}
