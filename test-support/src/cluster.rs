//! The real kube-apiserver (with etcd) the end-to-end and fault tests run against, each test in a
//! namespace of its own, and what they read back from it.
//!
//! The shared cluster is the one `EVENT_SERIES_E2E_KUBECONFIG` points to, or else one started through
//! the harness (`hack/cluster-up.sh`) in `target/envtest-e2e`. `KUBECONFIG` is deliberately not used:
//! it may point at a real cluster.

use crate::repo_root;
use anyhow::{Context, Result, bail};
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, DeleteParams, ObjectMeta, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Path of the admin kubeconfig of the test cluster, starting it on first use.
pub fn kubeconfig() -> &'static Path {
    static KUBECONFIG: OnceLock<PathBuf> = OnceLock::new();
    KUBECONFIG.get_or_init(|| {
        let path = match std::env::var("EVENT_SERIES_E2E_KUBECONFIG") {
            Ok(path) => PathBuf::from(path),
            Err(_) => {
                let dir = repo_root().join("target/envtest-e2e");
                let status = Command::new("bash")
                    .arg(repo_root().join("hack/cluster-up.sh"))
                    .env("ENVTEST_DIR", &dir)
                    .status()
                    .expect("hack/cluster-up.sh runs");
                assert!(status.success(), "hack/cluster-up.sh failed: {status}");
                dir.join("kubeconfig")
            }
        };
        if let Err(e) = install_crd(&path) {
            panic!("installing the EventSeriesPolicy CRD: {e:#}");
        }
        path
    })
}

/// The apiserver's address (`host:port` of the kubeconfig's server URL).
pub fn apiserver_addr(kubeconfig: &Path) -> Result<std::net::SocketAddr> {
    let text = std::fs::read_to_string(kubeconfig)?;
    let server = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("server: "))
        .context("no server in the kubeconfig")?;
    let hostport = server
        .trim()
        .trim_start_matches("https://")
        .trim_end_matches('/');
    Ok(hostport.parse()?)
}

/// A copy of `kubeconfig` (at `path`) whose server is `addr`, for instance a fault proxy in front of
/// the apiserver. The apiserver's certificate names 127.0.0.1, so TLS still verifies.
pub fn kubeconfig_through(
    kubeconfig: &Path,
    addr: std::net::SocketAddr,
    path: &Path,
) -> Result<PathBuf> {
    let upstream = apiserver_addr(kubeconfig)?;
    let text = std::fs::read_to_string(kubeconfig)?.replace(
        &format!("server: https://{upstream}"),
        &format!("server: https://{addr}"),
    );
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(path, text)?;
    Ok(path.to_path_buf())
}

/// Installs the generated EventSeriesPolicy CRD (`crds/`) and waits until it is served.
pub fn install_crd(kubeconfig: &Path) -> Result<()> {
    let crd = repo_root().join("crds/eventseries.dev_eventseriespolicies.yaml");
    let crd = crd.to_string_lossy();
    kubectl_on(
        kubeconfig,
        &["apply", "--server-side", "--force-conflicts", "-f", &crd],
    )?;
    kubectl_on(
        kubeconfig,
        &[
            "wait",
            "--for=condition=Established",
            "--timeout=60s",
            "crd/eventseriespolicies.eventseries.dev",
        ],
    )?;
    Ok(())
}

/// A kube-rs client for the shared test cluster's admin.
pub async fn client() -> Result<Client> {
    client_for(kubeconfig()).await
}

/// A kube-rs client for the admin of the cluster behind `kubeconfig`.
pub async fn client_for(kubeconfig: &Path) -> Result<Client> {
    let kubeconfig = Kubeconfig::read_from(kubeconfig)?;
    let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await?;
    Ok(Client::try_from(config)?)
}

/// A client for the cluster `KUBECONFIG` names (else `~/.kube/config`, or the Pod's own): for the
/// benchmark programs, which the scripts point at their private clusters that way.
pub async fn client_from_env() -> Result<Client> {
    Client::try_default().await.context("no usable kubeconfig")
}

/// Creates namespace `name` unless it exists.
pub async fn ensure_namespace(client: &Client, name: &str) -> Result<()> {
    let api: Api<Namespace> = Api::all(client.clone());
    let ns = Namespace {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        ..Default::default()
    };
    match api.create(&PostParams::default(), &ns).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
        Err(e) => Err(e).with_context(|| format!("creating namespace {name}")),
    }
}

/// A cluster of one test's own, for apiserver flags the others must not see (short watch timeouts,
/// low inflight limits, a short event TTL) or for counting the apiserver's own request metrics.
/// Stopped when dropped.
pub struct Dedicated {
    dir: PathBuf,
    pub kubeconfig: PathBuf,
}

impl Dedicated {
    /// A dedicated cluster with the EventSeriesPolicy CRD installed.
    pub fn start(name: &str, env: &[(&str, &str)]) -> Result<Dedicated> {
        let cluster = Dedicated::start_bare(name, env)?;
        install_crd(&cluster.kubeconfig)?;
        Ok(cluster)
    }

    /// A dedicated cluster as the harness starts it: no CRD.
    pub fn start_bare(name: &str, env: &[(&str, &str)]) -> Result<Dedicated> {
        // One directory per Kubernetes minor too: the harness tells its servers by their binaries'
        // path, so a leftover of another minor's run would not be recognised and stopped.
        let minor = std::env::var("ENVTEST_MINOR").unwrap_or_default();
        let suffix = if minor.is_empty() {
            String::new()
        } else {
            format!("-{minor}")
        };
        let dir = repo_root().join(format!("target/envtest-e2e-{name}{suffix}"));
        // A leftover from an earlier run may have other flags.
        let _ = Command::new("bash")
            .arg(repo_root().join("hack/cluster-down.sh"))
            .env("ENVTEST_DIR", &dir)
            .status();
        let status = Command::new("bash")
            .arg(repo_root().join("hack/cluster-up.sh"))
            .env("ENVTEST_DIR", &dir)
            .envs(env.iter().copied())
            .status()?;
        if !status.success() {
            bail!("hack/cluster-up.sh for {name} failed: {status}");
        }
        Ok(Dedicated {
            kubeconfig: dir.join("kubeconfig"),
            dir,
        })
    }
}

impl Drop for Dedicated {
    fn drop(&mut self) {
        let _ = Command::new("bash")
            .arg(repo_root().join("hack/cluster-down.sh"))
            .env("ENVTEST_DIR", &self.dir)
            .status();
    }
}

/// A namespace of the test's own, named after it; its events are deleted when the test ends.
pub struct TestNamespace {
    pub name: String,
    client: Client,
}

impl TestNamespace {
    pub async fn new(client: &Client, test: &str) -> Result<TestNamespace> {
        static SEQ: AtomicUsize = AtomicUsize::new(0);
        let name = format!(
            "e2e-{}-{}-{}",
            test.replace('_', "-").chars().take(40).collect::<String>(),
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        );
        let ns = Namespace {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                ..Default::default()
            },
            ..Default::default()
        };
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &ns)
            .await
            .with_context(|| format!("creating namespace {name}"))?;
        Ok(TestNamespace {
            name,
            client: client.clone(),
        })
    }

    /// Deletes what the test left. The harness runs no namespace controller, so the namespace's
    /// events are deleted explicitly before the namespace itself.
    pub async fn cleanup(self) -> Result<()> {
        use k8s_openapi::api::core::v1::Event;
        let events: Api<Event> = Api::namespaced(self.client.clone(), &self.name);
        events
            .delete_collection(&DeleteParams::default(), &Default::default())
            .await?;
        Api::<Namespace>::all(self.client.clone())
            .delete(&self.name, &DeleteParams::default())
            .await?;
        Ok(())
    }
}

/// Runs `kubectl` of the harness against the shared test cluster and returns its stdout.
pub fn kubectl(args: &[&str]) -> Result<String> {
    kubectl_on(kubeconfig(), args)
}

/// `kubectl apply --server-side -f -` of `yaml` on the cluster behind `kubeconfig`; stderr is the error.
pub fn apply_on(kubeconfig: &Path, yaml: &str, extra: &[&str]) -> Result<String> {
    use std::io::Write;
    let mut child = Command::new(crate::kubectl_bin())
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(["apply", "--server-side", "-f", "-"])
        .args(extra)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()?;
    child
        .stdin
        .take()
        .context("kubectl stdin")?
        .write_all(yaml.as_bytes())?;
    let out = child.wait_with_output()?;
    if !out.status.success() {
        bail!("{}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(String::from_utf8(out.stdout)?)
}

/// Runs `kubectl` against the cluster behind `kubeconfig`.
pub fn kubectl_on(kubeconfig: &Path, args: &[&str]) -> Result<String> {
    let bin = crate::kubectl_bin();
    let out = Command::new(&bin)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(args)
        .output()
        .with_context(|| format!("running {}", bin.display()))?;
    if !out.status.success() {
        bail!(
            "kubectl {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8(out.stdout)?)
}

/// A kubeconfig that acts as ServiceAccount `name` in `namespace`, bound to a Role with `rules` there
/// and, when `cluster_rules` is not empty, to a ClusterRole with those, using a token from the
/// TokenRequest API: how to run the operator as something other than the admin (whose group,
/// system:masters, is exempt from the apiserver's inflight limits and RBAC).
pub async fn service_account_kubeconfig(
    client: &Client,
    admin_kubeconfig: &Path,
    namespace: &str,
    name: &str,
    rules: Vec<k8s_openapi::api::rbac::v1::PolicyRule>,
    cluster_rules: Vec<k8s_openapi::api::rbac::v1::PolicyRule>,
) -> Result<PathBuf> {
    use k8s_openapi::api::core::v1::ServiceAccount;
    use k8s_openapi::api::rbac::v1::{
        ClusterRole, ClusterRoleBinding, Role, RoleBinding, RoleRef, Subject,
    };
    let subject = || Subject {
        kind: "ServiceAccount".into(),
        name: name.to_owned(),
        namespace: Some(namespace.to_owned()),
        ..Default::default()
    };
    let meta = || ObjectMeta {
        name: Some(name.to_owned()),
        namespace: Some(namespace.to_owned()),
        ..Default::default()
    };
    let pp = PostParams::default();
    let sas: Api<ServiceAccount> = Api::namespaced(client.clone(), namespace);
    sas.create(
        &pp,
        &ServiceAccount {
            metadata: meta(),
            ..Default::default()
        },
    )
    .await?;
    Api::<Role>::namespaced(client.clone(), namespace)
        .create(
            &pp,
            &Role {
                metadata: meta(),
                rules: Some(rules),
            },
        )
        .await?;
    Api::<RoleBinding>::namespaced(client.clone(), namespace)
        .create(
            &pp,
            &RoleBinding {
                metadata: meta(),
                role_ref: RoleRef {
                    api_group: Some("rbac.authorization.k8s.io".into()),
                    kind: "Role".into(),
                    name: name.to_owned(),
                },
                subjects: Some(vec![subject()]),
            },
        )
        .await?;
    if !cluster_rules.is_empty() {
        let global = || ObjectMeta {
            name: Some(format!("{namespace}-{name}")),
            ..Default::default()
        };
        Api::<ClusterRole>::all(client.clone())
            .create(
                &pp,
                &ClusterRole {
                    metadata: global(),
                    rules: Some(cluster_rules),
                    ..Default::default()
                },
            )
            .await?;
        Api::<ClusterRoleBinding>::all(client.clone())
            .create(
                &pp,
                &ClusterRoleBinding {
                    metadata: global(),
                    role_ref: RoleRef {
                        api_group: Some("rbac.authorization.k8s.io".into()),
                        kind: "ClusterRole".into(),
                        name: format!("{namespace}-{name}"),
                    },
                    subjects: Some(vec![subject()]),
                },
            )
            .await?;
    }
    token_kubeconfig(client, admin_kubeconfig, namespace, name).await
}

/// A kubeconfig that acts as the existing ServiceAccount `namespace/name`, with a token from the
/// TokenRequest API, as a pod of that ServiceAccount would.
pub async fn token_kubeconfig(
    client: &Client,
    admin_kubeconfig: &Path,
    namespace: &str,
    name: &str,
) -> Result<PathBuf> {
    use k8s_openapi::api::core::v1::ServiceAccount;
    let sas: Api<ServiceAccount> = Api::namespaced(client.clone(), namespace);
    let token = sas
        .create_token_request(name, &PostParams::default(), &Default::default())
        .await?
        .status
        .and_then(|s| s.token)
        .context("TokenRequest returned no token")?;
    let admin = Kubeconfig::read_from(admin_kubeconfig)?;
    let cluster = admin
        .clusters
        .first()
        .and_then(|c| c.cluster.clone())
        .context("admin kubeconfig has no cluster")?;
    let server = cluster.server.clone().context("no server")?;
    let ca = cluster
        .certificate_authority_data
        .clone()
        .map(|d| format!("    certificate-authority-data: {d}\n"))
        .or_else(|| {
            cluster
                .certificate_authority
                .clone()
                .map(|f| format!("    certificate-authority: {f}\n"))
        })
        .unwrap_or_default();
    let text = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {server}\n{ca}\
         users:\n- name: u\n  user:\n    token: {token}\ncontexts:\n- name: x\n  context:\n    \
         cluster: c\n    user: u\ncurrent-context: x\n"
    );
    let path = admin_kubeconfig.with_file_name(format!("kubeconfig-{namespace}-{name}"));
    std::fs::write(&path, text)?;
    Ok(path)
}

/// A tenant of namespace `ns`, as the untrusted-tenant tests use it: ServiceAccount `tenant` with a Role for events there and the built-in
/// `view` in `viewing`, acting with its own token.
pub async fn tenant_client(
    admin: &Client,
    admin_kc: &Path,
    ns: &str,
    viewing: &str,
) -> Result<Client> {
    use k8s_openapi::api::rbac::v1::{PolicyRule, RoleBinding, RoleRef, Subject};
    let rule = |group: &str| PolicyRule {
        api_groups: Some(vec![group.to_owned()]),
        resources: Some(vec!["events".into()]),
        verbs: [
            "create", "update", "patch", "get", "list", "watch", "delete",
        ]
        .map(String::from)
        .to_vec(),
        ..Default::default()
    };
    let kc = service_account_kubeconfig(
        admin,
        admin_kc,
        ns,
        "tenant",
        vec![rule(""), rule("events.k8s.io")],
        Vec::new(),
    )
    .await?;
    Api::<RoleBinding>::namespaced(admin.clone(), viewing)
        .create(
            &PostParams::default(),
            &RoleBinding {
                metadata: ObjectMeta {
                    name: Some(format!("tenant-of-{ns}")),
                    ..Default::default()
                },
                role_ref: RoleRef {
                    api_group: Some("rbac.authorization.k8s.io".into()),
                    kind: "ClusterRole".into(),
                    name: "view".into(),
                },
                subjects: Some(vec![Subject {
                    kind: "ServiceAccount".into(),
                    name: "tenant".into(),
                    namespace: Some(ns.to_owned()),
                    ..Default::default()
                }]),
            },
        )
        .await?;
    client_for(&kc).await
}

/// The namespaced permissions `event-series run --namespace` needs.
pub fn operator_rules() -> Vec<k8s_openapi::api::rbac::v1::PolicyRule> {
    use k8s_openapi::api::rbac::v1::PolicyRule;
    let rule = |group: &str, verbs: &[&str]| PolicyRule {
        api_groups: Some(vec![group.to_owned()]),
        resources: Some(vec!["events".into()]),
        verbs: verbs.iter().map(|v| v.to_string()).collect(),
        ..Default::default()
    };
    vec![
        rule("", &["list", "watch"]),
        rule(
            "events.k8s.io",
            &["create", "patch", "list", "watch", "get"],
        ),
    ]
}

/// The cluster-scoped permissions the operator needs besides: policies and their status, namespace
/// labels (for `namespaceSelector`).
pub fn operator_cluster_rules() -> Vec<k8s_openapi::api::rbac::v1::PolicyRule> {
    use k8s_openapi::api::rbac::v1::PolicyRule;
    let rule = |group: &str, resource: &str, verbs: &[&str]| PolicyRule {
        api_groups: Some(vec![group.to_owned()]),
        resources: Some(vec![resource.into()]),
        verbs: verbs.iter().map(|v| v.to_string()).collect(),
        ..Default::default()
    };
    vec![
        rule("eventseries.dev", "eventseriespolicies", &["list", "watch"]),
        rule("eventseries.dev", "eventseriespolicies/status", &["patch"]),
        rule("", "namespaces", &["list", "watch"]),
    ]
}

/// The operator's series objects in a namespace (paginated).
pub async fn series(client: &Client, ns: &str) -> Result<Vec<k8s_openapi::api::events::v1::Event>> {
    let api: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(client.clone(), ns);
    let mut out = Vec::new();
    let mut lp = kube::api::ListParams::default()
        .labels("app.kubernetes.io/managed-by=event-series")
        .limit(500);
    loop {
        let list = api.list(&lp).await?;
        out.extend(list.items);
        match list.metadata.continue_ {
            Some(c) if !c.is_empty() => lp = lp.continue_token(&c),
            _ => break,
        }
    }
    Ok(out)
}

/// A series object's `eventseries.dev/state` label.
pub fn state(e: &k8s_openapi::api::events::v1::Event) -> &str {
    e.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get("eventseries.dev/state"))
        .map_or("", String::as_str)
}

/// A series object's `series.count` (1 for an object without a series).
pub fn count(e: &k8s_openapi::api::events::v1::Event) -> u64 {
    e.series.as_ref().map_or(1, |s| s.count as u64)
}
