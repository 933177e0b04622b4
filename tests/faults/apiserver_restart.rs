//! The control plane restarted under the operator's feet, mid-storm (Input, Writes): kube-apiserver
//! alone, then etcd and kube-apiserver killed with SIGKILL, then both stopped for longer. The data, the
//! port and the certificates survive, as in a real control-plane restart; the operator is never
//! touched and must recover on its own, with exact counts.

use crate::support::*;
use anyhow::{Context, Result, bail, ensure};
use event_series_test_support::cluster::{Dedicated, TestNamespace, client_for};
use event_series_test_support::repo_root;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// One server of a harness cluster (`hack/cluster-up.sh`), restarted with the very command line it
/// was started with, so that it keeps its data dir, ports and certificates.
struct Server {
    dir: PathBuf,
    name: &'static str,
}

impl Server {
    fn pid(&self) -> Result<u32> {
        let text = std::fs::read_to_string(self.dir.join(format!("{}.pid", self.name)))?;
        Ok(text.trim().parse()?)
    }

    fn argv(pid: u32) -> Result<Vec<String>> {
        let raw = std::fs::read(format!("/proc/{pid}/cmdline"))?;
        Ok(raw
            .split(|b| *b == 0)
            .filter(|a| !a.is_empty())
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect())
    }

    /// Stops the server with `signal`, waits until it is gone, and returns its command line.
    fn stop(&self, signal: &str) -> Result<Vec<String>> {
        let pid = self.pid()?;
        let argv = Server::argv(pid).with_context(|| format!("{} pid {pid}", self.name))?;
        ensure!(
            argv.first()
                .is_some_and(|a| a.ends_with(if self.name == "etcd" {
                    "/etcd"
                } else {
                    "/kube-apiserver"
                })),
            "pid {pid} is not our {}: {argv:?}",
            self.name
        );
        let gone = |pid: u32| std::fs::read_link(format!("/proc/{pid}/exe")).is_err();
        let wait = |limit: Duration| {
            let deadline = Instant::now() + limit;
            // Gone, or a zombie (no exe link) waiting for its parent (init) to reap it.
            while !gone(pid) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(50));
            }
            gone(pid)
        };
        std::process::Command::new("kill")
            .args([signal, &pid.to_string()])
            .status()?;
        // As hack/cluster-down.sh: a server that ignores TERM for long (the apiserver drains its
        // requests for up to a minute) is killed.
        if !wait(Duration::from_secs(10)) {
            println!(
                "{} (pid {pid}) still shutting down after 10s: KILL",
                self.name
            );
            std::process::Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status()?;
            if !wait(Duration::from_secs(30)) {
                bail!("{} (pid {pid}) did not stop", self.name);
            }
        }
        Ok(argv)
    }

    /// Starts `argv` detached, as `hack/cluster-up.sh` does, appending to the server's log.
    fn start(&self, argv: &[String]) -> Result<()> {
        let log = self.dir.join(format!("{}.log", self.name));
        let out = std::process::Command::new("bash")
            .arg("-c")
            .arg(r#"log="$1"; shift; setsid nohup "$@" </dev/null >>"$log" 2>&1 & echo $!"#)
            .arg("restart")
            .arg(&log)
            .args(argv)
            .output()?;
        ensure!(out.status.success(), "starting {} failed", self.name);
        let pid = String::from_utf8(out.stdout)?.trim().to_owned();
        std::fs::write(
            self.dir.join(format!("{}.pid", self.name)),
            format!("{pid}\n"),
        )?;
        Ok(())
    }
}

/// Waits until the apiserver answers again.
async fn wait_serving(client: &kube::Client) -> Result<Duration> {
    let started = Instant::now();
    let deadline = started + Duration::from_secs(180);
    loop {
        if client.apiserver_version().await.is_ok()
            && client
                .list_core_api_resources("v1")
                .await
                .is_ok_and(|r| !r.resources.is_empty())
        {
            return Ok(started.elapsed());
        }
        if Instant::now() > deadline {
            bail!("the apiserver did not come back");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// How one restart goes.
struct Fault {
    at: Duration,
    etcd: bool,
    signal: &'static str,
    down: Duration,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "slow: run by just faults"]
async fn apiserver_and_etcd_restarts_mid_storm_need_no_manual_step() -> Result<()> {
    let storm = Duration::from_secs(env_secs("FAULTS_RESTART_STORM_SECONDS", 160));
    let mut rng = Rng::from_env("apiserver restart");
    let cluster = Dedicated::start("faults-apiserver", &[])?;
    let dir = repo_root().join("target/envtest-e2e-faults-apiserver");
    let apiserver = Server {
        dir: dir.clone(),
        name: "apiserver",
    };
    let etcd = Server {
        dir: dir.clone(),
        name: "etcd",
    };
    let client = client_for(&cluster.kubeconfig).await?;
    let ns = TestNamespace::new(&client, "faults-apiserver").await?;
    let kubeconfig = cluster.kubeconfig.clone();
    let flags = [
        "--namespace",
        &ns.name,
        "--finish-after",
        "90s",
        "--series-window",
        "90s",
        "--heartbeat-interval",
        "3s",
    ];
    let op = launch_op(&kubeconfig, &ns.name, &flags).await?;
    let started = Instant::now();
    let stop = started + storm;
    let Storm {
        emitter,
        loops,
        stats,
    } = Storm::start(&client, &kubeconfig, &ns.name, 8, storm, stop, &mut rng)?;

    let third = storm / 5;
    let faults = [
        Fault {
            at: third,
            etcd: false,
            signal: "-TERM",
            down: Duration::from_secs(2),
        },
        Fault {
            at: third * 2,
            etcd: true,
            signal: "-KILL",
            down: Duration::from_secs(5),
        },
        Fault {
            at: third * 3,
            etcd: true,
            signal: "-TERM",
            down: Duration::from_secs(20),
        },
    ];
    let restarts_before = op.metric("event_series_watch_restarts_total");
    for f in &faults {
        tokio::time::sleep_until((started + f.at).into()).await;
        let t = Instant::now();
        let api_argv = tokio::task::block_in_place(|| apiserver.stop(f.signal))?;
        let etcd_argv = if f.etcd {
            Some(tokio::task::block_in_place(|| etcd.stop(f.signal))?)
        } else {
            None
        };
        tokio::time::sleep(f.down).await;
        if let Some(argv) = etcd_argv {
            etcd.start(&argv)?;
        }
        apiserver.start(&api_argv)?;
        let back = wait_serving(&client).await?;
        println!(
            "{} apiserver{} at {:.0}s: down {:.1}s (serving {:.1}s after the start)",
            f.signal,
            if f.etcd { " and etcd" } else { "" },
            (t - started).as_secs_f64(),
            t.elapsed().as_secs_f64(),
            back.as_secs_f64()
        );
    }

    let truth = storm_truth(loops, emitter, &client, &ns.name).await?;

    let outcome = settle(&client, &ns.name, &truth, Duration::from_secs(400)).await?;
    let watch_restarts = op.metric("event_series_watch_restarts_total") - restarts_before;
    let relists = op.metric("event_series_watch_relists_total");
    println!(
        "apiserver restarts: {} restarts, {} keys, {} occurrences ({}), {} series objects, split keys \
         {:?}, wrong counts {:?}, lost {}; operator: {watch_restarts} watch restarts, {relists} relists, \
         create 5xx/refused {}",
        faults.len(),
        outcome.keys,
        outcome.occurrences,
        stats.summary(),
        outcome.objects,
        outcome.split,
        outcome.wrong,
        outcome.lost(),
        op.metric("event_series_dropped_total{reason=\"rejected\"}")
    );
    ensure!(
        outcome.wrong.is_empty(),
        "counts differ: {:?}",
        outcome.wrong
    );
    ensure!(
        outcome.split.is_empty(),
        "keys with more than one object: {:?}",
        outcome.split
    );
    let mut op = op;
    ensure!(op.alive(), "the operator survived without a restart");
    ensure!(
        watch_restarts >= faults.len() as f64,
        "the watch was re-established ({watch_restarts})"
    );
    ensure!(matches!(op.get("/readyz"), Some((200, _))), "ready again");
    drop(op);
    ns.cleanup().await
}
