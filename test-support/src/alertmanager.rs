//! A real Alertmanager (built from its Go module by `hack/tools.sh alertmanager`) on loopback, whose
//! one receiver is a webhook served by the test itself: what a team's Slack or pager would get is
//! what [`Webhook::notifications`] returns.

use crate::repo_root;
use anyhow::{Context, Result, bail};
use serde_json::Value;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The test's webhook receiver: every notification Alertmanager sends, as JSON.
pub struct Webhook {
    pub addr: SocketAddr,
    received: Arc<Mutex<Vec<Value>>>,
}

impl Webhook {
    pub fn start() -> Result<Webhook> {
        Webhook::start_on([127, 0, 0, 1].into())
    }

    /// On `ip`: loopback, or the node's bridge address for Pods to reach.
    pub fn start_on(ip: std::net::IpAddr) -> Result<Webhook> {
        let listener = TcpListener::bind((ip, 0))?;
        let addr = listener.local_addr()?;
        let received = Arc::new(Mutex::new(Vec::new()));
        let sink = received.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming().flatten() {
                if let Some(v) = read_post(conn) {
                    sink.lock().unwrap_or_else(|e| e.into_inner()).push(v);
                }
            }
        });
        Ok(Webhook { addr, received })
    }

    pub fn url(&self) -> String {
        format!("http://{}/", self.addr)
    }

    /// Every notification so far, oldest first.
    pub fn notifications(&self) -> Vec<Value> {
        self.received
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// `(status, alert)` of every alert of every notification whose labels include `labels`:
    /// status `firing` or `resolved`.
    pub fn alerts_with(&self, labels: &[(&str, &str)]) -> Vec<(String, Value)> {
        let mut out = Vec::new();
        for n in self.notifications() {
            for a in n["alerts"].as_array().into_iter().flatten() {
                if labels.iter().all(|(k, v)| a["labels"][k] == *v) {
                    out.push((a["status"].as_str().unwrap_or("").to_owned(), a.clone()));
                }
            }
        }
        out
    }
}

/// One HTTP/1.1 POST: its JSON body, answered 200.
fn read_post(mut conn: TcpStream) -> Option<Value> {
    conn.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    let mut reader = BufReader::new(conn.try_clone().ok()?);
    let mut length = 0usize;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).ok()? == 0 {
            return None;
        }
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        if let Some((k, v)) = line.split_once(':')
            && k.eq_ignore_ascii_case("content-length")
        {
            length = v.trim().parse().ok()?;
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body).ok()?;
    let _ = conn.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
    serde_json::from_slice(&body).ok()
}

/// An Alertmanager process: every alert its own group (`group_by: ['...']`), notified after 1 s,
/// resolved ones within 2 s, repeated only after 4 h, so that every notification a test sees is
/// one Alertmanager sent for a change, never a repeat.
pub struct Alertmanager {
    pub addr: SocketAddr,
    dir: PathBuf,
    child: Option<Child>,
    /// Served over HTTPS with basic auth ([`Alertmanager::start_secure`]).
    secure: bool,
}

/// The basic-auth user and password of [`Alertmanager::start_secure`].
pub const USER: &str = "ops";
pub const PASSWORD: &str = "s3cret";
/// bcrypt of [`PASSWORD`], as Alertmanager's web config takes it.
const PASSWORD_BCRYPT: &str = "$2b$12$kiQGjXyOx5dOtsbcolNkZOiuOVLdM9bUIcNs1GZKkZoZ69EUmgXS.";

impl Alertmanager {
    pub fn start(webhook: &Webhook, name: &str) -> Result<Alertmanager> {
        Alertmanager::start_on([127, 0, 0, 1].into(), webhook, name)
    }

    /// Listening on `ip` (loopback, or the node's bridge address for the operator's Pods).
    pub fn start_on(ip: std::net::IpAddr, webhook: &Webhook, name: &str) -> Result<Alertmanager> {
        let dir = repo_root()
            .join("target/test-alertmanager")
            .join(format!("{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("data"))?;
        std::fs::write(
            dir.join("alertmanager.yml"),
            format!(
                "route:\n  receiver: webhook\n  group_by: ['...']\n  group_wait: 1s\n  \
                 group_interval: 2s\n  repeat_interval: 4h\nreceivers:\n- name: webhook\n  \
                 webhook_configs:\n  - url: {}\n    send_resolved: true\n",
                webhook.url()
            ),
        )?;
        let port = crate::process::free_port_on(ip)?;
        let mut am = Alertmanager {
            addr: SocketAddr::new(ip, port),
            dir,
            child: None,
            secure: false,
        };
        am.resume()?;
        Ok(am)
    }

    /// On loopback over HTTPS (a certificate for 127.0.0.1 from a CA of its own, in
    /// [`Alertmanager::ca_file`]) with basic auth ([`USER`], [`PASSWORD`]).
    pub fn start_secure(webhook: &Webhook, name: &str) -> Result<Alertmanager> {
        let mut am = Alertmanager::start(webhook, name)?;
        am.stop()?;
        let ca_key = rcgen::KeyPair::generate()?;
        let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new())?;
        ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        // Distinct names: a leaf whose issuer name is its own looks self-signed to a verifier.
        ca_params.distinguished_name = common_name("event-series test CA");
        let ca = rcgen::CertifiedIssuer::self_signed(ca_params, ca_key)?;
        let key = rcgen::KeyPair::generate()?;
        let mut leaf = rcgen::CertificateParams::new(vec!["127.0.0.1".to_owned()])?;
        leaf.distinguished_name = common_name("alertmanager");
        let cert = leaf.signed_by(&key, &*ca)?;
        std::fs::write(am.ca_file(), ca.pem())?;
        std::fs::write(am.dir.join("tls.crt"), cert.pem())?;
        std::fs::write(am.dir.join("tls.key"), key.serialize_pem())?;
        std::fs::write(
            am.dir.join("web.yml"),
            format!(
                "tls_server_config:\n  cert_file: {}\n  key_file: {}\nbasic_auth_users:\n  {USER}: '{PASSWORD_BCRYPT}'\n",
                am.dir.join("tls.crt").display(),
                am.dir.join("tls.key").display()
            ),
        )?;
        am.secure = true;
        am.resume()?;
        Ok(am)
    }

    /// The CA that signed its certificate (when served over HTTPS).
    pub fn ca_file(&self) -> PathBuf {
        self.dir.join("ca.pem")
    }

    pub fn url(&self) -> String {
        let scheme = if self.secure { "https" } else { "http" };
        format!("{scheme}://{}", self.addr)
    }

    /// Starts the process (again, on the same port and data: its notification log survives).
    pub fn resume(&mut self) -> Result<()> {
        let bin = repo_root().join("target/tools/bin/alertmanager");
        if !bin.exists() {
            bail!(
                "{} is missing: bash hack/tools.sh alertmanager",
                bin.display()
            );
        }
        let log = std::fs::File::create(self.dir.join("alertmanager.log"))?;
        let mut cmd = Command::new(&bin);
        // SAFETY: prctl in the child before exec, async-signal-safe: it dies with the thread that
        // started it, even when the test process is killed.
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(&mut cmd, || {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        let child = cmd
            .arg(format!(
                "--config.file={}",
                self.dir.join("alertmanager.yml").display()
            ))
            .arg(format!(
                "--storage.path={}",
                self.dir.join("data").display()
            ))
            .arg(format!("--web.listen-address={}", self.addr))
            // No cluster: no gossip port, no peers, no traffic beyond loopback.
            .arg("--cluster.listen-address=")
            .args(
                self.secure
                    .then(|| format!("--web.config.file={}", self.dir.join("web.yml").display())),
            )
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .with_context(|| bin.display().to_string())?;
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if self.get("/-/ready").is_some_and(|(code, _)| code == 200) {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        bail!(
            "alertmanager not ready in 30 s (log {})",
            self.dir.join("alertmanager.log").display()
        )
    }

    /// SIGTERM (it saves its notification log), and waits for the exit.
    pub fn stop(&mut self) -> Result<()> {
        if let Some(mut child) = self.child.take() {
            // SAFETY: kill(2) on our own child's pid.
            unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
            child.wait()?;
        }
        Ok(())
    }

    /// The alerts it holds now (`GET /api/v2/alerts`).
    pub fn alerts(&self) -> Result<Vec<Value>> {
        let (code, body) = self.get("/api/v2/alerts").context("GET /api/v2/alerts")?;
        if code != 200 {
            bail!("GET /api/v2/alerts: {code} {body}");
        }
        Ok(serde_json::from_str::<Vec<Value>>(&body)?)
    }
}

impl Alertmanager {
    /// A GET: over HTTPS with the CA and basic auth (by curl), or plain.
    fn get(&self, path: &str) -> Option<(u16, String)> {
        if !self.secure {
            return get(self.addr, path);
        }
        let out = Command::new("curl")
            .args([
                "-sS",
                "--max-time",
                "10",
                "-w",
                "\n%{http_code}",
                "--cacert",
            ])
            .arg(self.ca_file())
            .args(["-u", &format!("{USER}:{PASSWORD}")])
            .arg(format!("{}{path}", self.url()))
            .output()
            .ok()?;
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let (body, code) = text.rsplit_once('\n')?;
        Some((code.trim().parse().ok()?, body.to_owned()))
    }
}

impl Drop for Alertmanager {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn common_name(name: &str) -> rcgen::DistinguishedName {
    let mut dn = rcgen::DistinguishedName::new();
    dn.push(rcgen::DnType::CommonName, name);
    dn
}

fn get(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    let code = text.split_whitespace().nth(1)?.parse().ok()?;
    let (head, body) = text.split_once("\r\n\r\n")?;
    let body = if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        unchunk(body)
    } else {
        body.to_owned()
    };
    Some((code, body))
}

fn unchunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let Ok(n) = usize::from_str_radix(size.trim(), 16) else {
            break;
        };
        if n == 0 || rest.len() < n {
            break;
        }
        out.push_str(&rest[..n]);
        body = rest[n..].trim_start_matches("\r\n");
    }
    out
}
