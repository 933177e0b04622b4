//! The metrics server's certificate: `tls.crt` and `tls.key` of `--metrics-cert-dir` (the layout of
//! a `kubernetes.io/tls` Secret mounted as a volume, as cert-manager writes it), or, without one, a
//! self-signed certificate made at start (a scraper then skips verification, as kubebuilder's
//! default does; bring a certificate to verify it).
//!
//! A mounted Secret is renewed in place: the directory is re-read every [`RELOAD_EVERY`] and a
//! changed pair replaces the old one for new connections. A pair that fails to load keeps the old
//! one and is logged.

use rustls::crypto::ring::sign::any_supported_type;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls;

/// How often a `--metrics-cert-dir` is checked for a renewed certificate.
pub const RELOAD_EVERY: Duration = Duration::from_secs(30);

pub const CERT_FILE: &str = "tls.crt";
pub const KEY_FILE: &str = "tls.key";

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("reading {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: no PEM certificate in it")]
    NoCertificate { path: PathBuf },
    #[error("{path}: no usable PEM private key in it ({reason})")]
    Key { path: PathBuf, reason: String },
    #[error("making a self-signed certificate: {0}")]
    SelfSigned(#[from] rcgen::Error),
    #[error("TLS configuration: {0}")]
    Config(#[from] rustls::Error),
}

/// The current certificate, swapped in place when the files change.
#[derive(Debug)]
struct Current(RwLock<Arc<CertifiedKey>>);

impl ResolvesServerCert for Current {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.0.read().unwrap_or_else(|e| e.into_inner()).clone())
    }
}

/// A TLS acceptor with the certificate of `cert_dir`, or a self-signed one for `names`. With a
/// directory, a task re-reads it every [`RELOAD_EVERY`] (so call this inside a Tokio runtime).
pub fn acceptor(cert_dir: Option<&Path>, names: Vec<String>) -> Result<TlsAcceptor, TlsError> {
    let key = match cert_dir {
        Some(dir) => load(dir)?,
        None => self_signed(names)?,
    };
    let current = Arc::new(Current(RwLock::new(Arc::new(key))));
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_cert_resolver(current.clone());
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    if let Some(dir) = cert_dir {
        tokio::spawn(reload(dir.to_owned(), current));
    }
    Ok(TlsAcceptor::from(Arc::new(config)))
}

fn read(path: PathBuf) -> Result<(Vec<u8>, PathBuf), TlsError> {
    match std::fs::read(&path) {
        Ok(bytes) => Ok((bytes, path)),
        Err(source) => Err(TlsError::Read { path, source }),
    }
}

/// The certificate chain and key of `dir`.
pub fn load(dir: &Path) -> Result<CertifiedKey, TlsError> {
    let (cert_pem, cert_path) = read(dir.join(CERT_FILE))?;
    let (key_pem, key_path) = read(dir.join(KEY_FILE))?;
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&cert_pem)
        .filter_map(Result::ok)
        .collect();
    if chain.is_empty() {
        return Err(TlsError::NoCertificate { path: cert_path });
    }
    let key = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|e| TlsError::Key {
        path: key_path.clone(),
        reason: e.to_string(),
    })?;
    let signing = any_supported_type(&key).map_err(|e| TlsError::Key {
        path: key_path,
        reason: e.to_string(),
    })?;
    Ok(CertifiedKey::new(chain, signing))
}

/// A self-signed certificate for `names` (DNS names or IP addresses), with a fresh key.
pub fn self_signed(names: Vec<String>) -> Result<CertifiedKey, TlsError> {
    let made = rcgen::generate_simple_self_signed(names)?;
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(made.signing_key.serialize_der()));
    let signing = any_supported_type(&key).map_err(|e| TlsError::Key {
        path: PathBuf::from("(generated)"),
        reason: e.to_string(),
    })?;
    Ok(CertifiedKey::new(vec![made.cert.der().clone()], signing))
}

/// The names a generated certificate is made for: this host's name and the loopback addresses.
pub fn default_names() -> Vec<String> {
    let mut names = vec!["localhost".to_owned(), "127.0.0.1".to_owned()];
    if let Ok(host) = std::env::var("HOSTNAME")
        && !host.is_empty()
    {
        names.push(host);
    }
    names
}

fn modified(dir: &Path) -> Option<(SystemTime, SystemTime)> {
    let time = |f: &str| {
        std::fs::metadata(dir.join(f))
            .and_then(|m| m.modified())
            .ok()
    };
    Some((time(CERT_FILE)?, time(KEY_FILE)?))
}

async fn reload(dir: PathBuf, current: Arc<Current>) {
    let mut last = modified(&dir);
    let mut every = tokio::time::interval(RELOAD_EVERY);
    every.tick().await;
    loop {
        every.tick().await;
        let now = modified(&dir);
        if now == last {
            continue;
        }
        match load(&dir) {
            Ok(key) => {
                *current.0.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(key);
                last = now;
                tracing::info!(dir = %dir.display(), "metrics certificate reloaded");
            }
            Err(e) => {
                tracing::warn!(error = %e, "metrics certificate changed but does not load; keeping the old one");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_generated_certificate_loads_back_from_a_directory() {
        let made =
            rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).expect("generates");
        let dir = std::env::temp_dir().join(format!("event-series-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        std::fs::write(dir.join(CERT_FILE), made.cert.pem()).expect("writes");
        std::fs::write(dir.join(KEY_FILE), made.signing_key.serialize_pem()).expect("writes");
        let loaded = load(&dir).expect("loads");
        assert_eq!(loaded.cert.len(), 1);
        assert_eq!(loaded.cert[0], *made.cert.der());

        std::fs::write(dir.join(KEY_FILE), "not a key").expect("writes");
        let err = load(&dir).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(err.contains("tls.key"), "{err}");
        std::fs::remove_file(dir.join(CERT_FILE)).expect("removes");
        let err = load(&dir).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(err.contains("tls.crt"), "{err}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_self_signed_certificate_is_made_for_the_names() {
        let key = self_signed(default_names()).expect("generates");
        assert_eq!(key.cert.len(), 1);
    }
}
