//! What the fault tests share: an operator process that can be killed at any moment (also before it
//! is ready), loops of raw events written straight to the API (retrying through 429s, 5xx and a dead
//! apiserver), the client-go emitter in the background, and the per-key check against the raw events.

use crate::{LOGS, OPERATOR};
use anyhow::{Context, Result};
use event_series_test_support::emitter::Emitter;
use event_series_test_support::raw::{kubelet_backoff, occurrence_patch};
use k8s_openapi::api::core::v1::Event as CoreEvent;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ListParams, PatchParams, PostParams};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

pub use event_series_test_support::cluster::{count, series, state};
/// One `event-series run` process (`OPERATOR.spawn` returns at once, `launch_op` once it is ready).
pub use event_series_test_support::process::Operator as Op;
pub use event_series_test_support::writes::WriteStats;
use event_series_test_support::writes::until_accepted;

/// A small deterministic generator (xorshift64*), so that a run is reproducible from its printed seed.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.max(1))
    }

    /// The seed from `FAULTS_SEED`, else from the clock; printed so a failure can be replayed.
    pub fn from_env(what: &str) -> Rng {
        let seed = std::env::var("FAULTS_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(1, |d| d.as_nanos() as u64)
            });
        println!("{what}: FAULTS_SEED={seed}");
        Rng::new(seed)
    }

    pub fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Uniform in `[lo, hi)` milliseconds.
    pub fn millis(&mut self, lo: u64, hi: u64) -> Duration {
        Duration::from_millis(lo + self.next() % (hi - lo).max(1))
    }
}

/// Seconds from an environment variable, else `default`.
pub fn env_secs(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

/// client-go's legacy recorder (`tools/record`, as the kubelet uses it) crash-looping `pods` Pods in
/// the background, 24 occurrences each spread over the first 80 % of `storm`: slow enough to stay
/// within its spam filter's burst (25), so that no loop has a 5-minute hole.
pub fn legacy_crash_loops(
    kubeconfig: &Path,
    ns: &str,
    pods: u32,
    storm: Duration,
    seed: u64,
) -> Result<Emitter> {
    let rate = format!("{:.3}", 24.0 / (storm.as_secs_f64() * 0.8));
    let (pods, seed) = (pods.to_string(), seed.to_string());
    let args = [
        "--recorder",
        "legacy",
        "--scenario",
        "crashloop",
        "--pods",
        &pods,
        "--rate",
        &rate,
        "--count",
        "24",
        "--seed",
        &seed,
    ];
    Emitter::spawn(kubeconfig, ns, LOGS, ns, &args)
}

/// A kubelet-style crash loop written straight to the API: raw event `<prefix>-<i>` about pod
/// `<prefix>-pod-<i>`, created with count 1 and patched with the next count every `period` (±20%)
/// until `stop`. Counts are absolute, so a patch retried after a lost answer cannot count twice.
/// Returns the count the loop reached.
#[allow(clippy::too_many_arguments)]
pub async fn crash_loop(
    client: kube::Client,
    ns: String,
    prefix: String,
    i: usize,
    period: Duration,
    stop: Instant,
    mut rng: Rng,
    stats: Arc<WriteStats>,
) -> Result<u64> {
    let api: Api<CoreEvent> = Api::namespaced(client, &ns);
    let name = format!("{prefix}-{i}");
    let pod = format!("{prefix}-pod-{i}");
    let hard = stop + Duration::from_secs(600);
    // A random phase, so that the loops do not write in step.
    tokio::time::sleep(rng.millis(0, period.as_millis() as u64 + 1)).await;
    let ev = kubelet_backoff(&ns, &name, &pod, 1);
    let pp = PostParams::default();
    until_accepted(&stats, hard, true, || api.create(&pp, &ev)).await?;
    let mut count = 1u64;
    let params = PatchParams::default();
    loop {
        let jitter = period.as_millis() as u64 / 5;
        let sleep = rng.millis(
            period.as_millis() as u64 - jitter,
            period.as_millis() as u64 + jitter + 1,
        );
        tokio::time::sleep(sleep).await;
        if Instant::now() >= stop {
            return Ok(count);
        }
        let occurred = Instant::now();
        let patch = occurrence_patch(count + 1);
        until_accepted(&stats, hard, false, || api.patch(&name, &params, &patch)).await?;
        let delay = occurred.elapsed().as_millis() as u64;
        stats.longest_delay_ms.fetch_max(delay, Ordering::Relaxed);
        count += 1;
    }
}

/// Starts `n` crash loops and returns their handles; loop `i` writes through `clients[i % len]`.
#[allow(clippy::too_many_arguments)]
pub fn crash_loops(
    clients: &[kube::Client],
    ns: &str,
    prefix: &str,
    n: usize,
    period: Duration,
    stop: Instant,
    rng: &mut Rng,
    stats: &Arc<WriteStats>,
) -> tokio::task::JoinSet<Result<(String, u64)>> {
    let mut set = tokio::task::JoinSet::new();
    for i in 0..n {
        let client = clients[i % clients.len()].clone();
        let (ns, prefix) = (ns.to_owned(), prefix.to_owned());
        let (rng, stats) = (Rng::new(rng.next()), stats.clone());
        set.spawn(async move {
            let pod = format!("{prefix}-pod-{i}");
            let count = crash_loop(client, ns, prefix, i, period, stop, rng, stats).await?;
            Ok((pod, count))
        });
    }
    set
}

/// `OPERATOR.launch` on a blocking thread: it waits for `/readyz` with plain sleeps, which must not hold
/// up the runtime the storm's tasks run on.
pub async fn launch_op(kubeconfig: &Path, log: &str, args: &[&str]) -> Result<Op> {
    let (kubeconfig, log) = (kubeconfig.to_owned(), log.to_owned());
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        OPERATOR.launch(&kubeconfig, &log, &args)
    })
    .await?
}

/// The storm the kill -9 and restart tests drive until `stop`: client-go's legacy recorder
/// crash-looping `pods` Pods, and 30 loops written straight to the API, two occurrences a second each.
pub struct Storm {
    pub emitter: Emitter,
    pub loops: tokio::task::JoinSet<Result<(String, u64)>>,
    pub stats: Arc<WriteStats>,
}

impl Storm {
    pub fn start(
        client: &kube::Client,
        kubeconfig: &Path,
        ns: &str,
        pods: u32,
        storm: Duration,
        stop: Instant,
        rng: &mut Rng,
    ) -> Result<Storm> {
        let emitter = legacy_crash_loops(kubeconfig, ns, pods, storm, rng.next() % 1_000_000)?;
        let stats = Arc::new(WriteStats::default());
        let loops = crash_loops(
            std::slice::from_ref(client),
            ns,
            "loop",
            30,
            Duration::from_millis(500),
            stop,
            rng,
            &stats,
        );
        Ok(Storm {
            emitter,
            loops,
            stats,
        })
    }
}

/// Waits for the loops and the emitter of a storm, and returns what the raw events in `ns` hold, after
/// checking that they hold exactly what the loops wrote and the emitter reports (a check of the storm
/// itself, before the operator's figures are compared with it).
pub async fn storm_truth(
    mut loops: tokio::task::JoinSet<Result<(String, u64)>>,
    emitter: Emitter,
    client: &kube::Client,
    ns: &str,
) -> Result<BTreeMap<(String, String), u64>> {
    let mut written = BTreeMap::new();
    while let Some(done) = loops.join_next().await {
        let (pod, count) = done??;
        written.insert(pod, count);
    }
    let emitted = tokio::task::spawn_blocking(move || emitter.wait()).await??;
    let truth = raw_truth(client, ns).await?;
    for (pod, count) in &written {
        let held = truth.get(&(pod.clone(), "BackOff".into()));
        anyhow::ensure!(
            held == Some(count),
            "raw events of {pod} hold {held:?}, the loop wrote {count}"
        );
    }
    for (key, api_count) in &emitted {
        anyhow::ensure!(
            truth.get(key) == Some(api_count),
            "{key:?}: emitter says {api_count}"
        );
    }
    Ok(truth)
}

/// Occurrences per (regarding name, reason) that the raw events in `ns` hold: what the operator must
/// end up with.
pub async fn raw_truth(client: &kube::Client, ns: &str) -> Result<BTreeMap<(String, String), u64>> {
    let api: Api<CoreEvent> = Api::namespaced(client.clone(), ns);
    let mut out = BTreeMap::new();
    let mut lp = ListParams::default()
        .labels("app.kubernetes.io/managed-by!=event-series")
        .limit(500);
    loop {
        let list = api.list(&lp).await?;
        for ev in &list.items {
            let count = ev
                .series
                .as_ref()
                .and_then(|s| s.count)
                .or(ev.count)
                .unwrap_or(1)
                .max(1) as u64;
            let key = (
                ev.involved_object.name.clone().unwrap_or_default(),
                ev.reason.clone().unwrap_or_default(),
            );
            *out.entry(key).or_default() += count;
        }
        match list.metadata.continue_ {
            Some(c) if !c.is_empty() => lp = lp.continue_token(&c),
            _ => break,
        }
    }
    Ok(out)
}

fn key_of(e: &Event) -> (String, String) {
    (
        e.regarding
            .as_ref()
            .and_then(|r| r.name.clone())
            .unwrap_or_default(),
        e.reason.clone().unwrap_or_default(),
    )
}

/// What the operator ended with, key by key.
#[derive(Debug)]
pub struct Outcome {
    pub keys: usize,
    pub occurrences: u64,
    pub objects: usize,
    /// Keys with more than one series object, and how many objects each.
    pub split: BTreeMap<(String, String), usize>,
    /// Keys whose series hold fewer (negative) or more occurrences than the raw events.
    pub wrong: BTreeMap<(String, String), i64>,
}

impl Outcome {
    pub fn lost(&self) -> i64 {
        self.wrong.values().filter(|d| **d < 0).map(|d| -d).sum()
    }
}

/// Waits (up to `timeout`) until every series object in `ns` is Finished and each key's series hold
/// exactly the occurrences of `truth`, then reports. On timeout, reports what there is.
pub async fn settle(
    client: &kube::Client,
    ns: &str,
    truth: &BTreeMap<(String, String), u64>,
    timeout: Duration,
) -> Result<Outcome> {
    let deadline = Instant::now() + timeout;
    loop {
        let objects = series(client, ns).await.context("listing series")?;
        let mut sums: BTreeMap<(String, String), (u64, usize)> = BTreeMap::new();
        for e in &objects {
            let s = sums.entry(key_of(e)).or_default();
            s.0 += count(e);
            s.1 += 1;
        }
        let mut wrong = BTreeMap::new();
        for (k, want) in truth {
            let got = sums.get(k).map_or(0, |s| s.0);
            if got != *want {
                wrong.insert(k.clone(), got as i64 - *want as i64);
            }
        }
        for (k, (got, _)) in &sums {
            if !truth.contains_key(k) {
                wrong.insert(k.clone(), *got as i64);
            }
        }
        let all_finished = objects.iter().all(|e| state(e) == "Finished");
        if (wrong.is_empty() && all_finished) || Instant::now() > deadline {
            let split = sums
                .iter()
                .filter(|(_, s)| s.1 > 1)
                .map(|(k, s)| (k.clone(), s.1))
                .collect();
            if !all_finished {
                let ongoing = objects.iter().filter(|e| state(e) != "Finished").count();
                println!("timed out with {ongoing} series not Finished");
            }
            return Ok(Outcome {
                keys: truth.len(),
                occurrences: truth.values().sum(),
                objects: objects.len(),
                split,
                wrong,
            });
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}
