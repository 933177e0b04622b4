//! The install (`kubectl apply -k config/default`, one command) on a cluster that has never seen the
//! CRD, and the operator run with the installed ServiceAccount's own token: its RBAC is sufficient
//! for a whole series lifecycle and for checking scrapers' tokens, and refuses everything else; the
//! admission policy lets the operator write its series objects and refuses look-alikes from anyone
//! else; `kubectl delete -k config/default` removes it all.

use crate::OPERATOR;
use crate::operator::{count, state, wait_for};
use anyhow::{Context, Result};
use event_series::config::EventSeriesPolicy;
use event_series_test_support::cluster::{
    Dedicated, TestNamespace, apply_on, client_for, kubectl_on, tenant_client, token_kubeconfig,
};
use event_series_test_support::emitter::emit_on;
use event_series_test_support::repo_root;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, DeleteParams, ListParams};
use std::time::Duration;

const NS: &str = "event-series-system";

fn forbidden<T: std::fmt::Debug>(what: &str, r: Result<T, kube::Error>) {
    match r {
        Err(kube::Error::Api(s)) if s.code == 403 => {}
        other => panic!("{what}: expected 403 Forbidden, got {other:?}"),
    }
}

/// Install: `kubectl apply -k config/default` (server side, with the real validation) installs a
/// hardened Deployment and least-privilege RBAC; the operator running as that ServiceAccount completes
/// a lifecycle with no Forbidden, and is refused Secrets, Pods, ConfigMaps and deletes.
#[tokio::test]
async fn apply_k_installs_a_least_privilege_operator() -> Result<()> {
    // A cluster without the CRD, installed the way the README says.
    let cluster = Dedicated::start_bare("install", &[])?;
    let kc = cluster.kubeconfig.as_path();
    let config = |base: &str| {
        repo_root()
            .join("config")
            .join(base)
            .to_string_lossy()
            .into_owned()
    };
    // One command, exit 0: kubectl_on fails on any other status.
    let install = config("default");
    let out = kubectl_on(kc, &["apply", "--server-side", "-k", &install])?;
    println!("{out}");
    for kind in [
        "customresourcedefinition.apiextensions.k8s.io/eventseriespolicies.eventseries.dev",
        "namespace/event-series-system",
        "serviceaccount/event-series",
        "clusterrole.rbac.authorization.k8s.io/event-series",
        "clusterrolebinding.rbac.authorization.k8s.io/event-series",
        "clusterrole.rbac.authorization.k8s.io/event-series-metrics-reader",
        "deployment.apps/event-series",
        "service/event-series-metrics",
        "poddisruptionbudget.policy/event-series",
        "networkpolicy.networking.k8s.io/event-series",
        "validatingadmissionpolicy.admissionregistration.k8s.io/event-series-series-objects",
        "validatingadmissionpolicybinding.admissionregistration.k8s.io/event-series-series-objects",
        "flowschema.flowcontrol.apiserver.k8s.io/event-series-leader-election",
    ] {
        assert!(out.contains(kind), "{kind} not applied:\n{out}");
    }
    assert!(
        !out.contains("eventseriespolicy"),
        "no policy in the install:\n{out}"
    );
    // Idempotent: a second apply changes nothing.
    let again = kubectl_on(kc, &["apply", "--server-side", "-k", &install])?;
    assert!(
        again.lines().all(|l| l.ends_with("serverside-applied")),
        "{again}"
    );

    let client = client_for(kc).await?;
    let deploy = Api::<Deployment>::namespaced(client.clone(), NS)
        .get("event-series")
        .await?;
    let pod = deploy.spec.template.spec.as_ref().context("pod spec")?;
    assert_eq!(
        pod.service_account_name.as_deref(),
        Some("event-series"),
        "runs as the installed ServiceAccount"
    );
    let c = &pod.containers[0];
    let sc = c.security_context.as_ref().context("securityContext")?;
    assert_eq!(sc.read_only_root_filesystem, Some(true));
    assert_eq!(sc.allow_privilege_escalation, Some(false));
    let drops = sc.capabilities.as_ref().and_then(|c| c.drop.clone());
    assert_eq!(drops, Some(vec!["ALL".to_string()]));
    let non_root = sc.run_as_non_root.or(pod
        .security_context
        .as_ref()
        .and_then(|p| p.run_as_non_root));
    assert_eq!(non_root, Some(true));
    let seccomp = sc
        .seccomp_profile
        .as_ref()
        .or(pod
            .security_context
            .as_ref()
            .and_then(|p| p.seccomp_profile.as_ref()))
        .map(|s| s.type_.clone());
    assert_eq!(seccomp.as_deref(), Some("RuntimeDefault"));
    let path = |p: &Option<k8s_openapi::api::core::v1::Probe>| {
        p.as_ref()
            .and_then(|p| p.http_get.as_ref())
            .and_then(|h| h.path.clone())
    };
    assert_eq!(path(&c.liveness_probe).as_deref(), Some("/healthz"));
    assert_eq!(path(&c.readiness_probe).as_deref(), Some("/readyz"));
    let resources = c.resources.as_ref().context("resources")?;
    assert!(resources.requests.is_some() && resources.limits.is_some());
    let env: Vec<&str> = c.env.iter().flatten().map(|e| e.name.as_str()).collect();
    assert!(
        env.contains(&"POD_NAME") && env.contains(&"POD_NAMESPACE"),
        "{env:?}"
    );
    let args = c.args.clone().unwrap_or_default();
    assert!(args.iter().any(|a| a == "--leader-elect"), "{args:?}");

    // The probes use the plain health port; metrics are HTTPS.
    let port = |p: &Option<k8s_openapi::api::core::v1::Probe>| {
        p.as_ref()
            .and_then(|p| p.http_get.as_ref())
            .map(|h| format!("{:?}", h.port))
    };
    assert!(
        port(&c.liveness_probe).is_some_and(|p| p.contains("health")),
        "{:?}",
        c.liveness_probe
    );
    assert!(
        args.iter().any(|a| a == "--metrics-addr=0.0.0.0:8443")
            && !args.iter().any(|a| a.starts_with("--metrics-secure")),
        "secure metrics by default: {args:?}"
    );

    // The samples, applied separately, are valid.
    let samples = kubectl_on(kc, &["apply", "--server-side", "-k", &config("samples")])?;
    println!("{samples}");
    let policies: Api<EventSeriesPolicy> = Api::all(client.clone());
    let installed = policies.list(&ListParams::default()).await?.items;
    assert_eq!(installed.len(), 2, "the default and production samples");

    // A namespace with quick settings of its own, and the operator as the installed ServiceAccount.
    let ns = TestNamespace::new(&client, "install").await?;
    apply_on(
        kc,
        &format!(
            "apiVersion: eventseries.dev/v1alpha1\nkind: EventSeriesPolicy\nmetadata:\n  name: quick\n\
             spec:\n  namespaceSelector:\n    matchLabels:\n      kubernetes.io/metadata.name: {}\n  \
             finishAfter: 5s\n  seriesWindow: 5s\n  heartbeatInterval: 2s\n",
            ns.name
        ),
        &[],
    )?;
    let sa = token_kubeconfig(&client, kc, NS, "event-series").await?;
    let replica = |instance: &str, log: &str| {
        OPERATOR.launch(
            &sa,
            log,
            &[
                "--leader-elect",
                "--lease-namespace",
                NS,
                "--instance",
                instance,
                "--lease-duration",
                "5s",
                "--renew-deadline",
                "4s",
                "--retry-period",
                "1s",
            ],
        )
    };
    let op = replica("e2e-install", &ns.name)?;
    crate::network::wait_leading(
        &Api::<Lease>::namespaced(client.clone(), NS),
        "e2e-install",
        std::time::Duration::from_secs(30),
        None,
    )
    .await?;
    // A warm standby beside it, with the same rights: it follows the leader's writes.
    let standby = replica("e2e-install-standby", &format!("{}-standby", ns.name))?;
    let truth = emit_on(
        kc,
        &ns.name,
        &[
            "--recorder",
            "legacy",
            "--scenario",
            "crashloop",
            "--pods",
            "1",
            "--rate",
            "4",
            "--count",
            "24",
        ],
    )?;
    let total: u64 = truth.iter().map(|t| t.api_count).sum();
    let done = wait_for(
        &client,
        &ns.name,
        "the series Finished with its count",
        |objs| objs.len() == 1 && state(&objs[0]) == "Finished" && count(&objs[0]) == total,
    )
    .await?;
    println!(
        "lifecycle as the ServiceAccount: {total} occurrences in {}",
        done[0].metadata.name.as_deref().unwrap_or("")
    );
    let patches = op.metric("event_series_api_requests_total{verb=\"patch\",code=\"200\"}");
    assert!(
        patches >= 2.0,
        "heartbeats and the finish were patches: {patches}"
    );
    for verb in ["create", "patch"] {
        assert_eq!(
            op.metric(&format!(
                "event_series_api_requests_total{{verb=\"{verb}\",code=\"403\"}}"
            )),
            0.0
        );
    }
    let lease = Api::<Lease>::namespaced(client.clone(), NS)
        .get("event-series")
        .await?;
    assert_eq!(
        lease.spec.and_then(|s| s.holder_identity).as_deref(),
        Some("e2e-install")
    );
    // The standby learnt every write of the leader (its watch of the series objects is allowed):
    // nothing is left for it to write, were it to take over now.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while standby.metric("event_series_writes_pending") > 0.0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the standby still owes {} writes the leader made (log {})",
            standby.metric("event_series_writes_pending"),
            standby.log.display()
        );
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    }
    // The operator's Lease requests are in their own API Priority and Fairness flow: the apiserver
    // names the FlowSchema that classified a request in its answer.
    let flow = Api::<k8s_openapi::api::flowcontrol::v1::FlowSchema>::all(client.clone())
        .get("event-series-leader-election")
        .await?;
    let sa_client = client_for(&sa).await?;
    let request = http::Request::get(format!(
        "/apis/coordination.k8s.io/v1/namespaces/{NS}/leases/event-series"
    ))
    .body(kube::client::Body::from(Vec::new()))?;
    let answer = sa_client.send(request).await?;
    let classified = answer
        .headers()
        .get("X-Kubernetes-PF-FlowSchema-UID")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    assert_eq!(
        classified, flow.metadata.uid,
        "the ServiceAccount's Lease GET is classified by event-series-leader-election"
    );
    // Policy statuses are written (the status subresource is in the role).
    let quick = policies.get("quick").await?;
    let ready = quick
        .status
        .as_ref()
        .and_then(|s| s.conditions.iter().find(|c| c.type_ == "Ready"))
        .map(|c| c.status.clone());
    assert_eq!(ready.as_deref(), Some("True"), "{:?}", quick.status);
    let status = quick.status.clone().unwrap_or_default();
    assert_eq!(status.observed_generation, quick.metadata.generation);
    assert_eq!(
        status.namespaces,
        Some(1),
        "quick governs its namespace only"
    );
    // The leader's Degraded condition too, beside Ready (server-side apply, the same `patch` right).
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let quick = policies.get("quick").await?;
        let degraded = (quick.status.iter())
            .flat_map(|s| s.conditions.iter())
            .find(|c| c.type_ == "Degraded")
            .map(|c| c.status.clone());
        if degraded.as_deref() == Some("False") {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no Degraded=False: {:?}",
            quick.status
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // The default policy governs every other namespace (default, kube-system, event-series-system...).
    let default = policies.get("default").await?;
    let governs = default.status.and_then(|s| s.namespaces).unwrap_or(0);
    assert!(governs >= 3, "default governs {governs} namespaces");

    // Minimal: the same token is refused what the operator does not need.
    let as_sa = client_for(&sa).await?;
    let lp = ListParams::default();
    forbidden(
        "secrets, cluster-wide",
        Api::<Secret>::all(as_sa.clone()).list(&lp).await,
    );
    forbidden(
        "secrets in its own namespace",
        Api::<Secret>::namespaced(as_sa.clone(), NS).list(&lp).await,
    );
    forbidden("pods", Api::<Pod>::all(as_sa.clone()).list(&lp).await);
    forbidden(
        "configmaps",
        Api::<ConfigMap>::namespaced(as_sa.clone(), NS)
            .list(&lp)
            .await,
    );
    let series_name = done[0].metadata.name.clone().unwrap_or_default();
    forbidden(
        "deleting a series object",
        Api::<Event>::namespaced(as_sa.clone(), &ns.name)
            .delete(&series_name, &DeleteParams::default())
            .await,
    );
    forbidden(
        "deleting a policy",
        Api::<EventSeriesPolicy>::all(as_sa.clone())
            .delete("quick", &DeleteParams::default())
            .await,
    );

    refused_by_the_admission_policy(&client, kc, &ns.name, &done[0]).await?;
    scraped_with_the_installed_roles(&client, kc, &sa, &ns.name).await?;

    // SIGTERM: exits 0 and hands the lease back (the standby gone first, or it would take it).
    drop(standby);
    let status = op.terminate()?;
    assert!(status.success(), "{status}");
    tokio::time::sleep(Duration::from_millis(500)).await;
    let lease = Api::<Lease>::namespaced(client.clone(), NS)
        .get("event-series")
        .await?;
    let holder = lease
        .spec
        .and_then(|s| s.holder_identity)
        .unwrap_or_default();
    assert!(
        holder.is_empty(),
        "released on shutdown, still held by {holder:?}"
    );
    ns.cleanup().await?;
    removed_by_delete(&client, kc, "-k", &install).await
}

/// The operator, as the installed ServiceAccount, serves HTTPS metrics to a scraper bound to the
/// installed `event-series-metrics-reader` role: its own RBAC lets it review tokens and access.
async fn scraped_with_the_installed_roles(
    client: &kube::Client,
    kc: &std::path::Path,
    operator: &std::path::Path,
    ns: &str,
) -> Result<()> {
    use crate::secure_metrics::{curl, token};
    let scraper = token(client, ns, "prometheus").await?;
    apply_on(
        kc,
        &format!(
            "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata:\n  \
             name: prometheus-{ns}\nroleRef:\n  apiGroup: rbac.authorization.k8s.io\n  \
             kind: ClusterRole\n  name: event-series-metrics-reader\nsubjects:\n- kind: \
             ServiceAccount\n  name: prometheus\n  namespace: {ns}\n"
        ),
        &[],
    )?;
    let op = OPERATOR.launch_secure(
        operator,
        &format!("{ns}-secure"),
        &["--namespace", ns, "--instance", "e2e-install-secure"],
    )?;
    let url = format!("{}/metrics", op.metrics);
    let (code, body) = curl(&url, Some(&scraper), None)?;
    println!("metrics as the installed roles: {code}");
    assert_eq!(code, 200, "{body}");
    assert!(body.contains("event_series_leader"), "{body}");
    assert_eq!(curl(&url, None, None)?.0, 401);
    Ok(())
}

/// `kubectl delete FLAG SOURCE` (`-k` a kustomization, `-f` a file) deletes every object of the
/// install in one command, and nothing of it is left a minute later. A bare apiserver has no
/// namespace controller to finalize the namespace, so the namespace is only seen terminating, and
/// kubectl is not made to wait for that.
async fn removed_by_delete(
    client: &kube::Client,
    kc: &std::path::Path,
    flag: &str,
    source: &str,
) -> Result<()> {
    let out = kubectl_on(kc, &["delete", "--wait=false", flag, source])?;
    println!("{out}");
    let built = match flag {
        "-k" => kubectl_on(kc, &["kustomize", source])?,
        _ => std::fs::read_to_string(source)?,
    };
    let made = built.matches("\nkind: ").count() + usize::from(built.starts_with("kind: "));
    let deleted = out.lines().filter(|l| l.contains("\" deleted")).count();
    assert_eq!(
        deleted, made,
        "every object of the install is deleted:\n{out}"
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let left = kubectl_on(
            kc,
            &[
                "get",
                "--ignore-not-found",
                "-o",
                "name",
                "customresourcedefinition/eventseriespolicies.eventseries.dev",
                "clusterrole/event-series",
                "clusterrole/event-series-metrics-reader",
                "clusterrolebinding/event-series",
                "validatingadmissionpolicy/event-series-series-objects",
                "validatingadmissionpolicybinding/event-series-series-objects",
                "flowschema/event-series-leader-election",
            ],
        )?;
        let ns = Api::<k8s_openapi::api::core::v1::Namespace>::all(client.clone())
            .get_opt(NS)
            .await?;
        let terminating = ns.is_none_or(|n| n.metadata.deletion_timestamp.is_some());
        let namespaced = kubectl_on(
            kc,
            &[
                "get",
                "-n",
                NS,
                "--ignore-not-found",
                "-o",
                "name",
                "deployment,serviceaccount,role,rolebinding,service,poddisruptionbudget,networkpolicy",
            ],
        )?;
        if left.trim().is_empty() && namespaced.trim().is_empty() && terminating {
            return Ok(());
        }
        if std::time::Instant::now() > deadline {
            anyhow::bail!(
                "left after delete -k: {left} {namespaced} (namespace terminating: {terminating})"
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The admission policy's refusal, with its reason.
fn refused<T: std::fmt::Debug>(what: &str, r: Result<T, kube::Error>) {
    match r {
        Err(kube::Error::Api(s))
            if (s.code == 403 || s.code == 422)
                && (s
                    .message
                    .contains("only the event-series operator may write an Event")
                    || s.message
                        .contains("only the event-series operator may change a series object")) => {
        }
        other => panic!("{what}: expected the admission policy's refusal, got {other:?}"),
    }
}

/// Install: the ValidatingAdmissionPolicy refuses, from anyone but the operator's ServiceAccount
/// (which just wrote `genuine`), an Event carrying the operator's label or an `eventseries.dev/`
/// label or annotation; ordinary events pass.
async fn refused_by_the_admission_policy(
    admin: &kube::Client,
    kc: &std::path::Path,
    ns: &str,
    genuine: &Event,
) -> Result<()> {
    use k8s_openapi::api::core::v1::Event as CoreEvent;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
    use k8s_openapi::jiff::{SignedDuration, Timestamp};
    use kube::api::PostParams;
    let victim = TestNamespace::new(admin, "install_victim").await?;
    let tenant = tenant_client(admin, kc, ns, &victim.name).await?;
    let pp = PostParams::default();
    // A copy of the operator's series object, under another name.
    let mut copy = genuine.clone();
    copy.metadata = ObjectMeta {
        name: Some("forged-copy".into()),
        namespace: Some(ns.to_owned()),
        labels: genuine.metadata.labels.clone(),
        annotations: genuine.metadata.annotations.clone(),
        ..Default::default()
    };
    let series_api: Api<Event> = Api::namespaced(tenant.clone(), ns);
    refused(
        "a copy of a series object",
        series_api.create(&pp, &copy).await,
    );
    // Only an eventseries.dev/ annotation, on a core/v1 Event ten years ahead.
    let far = Timestamp::now()
        .checked_add(SignedDuration::from_hours(24 * 3650))
        .context("far future")?;
    let mut raw = event_series_test_support::raw::kubelet_backoff(ns, "forged-raw", "web", 2);
    raw.metadata.annotations = Some(
        [(
            "eventseries.dev/watermark".to_owned(),
            "999999999".to_owned(),
        )]
        .into(),
    );
    raw.event_time = Some(MicroTime(far));
    raw.reporting_component = Some("kubelet".into());
    raw.reporting_instance = Some("node-1".into());
    raw.action = Some("BackOff".into());
    let core_api: Api<CoreEvent> = Api::namespaced(tenant.clone(), ns);
    refused(
        "an eventseries.dev/ annotation",
        core_api.create(&pp, &raw).await,
    );
    // The operator's label alone, written by the cluster admin: refused too.
    let mut labelled = event_series_test_support::raw::kubelet_backoff(ns, "labelled", "web", 1);
    labelled.metadata.labels = Some(event_series_test_support::raw::operators_own());
    let admin_api: Api<CoreEvent> = Api::namespaced(admin.clone(), ns);
    refused(
        "the managed-by label, as admin",
        admin_api.create(&pp, &labelled).await,
    );
    // An update that adds the label to an ordinary event: refused; the ordinary event itself passes.
    let plain = event_series_test_support::raw::kubelet_backoff(ns, "plain", "web", 1);
    core_api.create(&pp, &plain).await?;
    let patch = serde_json::json!({"metadata": {"labels": {"eventseries.dev/state": "Ongoing"}}});
    refused(
        "an update adding an eventseries.dev/ label",
        core_api
            .patch(
                "plain",
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(patch),
            )
            .await,
    );
    // A tenant with update rights strips the operator's labels and annotations off a genuine
    // series object in one merge patch (the new object alone carries none, so a policy that
    // judged only it let this through, and the object was then counted as a raw event).
    let genuine_name = genuine
        .metadata
        .name
        .clone()
        .context("the series object's name")?;
    let strip = serde_json::json!({"metadata": {
        "labels": genuine.metadata.labels.as_ref().map(|l| {
            l.keys().map(|k| (k.clone(), serde_json::Value::Null)).collect::<serde_json::Map<_, _>>()
        }),
        "annotations": genuine.metadata.annotations.as_ref().map(|a| {
            a.keys().map(|k| (k.clone(), serde_json::Value::Null)).collect::<serde_json::Map<_, _>>()
        }),
    }});
    refused(
        "an update stripping a series object's labels and annotations",
        core_api
            .patch(
                &genuine_name,
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(strip),
            )
            .await,
    );
    victim.cleanup().await
}

/// The chart the Helm way on a cluster that has never seen the CRD: one `helm install` (the CRD
/// rendered from the chart's templates, first), every object of the install accepted by the real API server's
/// validation (the admission policy's CEL compiled), a policy applicable at once; `helm uninstall`
/// `helm upgrade` takes the CRD along (a template, not `crds/`, which Helm never upgrades), and
/// `helm uninstall` removes everything but the CRD (`helm.sh/resource-policy: keep`).
#[tokio::test]
async fn helm_installs_and_uninstalls_the_chart_on_a_fresh_cluster() -> Result<()> {
    helm_cycle("helm").await
}

/// The same with Helm 4 (`hack/tools.sh helm4`), which users move to: install, a second release
/// refused, upgrade with the CRD, uninstall keeping the CRD.
#[tokio::test]
async fn helm_4_installs_and_uninstalls_the_chart_on_a_fresh_cluster() -> Result<()> {
    helm_cycle("helm4").await
}

async fn helm_cycle(tool: &str) -> Result<()> {
    let helm = repo_root().join("target/tools/bin").join(tool);
    if !helm.exists() {
        anyhow::ensure!(
            std::env::var("CI").as_deref() != Ok("true"),
            "{} is missing (hack/tools.sh builds it)",
            helm.display()
        );
        println!("skipped: no {tool}; run `just tools`");
        return Ok(());
    }
    let cluster = Dedicated::start_bare(tool, &[])?;
    let kc = cluster.kubeconfig.as_path();
    let helm_on = |args: &[&str]| -> Result<String> {
        let out = std::process::Command::new(&helm)
            .arg("--kubeconfig")
            .arg(kc)
            .args(args)
            .current_dir(repo_root())
            .output()?;
        anyhow::ensure!(
            out.status.success(),
            "helm {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    };
    let installed = helm_on(&[
        "install",
        "event-series",
        "charts/event-series",
        "--namespace",
        NS,
        "--create-namespace",
    ])?;
    println!("{installed}");
    assert!(installed.contains("STATUS: deployed"), "{installed}");
    let names = [
        "deployment/event-series",
        "serviceaccount/event-series",
        "service/event-series-metrics",
        "poddisruptionbudget/event-series",
        "networkpolicy/event-series",
        "role/event-series-leader-election",
        "rolebinding/event-series-leader-election",
    ];
    let cluster_names = [
        "clusterrole/event-series",
        "clusterrole/event-series-metrics-reader",
        "clusterrolebinding/event-series",
        "validatingadmissionpolicy/event-series-series-objects",
        "validatingadmissionpolicybinding/event-series-series-objects",
    ];
    let present = |namespaced: bool, list: &[&str]| -> Result<usize> {
        let mut args = vec!["get", "--ignore-not-found", "-o", "name"];
        if namespaced {
            args.extend(["-n", NS]);
        }
        args.extend_from_slice(list);
        Ok(kubectl_on(kc, &args)?.lines().count())
    };
    assert_eq!(present(true, &names)?, names.len());
    assert_eq!(present(false, &cluster_names)?, cluster_names.len());
    kubectl_on(
        kc,
        &[
            "wait",
            "--for=condition=Established",
            "--timeout=60s",
            "crd/eventseriespolicies.eventseries.dev",
        ],
    )?;
    let samples = repo_root().join("config/samples");
    kubectl_on(
        kc,
        &["apply", "--server-side", "-k", &samples.to_string_lossy()],
    )?;
    // One per cluster: a second release, under another name and namespace, is refused with the
    // name of the first (it would have watched every Event twice, and each release's
    // admission policy refused the other's writes).
    let second = helm_on(&[
        "install",
        "again",
        "charts/event-series",
        "--namespace",
        "again",
        "--create-namespace",
    ]);
    match second {
        Ok(out) => anyhow::bail!("a second release was installed: {out}"),
        Err(e) => assert!(
            e.to_string()
                .contains("already installed in this cluster by release \"event-series\""),
            "{e}"
        ),
    }

    let upgraded = helm_on(&[
        "upgrade",
        "event-series",
        "charts/event-series",
        "--namespace",
        NS,
        "--reuse-values",
    ])?;
    assert!(upgraded.contains("STATUS: deployed"), "{upgraded}");
    let removed = helm_on(&["uninstall", "event-series", "--namespace", NS])?;
    println!("{removed}");
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let left = present(true, &names)? + present(false, &cluster_names)?;
        if left == 0 {
            break;
        }
        anyhow::ensure!(
            std::time::Instant::now() < deadline,
            "{left} objects left after helm uninstall"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert_eq!(
        present(false, &["crd/eventseriespolicies.eventseries.dev"])?,
        1,
        "the CRD is kept on uninstall"
    );
    Ok(())
}

/// The release's one-file install (`just release` writes `dist/install.yaml`; here
/// `hack/release.sh --install-only`): on a cluster that has never seen the CRD, one
/// `kubectl apply --server-side -f` installs every object, the image pinned by digest, and one
/// `kubectl delete -f` removes them all.
#[tokio::test]
async fn the_release_install_yaml_installs_and_removes_in_one_command_each() -> Result<()> {
    let out = std::process::Command::new("bash")
        .args(["hack/release.sh", "--install-only"])
        .current_dir(repo_root())
        .output()?;
    anyhow::ensure!(
        out.status.success(),
        "hack/release.sh --install-only: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let file = repo_root().join("dist/install.yaml");
    let text = std::fs::read_to_string(&file)?;
    let objects = text.matches("\nkind: ").count();
    let image = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("image: "))
        .context("an image in install.yaml")?;
    anyhow::ensure!(
        image.contains("@sha256:") && image.len() > "@sha256:".len() + 64,
        "the image is not pinned by digest: {image}"
    );
    let cluster = Dedicated::start_bare("release", &[])?;
    let kc = cluster.kubeconfig.as_path();
    let path = file.to_string_lossy().into_owned();
    let applied = kubectl_on(kc, &["apply", "--server-side", "-f", &path])?;
    println!("{applied}");
    assert_eq!(
        applied
            .lines()
            .filter(|l| l.ends_with("serverside-applied"))
            .count(),
        objects,
        "every object of install.yaml applied in one command"
    );
    let client = client_for(kc).await?;
    let deployment = Api::<Deployment>::namespaced(client.clone(), NS)
        .get("event-series")
        .await?;
    let pinned = deployment
        .spec
        .template
        .spec
        .and_then(|p| p.containers.into_iter().next())
        .and_then(|c| c.image);
    assert_eq!(pinned.as_deref(), Some(image));
    removed_by_delete(&client, kc, "-f", &path).await?;
    drop(cluster);
    Ok(())
}
