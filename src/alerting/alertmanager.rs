//! Posting alerts to Alertmanager's v2 API over HTTP or HTTPS, as Prometheus' `alertmanager_config`
//! does: every listed Alertmanager gets every alert (they deduplicate among themselves), with a CA
//! file for a private CA and a bearer token or basic auth read from files (a mounted Secret), read
//! again at each post so that a rotated credential is used without a restart.

use anyhow::Context;
use base64::Engine as _;
use bytes::Bytes;
use http::{Request, Uri, header};
use http_body_util::{BodyExt, Full};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::CertificateDer;
use tokio_rustls::rustls::pki_types::pem::PemObject;

/// Where alerts go and how to authenticate (`--alertmanager-*` flags).
#[derive(Clone, Debug, Default)]
pub struct Target {
    /// Base URLs, such as `https://alertmanager.monitoring:9093`; `/api/v2/alerts` is appended.
    pub urls: Vec<String>,
    /// PEM file of the CA that signed the Alertmanagers' certificates; absent: the system's roots.
    pub ca_file: Option<PathBuf>,
    pub bearer_token_file: Option<PathBuf>,
    pub username: Option<String>,
    pub password_file: Option<PathBuf>,
    /// Deadline of one post.
    pub timeout: Duration,
    /// Send the credentials to `http://` URLs too (`--alertmanager-allow-plaintext-credentials`).
    pub allow_plaintext_credentials: bool,
}

impl Target {
    /// Credentials over plain HTTP go to whoever can read the network between the operator and
    /// Alertmanager: refused unless explicitly allowed, and then warned about at every start.
    fn check_plaintext(&self, endpoints: &[Uri]) -> anyhow::Result<()> {
        let credentials = self.bearer_token_file.is_some() || self.username.is_some();
        let plain: Vec<String> = endpoints
            .iter()
            .filter(|u| u.scheme_str() == Some("http"))
            .filter_map(|u| u.authority().map(ToString::to_string))
            .collect();
        if !credentials || plain.is_empty() {
            return Ok(());
        }
        if !self.allow_plaintext_credentials {
            anyhow::bail!(
                "--alertmanager-url {}: plain http:// would send the Alertmanager credentials \
                 unencrypted; use https:// (with --alertmanager-ca-file for a private CA), or pass \
                 --alertmanager-allow-plaintext-credentials to send them anyway",
                plain.join(",")
            );
        }
        tracing::warn!(
            alertmanagers = %plain.join(","),
            "INSECURE: Alertmanager credentials are sent over plain HTTP \
             (--alertmanager-allow-plaintext-credentials); anyone on the path can read them"
        );
        Ok(())
    }
}

/// Why a post to one Alertmanager failed.
#[derive(Debug, thiserror::Error)]
pub enum PostError {
    #[error("{url}: no answer within {timeout:?}")]
    Timeout { url: String, timeout: Duration },
    #[error("{url}: {source}")]
    Transport {
        url: String,
        #[source]
        source: hyper_util::client::legacy::Error,
    },
    #[error("{url}: HTTP {status}: {body}")]
    Refused {
        url: String,
        status: http::StatusCode,
        body: String,
    },
    #[error("credentials: {0}")]
    Credentials(String),
}

pub struct Alertmanagers {
    client: Client<HttpsConnector<HttpConnector>, Full<Bytes>>,
    endpoints: Vec<Uri>,
    target: Target,
}

impl PostError {
    /// An answer that a retry will not change: the alerts themselves were refused (400, 413 or
    /// 422; Alertmanager stores the valid alerts of a post it answers 400). A refused credential
    /// (401, 403) is retried: the files are read again at each post, so a rotation mends it.
    pub fn is_permanent(&self) -> bool {
        use http::StatusCode;
        matches!(self, PostError::Refused { status, .. }
            if matches!(*status, StatusCode::BAD_REQUEST | StatusCode::PAYLOAD_TOO_LARGE
                | StatusCode::UNPROCESSABLE_ENTITY))
    }
}

impl Alertmanagers {
    /// Checks the URLs and the CA file at start, so that a typo fails the operator's start with a
    /// message rather than every post.
    pub fn new(target: Target) -> anyhow::Result<Alertmanagers> {
        let endpoints = target
            .urls
            .iter()
            .map(|u| endpoint(u))
            .collect::<anyhow::Result<Vec<_>>>()?;
        target.check_plaintext(&endpoints)?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .context("TLS for Alertmanager")?;
        let tls = match &target.ca_file {
            Some(path) => {
                let mut roots = rustls::RootCertStore::empty();
                for cert in CertificateDer::pem_file_iter(path)
                    .with_context(|| format!("--alertmanager-ca-file {}", path.display()))?
                {
                    let cert =
                        cert.with_context(|| format!("--alertmanager-ca-file {}", path.display()))?;
                    roots
                        .add(cert)
                        .with_context(|| format!("--alertmanager-ca-file {}", path.display()))?;
                }
                builder.with_root_certificates(roots).with_no_client_auth()
            }
            None => {
                let mut roots = rustls::RootCertStore::empty();
                // Unreadable system roots leave HTTPS without trust, and plain HTTP working.
                let found = rustls_native_certs_load();
                roots.add_parsable_certificates(found);
                builder.with_root_certificates(roots).with_no_client_auth()
            }
        };
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .build();
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(60))
            .pool_max_idle_per_host(2)
            .build(connector);
        Ok(Alertmanagers {
            client,
            endpoints,
            target,
        })
    }

    pub fn len(&self) -> usize {
        self.endpoints.len()
    }

    pub fn is_empty(&self) -> bool {
        self.endpoints.is_empty()
    }

    /// Posts `body` (a JSON array of alerts) to every Alertmanager; the errors of those that did not
    /// take it. Alertmanagers of one cluster share what each is sent, so the post is delivered
    /// when one of them took it, as Prometheus counts it.
    pub async fn post(&self, body: Bytes) -> Vec<PostError> {
        let auth = match self.authorization() {
            Ok(auth) => auth,
            Err(e) => return vec![e],
        };
        let posts = self
            .endpoints
            .iter()
            .map(|uri| self.post_one(uri, body.clone(), auth.clone()));
        futures::future::join_all(posts)
            .await
            .into_iter()
            .filter_map(Result::err)
            .collect()
    }

    async fn post_one(
        &self,
        uri: &Uri,
        body: Bytes,
        auth: Option<String>,
    ) -> Result<(), PostError> {
        let url = uri.to_string();
        let mut req = Request::post(uri.clone())
            .header(header::CONTENT_TYPE, "application/json")
            .header(
                header::USER_AGENT,
                concat!("event-series/", env!("CARGO_PKG_VERSION")),
            );
        if let Some(auth) = auth {
            req = req.header(header::AUTHORIZATION, auth);
        }
        let req = req
            .body(Full::new(body))
            .map_err(|e| PostError::Credentials(e.to_string()))?;
        let timeout = self.target.timeout;
        let answer = tokio::time::timeout(timeout, async {
            let resp = self
                .client
                .request(req)
                .await
                .map_err(|source| PostError::Transport {
                    url: url.clone(),
                    source,
                })?;
            let status = resp.status();
            // Read the body (at most 64 KiB), so that the connection can be reused.
            let body = http_body_util::Limited::new(resp.into_body(), 64 * 1024)
                .collect()
                .await
                .map(|b| b.to_bytes())
                .unwrap_or_default();
            if status.is_success() {
                Ok(())
            } else {
                let text = String::from_utf8_lossy(&body[..body.len().min(512)]).into_owned();
                Err(PostError::Refused {
                    url: url.clone(),
                    status,
                    body: text,
                })
            }
        })
        .await;
        answer.unwrap_or(Err(PostError::Timeout { url, timeout }))
    }

    /// The Authorization header from the credential files, read now.
    fn authorization(&self) -> Result<Option<String>, PostError> {
        let read = |path: &PathBuf| {
            std::fs::read_to_string(path)
                .map(|s| s.trim().to_owned())
                .map_err(|e| PostError::Credentials(format!("{}: {e}", path.display())))
        };
        if let Some(path) = &self.target.bearer_token_file {
            return Ok(Some(format!("Bearer {}", read(path)?)));
        }
        if let Some(user) = &self.target.username {
            let password = match &self.target.password_file {
                Some(path) => read(path)?,
                None => String::new(),
            };
            let pair =
                base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
            return Ok(Some(format!("Basic {pair}")));
        }
        Ok(None)
    }
}

/// The system's CA certificates (as kube's own TLS finds them); none where they cannot be read.
fn rustls_native_certs_load() -> Vec<CertificateDer<'static>> {
    let found = rustls_native_certs::load_native_certs();
    for e in &found.errors {
        tracing::debug!(error = %e, "reading the system's CA certificates");
    }
    found.certs
}

/// `https://am:9093` or `https://am:9093/prefix/` → `.../api/v2/alerts`.
fn endpoint(url: &str) -> anyhow::Result<Uri> {
    let uri: Uri = url
        .parse()
        .with_context(|| format!("--alertmanager-url {url:?}"))?;
    match uri.scheme_str() {
        Some("http" | "https") if uri.authority().is_some() => {}
        _ => anyhow::bail!("--alertmanager-url {url:?}: not an http:// or https:// URL"),
    }
    if uri.authority().is_some_and(|a| a.as_str().contains('@')) {
        // It would be logged with every failed post; credentials go in files.
        anyhow::bail!(
            "--alertmanager-url: credentials in the URL are refused; use --alertmanager-username \
             and --alertmanager-password-file, or --alertmanager-bearer-token-file"
        );
    }
    let base = url
        .split(['?', '#'])
        .next()
        .unwrap_or(url)
        .trim_end_matches('/');
    format!("{base}/api/v2/alerts")
        .parse()
        .with_context(|| format!("--alertmanager-url {url:?}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_become_the_v2_alerts_endpoint() {
        assert_eq!(
            endpoint("http://127.0.0.1:9093").unwrap(),
            "http://127.0.0.1:9093/api/v2/alerts"
        );
        assert_eq!(
            endpoint("https://am.example:9093/prefix/").unwrap(),
            "https://am.example:9093/prefix/api/v2/alerts"
        );
        assert!(endpoint("am:9093").is_err());
        assert!(endpoint("ftp://am").is_err());
        assert!(endpoint("http:// bad").is_err());
        let secret = endpoint("https://ops:hunter2@am:9093")
            .unwrap_err()
            .to_string();
        assert!(!secret.contains("hunter2"), "{secret}");
    }

    #[test]
    fn credentials_are_read_from_their_files_at_each_post() {
        let dir = std::env::temp_dir().join(format!("es-am-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let token = dir.join("token");
        std::fs::write(&token, "abc\n").unwrap();
        let am = Alertmanagers::new(Target {
            urls: vec!["http://127.0.0.1:9".into()],
            bearer_token_file: Some(token.clone()),
            allow_plaintext_credentials: true,
            ..Target::default()
        })
        .unwrap();
        assert_eq!(am.authorization().unwrap().as_deref(), Some("Bearer abc"));
        std::fs::write(&token, "rotated").unwrap();
        assert_eq!(
            am.authorization().unwrap().as_deref(),
            Some("Bearer rotated")
        );
        let basic = Alertmanagers::new(Target {
            urls: vec!["http://127.0.0.1:9".into()],
            username: Some("ops".into()),
            password_file: Some(token),
            allow_plaintext_credentials: true,
            ..Target::default()
        })
        .unwrap();
        assert_eq!(
            basic.authorization().unwrap().as_deref(),
            Some("Basic b3BzOnJvdGF0ZWQ=")
        );
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn credentials_over_plain_http_refuse_the_start_unless_allowed() {
        let target = Target {
            urls: vec!["https://am-a:9093".into(), "http://am-b:9093".into()],
            bearer_token_file: Some("/dev/null".into()),
            ..Target::default()
        };
        let refused = Alertmanagers::new(target.clone())
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            refused.contains("am-b:9093") && refused.contains("plaintext"),
            "{refused}"
        );
        assert!(
            Alertmanagers::new(Target {
                allow_plaintext_credentials: true,
                ..target.clone()
            })
            .is_ok()
        );
        let without_credentials = Target {
            bearer_token_file: None,
            ..target
        };
        assert!(Alertmanagers::new(without_credentials).is_ok());
    }
}
