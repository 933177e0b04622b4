//! Operations: `/metrics` over HTTPS by default, for a bearer token the real API server accepts
//! (TokenReview) of a user who may `get` `/metrics` (SubjectAccessReview); decisions cached.

use crate::OPERATOR;
use anyhow::{Context, Result, bail, ensure};
use event_series_test_support::cluster::{TestNamespace, client, kubeconfig, kubectl_on};
use event_series_test_support::repo_root;
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::{ClusterRoleBinding, RoleRef, Subject};
use kube::Api;
use kube::api::{DeleteParams, ObjectMeta, PostParams};
use std::process::Command;

/// GET `url` with curl: the status code and the body. `ca`: verify against that certificate
/// (else skip verification: the operator's own certificate is self-signed).
pub(crate) fn curl(
    url: &str,
    token: Option<&str>,
    ca: Option<&std::path::Path>,
) -> Result<(u16, String)> {
    let mut cmd = Command::new("curl");
    cmd.args(["-sS", "--max-time", "20", "-w", "\n%{http_code}"]);
    match ca {
        Some(ca) => cmd.arg("--cacert").arg(ca),
        None => cmd.arg("-k"),
    };
    if let Some(t) = token {
        cmd.args(["-H", &format!("Authorization: Bearer {t}")]);
    }
    // localhost is one of the certificate's names; resolve it to the server's loopback address.
    if let Some(port) = url
        .strip_prefix("https://localhost:")
        .and_then(|r| r.split('/').next())
    {
        cmd.args(["--resolve", &format!("localhost:{port}:127.0.0.1")]);
    }
    let out = cmd.arg(url).output().context("running curl")?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", &text));
    let code = code.trim().parse().unwrap_or(0);
    if code == 0 {
        bail!(
            "curl {url}: no HTTP answer ({})",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok((code, body.to_owned()))
}

/// Token reviews the API server has answered, from its own `/metrics`.
fn token_reviews() -> Result<u64> {
    let text = kubectl_on(kubeconfig(), &["get", "--raw", "/metrics"])?;
    Ok(text
        .lines()
        .filter(|l| {
            l.starts_with("apiserver_request_total{")
                && l.contains("resource=\"tokenreviews\"")
                && l.contains("verb=\"POST\"")
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64)
}

/// A new ServiceAccount `name` in `ns`, and a token of it.
pub(crate) async fn token(client: &kube::Client, ns: &str, name: &str) -> Result<String> {
    let sas: Api<ServiceAccount> = Api::namespaced(client.clone(), ns);
    let sa = ServiceAccount {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            ..Default::default()
        },
        ..Default::default()
    };
    sas.create(&PostParams::default(), &sa).await?;
    sas.create_token_request(name, &PostParams::default(), &Default::default())
        .await?
        .status
        .and_then(|s| s.token)
        .context("TokenRequest returned no token")
}

#[tokio::test]
async fn metrics_need_a_token_with_the_metrics_reader_role() -> Result<()> {
    let client = client().await?;
    let ns = TestNamespace::new(&client, "secure_metrics").await?;
    // The role as config/default installs it.
    let role = repo_root().join("config/rbac/metrics_reader_role.yaml");
    kubectl_on(
        kubeconfig(),
        &["apply", "--server-side", "-f", &role.to_string_lossy()],
    )?;
    let scraper = token(&client, &ns.name, "scraper").await?;
    let stranger = token(&client, &ns.name, "stranger").await?;
    let bindings: Api<ClusterRoleBinding> = Api::all(client.clone());
    let binding = format!("metrics-reader-{}", ns.name);
    bindings
        .create(
            &PostParams::default(),
            &ClusterRoleBinding {
                metadata: ObjectMeta {
                    name: Some(binding.clone()),
                    ..Default::default()
                },
                role_ref: RoleRef {
                    api_group: Some("rbac.authorization.k8s.io".into()),
                    kind: "ClusterRole".into(),
                    name: "event-series-metrics-reader".into(),
                },
                subjects: Some(vec![Subject {
                    kind: "ServiceAccount".into(),
                    name: "scraper".into(),
                    namespace: Some(ns.name.clone()),
                    ..Default::default()
                }]),
            },
        )
        .await?;

    let op = OPERATOR.launch_secure(kubeconfig(), &ns.name, &["--namespace", &ns.name])?;
    let url = format!("{}/metrics", op.metrics);
    assert!(url.starts_with("https://"), "{url}");
    let none = curl(&url, None, None)?;
    let made_up = curl(&url, Some("not-a-token"), None)?;
    let forbidden = curl(&url, Some(&stranger), None)?;
    let reviews_before = token_reviews()?;
    let allowed = curl(&url, Some(&scraper), None)?;
    for _ in 0..4 {
        assert_eq!(curl(&url, Some(&scraper), None)?.0, 200);
    }
    let reviews = token_reviews()? - reviews_before;
    let plain = curl(&url.replace("https://", "http://"), Some(&scraper), None);
    println!(
        "no token: {}, made-up token: {}, token without the role: {} ({}), with the role: {} \
         ({} bytes); token reviews for 5 scrapes with one token: {reviews}; plain HTTP: {:?}",
        none.0,
        made_up.0,
        forbidden.0,
        forbidden.1.trim(),
        allowed.0,
        allowed.1.len(),
        plain.as_ref().map(|p| p.0)
    );
    assert_eq!(none.0, 401, "{}", none.1);
    assert_eq!(made_up.0, 401, "{}", made_up.1);
    assert_eq!(forbidden.0, 403, "{}", forbidden.1);
    assert_eq!(allowed.0, 200, "{}", allowed.1);
    for family in [
        "event_series_occurrences_total",
        "event_series_series_active",
        "event_series_dropped_total",
        "event_series_leader",
    ] {
        assert!(allowed.1.contains(family), "{family} missing");
    }
    assert!(
        reviews <= 1,
        "{reviews} token reviews for one token: the decision is cached"
    );
    assert!(
        !matches!(plain, Ok((200, _))),
        "plain HTTP on the HTTPS port"
    );
    // The health server stays plain HTTP, for the kubelet.
    assert_eq!(op.get("/readyz").map(|r| r.0), Some(200));
    drop(op);

    // A certificate of one's own (a mounted kubernetes.io/tls Secret), verified by the client.
    let made = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()])?;
    let dir = repo_root()
        .join("target/e2e-logs")
        .join(format!("{}-cert", ns.name));
    std::fs::create_dir_all(&dir)?;
    std::fs::write(dir.join("tls.crt"), made.cert.pem())?;
    std::fs::write(dir.join("tls.key"), made.signing_key.serialize_pem())?;
    let op = OPERATOR.launch_secure(
        kubeconfig(),
        &format!("{}-cert", ns.name),
        &[
            "--namespace",
            &ns.name,
            "--metrics-cert-dir",
            &dir.to_string_lossy(),
        ],
    )?;
    let port = op.metrics.rsplit(':').next().context("port")?.to_owned();
    let verified = curl(
        &format!("https://localhost:{port}/metrics"),
        Some(&scraper),
        Some(&dir.join("tls.crt")),
    )?;
    println!(
        "with --metrics-cert-dir, verified by curl --cacert: {}",
        verified.0
    );
    assert_eq!(verified.0, 200);
    drop(op);
    let _ = std::fs::remove_dir_all(&dir);

    // 100 invented tokens a second from one client (another loopback address) while the scraper's
    // token scrapes every 5 s, the first time after the flood began: the flood spends its own
    // share of the token reviews, and every real scrape answers 200.
    let op = OPERATOR.launch_secure(
        kubeconfig(),
        &format!("{}-flood", ns.name),
        &["--namespace", &ns.name],
    )?;
    let url = format!("{}/metrics", op.metrics);
    let flooding = {
        let url = url.clone();
        std::thread::spawn(move || invented_tokens(&url, "127.0.0.2", 20))
    };
    let mut scrapes = Vec::new();
    for _ in 0..4 {
        std::thread::sleep(std::time::Duration::from_secs(5));
        scrapes.push(curl(&url, Some(&scraper), None)?.0);
    }
    let flood_codes = flooding
        .join()
        .map_err(|_| anyhow::anyhow!("the flood thread panicked"))??;
    let answered = |code: u16| flood_codes.iter().filter(|c| **c == code).count();
    println!(
        "invented tokens: {} requests, {} answered 401, {} answered 503; real scrapes: {scrapes:?}",
        flood_codes.len(),
        answered(401),
        answered(503)
    );
    ensure!(
        scrapes.iter().all(|c| *c == 200),
        "a real scrape beside the flood: {scrapes:?}"
    );
    ensure!(
        answered(503) > 0 && answered(200) == 0,
        "the flood was not held to its share"
    );
    drop(op);
    bindings.delete(&binding, &DeleteParams::default()).await?;
    ns.cleanup().await
}

/// 100 requests a second to `url` for `seconds`, evenly spaced (curl's `--rate`), each with a new
/// invented bearer token, from the local address `from`; the HTTP codes answered.
fn invented_tokens(url: &str, from: &str, seconds: u32) -> Result<Vec<u16>> {
    let mut config = String::new();
    for i in 0..100 * seconds {
        // `next` starts a new set of options: each request carries all of its own.
        config.push_str(&format!(
            "url = \"{url}\"\noutput = \"/dev/null\"\ninsecure\ninterface = \"{from}\"\n\
             max-time = 10\nwrite-out = \"%{{http_code}}\\n\"\nheader = \"Authorization: \
             Bearer invented-{i}\"\nnext\n"
        ));
    }
    let mut child = Command::new("curl")
        .args(["-s", "--rate", "100/s", "-K", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .context("running curl")?;
    use std::io::Write;
    child
        .stdin
        .take()
        .context("curl's stdin")?
        .write_all(config.as_bytes())?;
    let out = child.wait_with_output()?;
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.trim().parse::<u16>().ok())
        .collect())
}
