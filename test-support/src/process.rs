//! One `event-series run` process, as the end-to-end and the fault tests start it: logs in
//! `<logs>/<name>.log`, the metrics and the health servers on free loopback ports (metrics over plain
//! HTTP unless the test asks for the secure default), SIGKILL when dropped, so that a failing test
//! leaves nothing running.

use crate::repo_root;
use anyhow::{Result, bail};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How a suite runs the operator: cargo tells only the package's own integration tests where it
/// built the binary (`env!("CARGO_BIN_EXE_event-series")`), and each suite keeps its logs apart.
#[derive(Clone, Copy, Debug)]
pub struct Launcher {
    /// The `event-series` binary.
    pub bin: &'static str,
    /// Where the logs go, relative to the repository root.
    pub logs: &'static str,
}

impl Launcher {
    /// `event-series run` with exactly `args` (plus free metrics and health addresses, metrics over
    /// plain HTTP), its log `<logs>/<log>.log`; returns at once, while it may still be recovering.
    pub fn spawn(&self, kubeconfig: &Path, log: &str, args: &[&str]) -> Result<Operator> {
        self.spawn_with(kubeconfig, log, args, None)
    }

    /// [`Launcher::launch`] with the secure metrics default: HTTPS and a checked bearer token
    /// (`Operator::metrics` is then `https://...`).
    pub fn launch_secure(&self, kubeconfig: &Path, log: &str, args: &[&str]) -> Result<Operator> {
        let mut op = self.start(kubeconfig, log, args, None, true)?;
        op.wait_ready(Duration::from_secs(120))?;
        Ok(op)
    }

    /// [`Launcher::spawn`], with its soft and hard `RLIMIT_NOFILE` set to `nofile` when given: what
    /// `ulimit -n` (a container runtime's default of 1,024, say) imposes, so that a test can run the
    /// operator out of file descriptors without lowering the limit of the test process itself.
    pub fn spawn_with(
        &self,
        kubeconfig: &Path,
        log: &str,
        args: &[&str],
        nofile: Option<u64>,
    ) -> Result<Operator> {
        self.start(kubeconfig, log, args, nofile, false)
    }

    fn start(
        &self,
        kubeconfig: &Path,
        log: &str,
        args: &[&str],
        nofile: Option<u64>,
        secure: bool,
    ) -> Result<Operator> {
        let free = || free_port().map(|port| format!("127.0.0.1:{port}"));
        let (addr, health) = (free()?, free()?);
        let dir = repo_root().join(self.logs);
        std::fs::create_dir_all(&dir)?;
        let log_path = dir.join(format!("{log}.log"));
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)?;
        let mut command = Command::new(self.bin);
        command
            .args(["run", "--metrics-addr", &addr, "--health-addr", &health])
            .args(if secure {
                &[][..]
            } else {
                &["--metrics-secure=false"][..]
            })
            .args(args)
            .env("KUBECONFIG", kubeconfig)
            .env("RUST_LOG", "info,event_series=debug")
            .stdin(Stdio::null())
            .stdout(file.try_clone()?)
            .stderr(file);
        if let Some(n) = nofile {
            let limit = libc::rlimit {
                rlim_cur: n as libc::rlim_t,
                rlim_max: n as libc::rlim_t,
            };
            // SAFETY: the hook runs in the forked child before exec; it makes one async-signal-safe
            // system call and allocates nothing (`last_os_error` only reads errno).
            unsafe {
                command.pre_exec(move || {
                    if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) == 0 {
                        Ok(())
                    } else {
                        Err(std::io::Error::last_os_error())
                    }
                });
            }
        }
        let child = command.spawn()?;
        Ok(Operator {
            child,
            metrics: format!("{}://{addr}", if secure { "https" } else { "http" }),
            health: format!("http://{health}"),
            log: log_path,
        })
    }

    /// [`Launcher::spawn`], then waits until `/readyz` answers 200.
    pub fn launch(&self, kubeconfig: &Path, log: &str, args: &[&str]) -> Result<Operator> {
        self.launch_with(kubeconfig, log, args, None)
    }

    /// [`Launcher::spawn_with`], then waits until `/readyz` answers 200.
    pub fn launch_with(
        &self,
        kubeconfig: &Path,
        log: &str,
        args: &[&str],
        nofile: Option<u64>,
    ) -> Result<Operator> {
        let mut op = self.spawn_with(kubeconfig, log, args, nofile)?;
        op.wait_ready(Duration::from_secs(120))?;
        Ok(op)
    }
}

/// A running operator, killed when dropped.
pub struct Operator {
    child: Child,
    /// `http://127.0.0.1:<port>` of its metrics server (`https://` when launched secure).
    pub metrics: String,
    /// `http://127.0.0.1:<port>` of its health server (`/healthz`, `/readyz`).
    pub health: String,
    pub log: PathBuf,
}

impl Operator {
    /// GET one path over plain HTTP: `/metrics` from the metrics server (launched open), anything
    /// else from the health server. Status code and body.
    pub fn get(&self, path: &str) -> Option<(u16, String)> {
        use std::io::{Read, Write};
        let base = if path == "/metrics" {
            &self.metrics
        } else {
            &self.health
        };
        let addr = base.trim_start_matches("http://");
        let mut s = std::net::TcpStream::connect(addr).ok()?;
        s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
        write!(
            s,
            "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        )
        .ok()?;
        let mut text = String::new();
        s.read_to_string(&mut text).ok()?;
        let code = text.split_whitespace().nth(1)?.parse().ok()?;
        let body = text.split("\r\n\r\n").nth(1).unwrap_or("").to_owned();
        Some((code, body))
    }

    /// Until `/readyz` answers 200; fails at once if the process exits.
    fn wait_ready(&mut self, timeout: Duration) -> Result<()> {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Some(status) = self.child.try_wait()? {
                bail!(
                    "operator exited before it was ready: {status} (log {})",
                    self.log.display()
                );
            }
            if matches!(self.get("/readyz"), Some((200, _))) {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        bail!(
            "operator not ready within {timeout:?} (log {})",
            self.log.display()
        )
    }

    /// Its process id (for `/proc/<pid>/...`).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Whether the process still runs.
    pub fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// The value of one metric line (exact name with labels), 0 when absent.
    pub fn metric(&self, name: &str) -> f64 {
        self.get("/metrics")
            .and_then(|(_, body)| {
                body.lines()
                    .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
            })
            .unwrap_or(0.0)
    }

    /// SIGKILL: no flush, no goodbye.
    pub fn kill9(mut self) -> Result<()> {
        self.child.kill()?;
        self.child.wait()?;
        Ok(())
    }

    /// SIGTERM, and the exit status.
    pub fn terminate(mut self) -> Result<std::process::ExitStatus> {
        self.signal_term()?;
        Ok(self.child.wait()?)
    }

    /// Sends SIGTERM and returns at once.
    pub fn signal_term(&mut self) -> Result<()> {
        Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()?;
        Ok(())
    }

    /// Waits up to `timeout` for the process to exit on its own: its status and when it was seen to
    /// exit (within 20 ms), or `None` if it still runs.
    pub fn wait_exit(
        &mut self,
        timeout: Duration,
    ) -> Result<Option<(std::process::ExitStatus, std::time::SystemTime)>> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait()? {
                return Ok(Some((status, std::time::SystemTime::now())));
            }
            if Instant::now() > deadline {
                return Ok(None);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The log so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Operator {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A loopback port free now, for a process the harness starts to bind. Taken below Linux's ephemeral range (32768
/// and up), from which every outgoing connection on the machine takes its local port: a port found
/// there by binding port 0 and released could be taken by some client's connection before the
/// operator binds it (a CI run failed `binding --metrics-addr ...: Address already in use`). Ports
/// are handed out in turn from an offset of this process, so two test processes rarely try the same;
/// the scripts' clusters take theirs from 12000-19999 (`free_ports`, hack/common.sh).
pub fn free_port() -> Result<u16> {
    free_port_on(std::net::Ipv4Addr::LOCALHOST.into())
}

/// [`free_port`] on the address `ip`.
pub fn free_port_on(ip: std::net::IpAddr) -> Result<u16> {
    use std::sync::atomic::{AtomicU32, Ordering};
    const FIRST: u32 = 20_000;
    const SPAN: u32 = 12_000;
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let offset = std::process::id() % 97 * 120;
    for _ in 0..SPAN {
        let port = FIRST + (offset + NEXT.fetch_add(1, Ordering::Relaxed)) % SPAN;
        let port = u16::try_from(port)?;
        if std::net::TcpListener::bind((ip, port)).is_ok() {
            return Ok(port);
        }
    }
    bail!("no free loopback port between {FIRST} and {}", FIRST + SPAN)
}

#[cfg(test)]
mod tests {
    #[test]
    fn free_ports_are_below_the_ephemeral_range_and_differ() {
        let (a, b) = (super::free_port().unwrap(), super::free_port().unwrap());
        assert_ne!(a, b);
        for port in [a, b] {
            assert!((20_000..32_000).contains(&port), "{port}");
            std::net::TcpListener::bind(("127.0.0.1", port)).unwrap();
        }
    }
}
