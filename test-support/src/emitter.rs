//! client-go's own recorders as emitters: the Go program `tests/envtest/cmd/emitter` (built by
//! `hack/build-envtest.sh` into `target/envtest/bin/emitter`). It reports what the API ended up
//! holding of what it emitted: the ground truth the operator's counts are compared with.

use crate::repo_root;
use anyhow::{Context, Result, bail};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;

/// One line of the emitter's ground truth.
#[derive(Debug, Deserialize)]
pub struct Truth {
    pub regarding: Regarding,
    pub reason: String,
    pub api_count: u64,
}

#[derive(Debug, Deserialize)]
pub struct Regarding {
    pub name: String,
}

/// Builds the emitter when it is missing or stale (a no-op otherwise), once per test process.
fn built() -> Result<PathBuf> {
    static BUILT: OnceLock<Result<(), String>> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let status = Command::new("bash")
                .arg(repo_root().join("hack/build-envtest.sh"))
                .arg("emitter")
                .status()
                .map_err(|e| format!("running hack/build-envtest.sh: {e}"))?;
            if !status.success() {
                return Err(format!("building the emitter failed: {status}"));
            }
            Ok(())
        })
        .clone()
        .map_err(anyhow::Error::msg)?;
    Ok(repo_root().join("target/envtest/bin/emitter"))
}

/// Runs the emitter to completion against the cluster behind `kubeconfig`, in namespace `ns`, and
/// returns its ground truth.
pub fn emit_on(kubeconfig: &Path, ns: &str, args: &[&str]) -> Result<Vec<Truth>> {
    let bin = built()?;
    let out = Command::new(&bin)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(["--namespace", ns])
        .args(args)
        .stderr(Stdio::inherit())
        .output()
        .with_context(|| format!("running {}", bin.display()))?;
    if !out.status.success() {
        bail!("emitter failed: {}", out.status);
    }
    Ok(serde_json::from_slice(&out.stdout)?)
}

/// The emitter running in the background, its ground truth written to a file; killed when dropped.
pub struct Emitter {
    child: Child,
    output: PathBuf,
}

impl Emitter {
    /// Starts the emitter in namespace `ns`: its ground truth goes to `<logs>/<log>.truth.json`, its
    /// stderr to `<logs>/<log>.emitter.log` (`logs` relative to the repository root).
    pub fn spawn(
        kubeconfig: &Path,
        ns: &str,
        logs: &str,
        log: &str,
        args: &[&str],
    ) -> Result<Emitter> {
        let bin = built()?;
        let dir = repo_root().join(logs);
        std::fs::create_dir_all(&dir)?;
        let output = dir.join(format!("{log}.truth.json"));
        let _ = std::fs::remove_file(&output);
        let err = std::fs::File::create(dir.join(format!("{log}.emitter.log")))?;
        let child = Command::new(bin)
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args(["--namespace", ns, "--output"])
            .arg(&output)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(err)
            .spawn()?;
        Ok(Emitter { child, output })
    }

    /// Waits for the emitter and returns its ground truth: occurrences per (regarding name, reason).
    pub fn wait(mut self) -> Result<BTreeMap<(String, String), u64>> {
        let status = self.child.wait()?;
        if !status.success() {
            bail!("emitter failed: {status}");
        }
        let truth: Vec<Truth> = serde_json::from_slice(&std::fs::read(&self.output)?)?;
        Ok(truth
            .into_iter()
            .map(|t| ((t.regarding.name, t.reason), t.api_count))
            .collect())
    }
}

impl Drop for Emitter {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}
