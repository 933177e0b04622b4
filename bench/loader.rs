//! Raw core/v1 Event load for the end-to-end benchmarks in `bench/` (an example target,
//! `cargo build --release --example bench-loader`; never run by `just test`).
//!
//! ```text
//! bench-loader seed   --count N [--first I] [--namespaces M]   N legacy events, each already counting 2
//!                                                             recent occurrences of its own Pod, so each
//!                                                             becomes a series at once (SPEC Output)
//! bench-loader filler --count N [--rate R]                    N events labelled managed-by=event-series:
//!                                                             writes the operator's watch filters out
//! bench-loader rate   --rate R --duration S [--keys K]        R raw event changes per second for S s:
//!                                                             new-style events (eventTime with
//!                                                             microseconds), one object per key, each
//!                                                             change a merge patch of series.count and
//!                                                             series.lastObservedTime = now
//! ```
//! Common: `--concurrency C` requests in flight (default 64). Kubeconfig: KUBECONFIG. Prints a JSON
//! summary (requests done, failed, achieved rate).

use anyhow::Context;
use clap::{Parser, Subcommand};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Event, EventSeries, EventSource, Namespace, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams, PostParams};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

#[derive(Debug, Parser)]
struct Args {
    /// Requests in flight.
    #[arg(long, default_value_t = 64, global = true)]
    concurrency: usize,
    #[command(subcommand)]
    mode: Mode,
}

#[derive(Debug, Subcommand)]
enum Mode {
    /// Legacy events that each already count 2 recent occurrences (one series each).
    Seed {
        #[arg(long)]
        count: u64,
        /// Index of the first Pod (to add more series to an earlier seed).
        #[arg(long, default_value_t = 0)]
        first: u64,
        /// Spread over this many namespaces bench-0, bench-1, ...
        #[arg(long, default_value_t = 10)]
        namespaces: u64,
    },
    /// Events the operator's watch filters out (label app.kubernetes.io/managed-by=event-series).
    Filler {
        #[arg(long)]
        count: u64,
        /// Writes per second (default: as fast as the apiserver answers).
        #[arg(long)]
        rate: Option<f64>,
    },
    /// A sustained rate of raw event changes (new-style events, merge patches of their series).
    Rate {
        /// Changes per second.
        #[arg(long)]
        rate: f64,
        /// Seconds.
        #[arg(long)]
        duration: f64,
        /// Raw event objects (one key each) the changes rotate over.
        #[arg(long, default_value_t = 1000)]
        keys: u64,
        #[arg(long, default_value = "ingest")]
        namespace: String,
    },
}

async fn ensure_namespace(client: &kube::Client, name: &str) -> anyhow::Result<()> {
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

fn pod_ref(ns: &str, name: &str, i: u64) -> ObjectReference {
    ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Pod".into()),
        namespace: Some(ns.into()),
        name: Some(name.into()),
        uid: Some(format!("00000000-0000-4000-8000-{i:012}")),
        field_path: Some("spec.containers{app}".into()),
        ..Default::default()
    }
}

/// A kubelet-style legacy BackOff event of Pod `i`, already counting 2 occurrences.
fn legacy_event(ns: &str, i: u64, labels: Option<BTreeMap<String, String>>) -> Event {
    let now = Timestamp::now();
    let pod = format!("app-{i:07}");
    Event {
        metadata: ObjectMeta {
            name: Some(format!("{pod}.bench")),
            namespace: Some(ns.into()),
            labels,
            ..Default::default()
        },
        involved_object: pod_ref(ns, &pod, i),
        reason: Some("BackOff".into()),
        message: Some(format!(
            "Back-off restarting failed container app in pod {pod}_{ns}"
        )),
        type_: Some("Warning".into()),
        source: Some(EventSource {
            component: Some("kubelet".into()),
            host: Some("node-1".into()),
        }),
        count: Some(2),
        first_timestamp: Some(Time(now - Duration::from_secs(1))),
        last_timestamp: Some(Time(now)),
        ..Default::default()
    }
}

/// A new-style (tools/events-like) event of Pod `i`, first occurrence now.
fn new_style_event(ns: &str, i: u64) -> Event {
    let pod = format!("web-{i:07}");
    Event {
        metadata: ObjectMeta {
            name: Some(format!("{pod}.ingest")),
            namespace: Some(ns.into()),
            ..Default::default()
        },
        involved_object: pod_ref(ns, &pod, i),
        reason: Some("BackOff".into()),
        action: Some("StartContainer".into()),
        message: Some(format!(
            "Back-off restarting failed container app in pod {pod}_{ns}"
        )),
        type_: Some("Warning".into()),
        reporting_component: Some("kubelet".into()),
        reporting_instance: Some("node-1".into()),
        event_time: Some(MicroTime(Timestamp::now())),
        ..Default::default()
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let client = kube::Client::try_default()
        .await
        .context("no usable kubeconfig")?;
    let done = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let conc = args.concurrency.max(1);
    let note = |r: kube::Result<Event>, what: &str| match r {
        Ok(_) => done.fetch_add(1, Ordering::Relaxed),
        Err(e) => {
            if failed.fetch_add(1, Ordering::Relaxed) < 5 {
                eprintln!("bench-loader: {what}: {e}");
            }
            0
        }
    };
    let mut summary = serde_json::Map::new();
    match args.mode {
        Mode::Seed {
            count,
            first,
            namespaces,
        } => {
            let namespaces = namespaces.max(1);
            for n in 0..namespaces {
                ensure_namespace(&client, &format!("bench-{n}")).await?;
            }
            futures::stream::iter(first..first + count)
                .map(|i| {
                    let ns = format!("bench-{}", i % namespaces);
                    let api: Api<Event> = Api::namespaced(client.clone(), &ns);
                    async move {
                        let ev = legacy_event(&ns, i, None);
                        api.create(&PostParams::default(), &ev).await
                    }
                })
                .buffer_unordered(conc)
                .for_each(|r| {
                    note(r, "seed");
                    async {}
                })
                .await;
        }
        Mode::Filler { count, rate } => {
            ensure_namespace(&client, "filler").await?;
            let labels = BTreeMap::from([(
                "app.kubernetes.io/managed-by".to_string(),
                "event-series".to_string(),
            )]);
            let api: Api<Event> = Api::namespaced(client.clone(), "filler");
            let t0 = tokio::time::Instant::now();
            futures::stream::iter(0..count)
                .map(|i| {
                    let (api, labels) = (api.clone(), labels.clone());
                    async move {
                        if let Some(rate) = rate.filter(|r| *r > 0.0) {
                            tokio::time::sleep_until(t0 + Duration::from_secs_f64(i as f64 / rate))
                                .await;
                        }
                        let mut ev = legacy_event("filler", i, Some(labels));
                        ev.metadata.name = Some(format!("filler-{i:08}"));
                        api.create(&PostParams::default(), &ev).await
                    }
                })
                .buffer_unordered(conc)
                .for_each(|r| {
                    note(r, "filler");
                    async {}
                })
                .await;
        }
        Mode::Rate {
            rate,
            duration,
            keys,
            namespace,
        } => {
            anyhow::ensure!(rate > 0.0 && keys > 0, "--rate and --keys must be positive");
            ensure_namespace(&client, &namespace).await?;
            let api: Api<Event> = Api::namespaced(client.clone(), &namespace);
            // The objects first (not timed): one per key, a singleton occurrence each.
            futures::stream::iter(0..keys)
                .map(|i| {
                    let api = api.clone();
                    let ns = namespace.clone();
                    async move {
                        match api
                            .create(&PostParams::default(), &new_style_event(&ns, i))
                            .await
                        {
                            Err(kube::Error::Api(e)) if e.code == 409 => {
                                api.get(&format!("web-{i:07}.ingest")).await
                            }
                            r => r,
                        }
                    }
                })
                .buffer_unordered(conc)
                .for_each(|r| {
                    if let Err(e) = r {
                        eprintln!("bench-loader: creating the keys: {e}");
                    }
                    async {}
                })
                .await;
            // Then the changes, paced: change n is due at n / rate seconds. A change that could not
            // start before the end of --duration (the apiserver is slower than the rate) is skipped,
            // so that a step lasts --duration whatever the apiserver does.
            let total = (rate * duration).round() as u64;
            let end = tokio::time::Instant::now() + Duration::from_secs_f64(duration);
            let skipped = Arc::new(AtomicU64::new(0));
            let counts: Arc<Vec<AtomicU64>> =
                Arc::new((0..keys).map(|_| AtomicU64::new(1)).collect());
            let t0 = tokio::time::Instant::now();
            let begun = Instant::now();
            futures::stream::iter(0..total)
                .map(|n| {
                    let (api, counts, skipped) = (api.clone(), counts.clone(), skipped.clone());
                    async move {
                        tokio::time::sleep_until(t0 + Duration::from_secs_f64(n as f64 / rate))
                            .await;
                        if tokio::time::Instant::now() >= end {
                            skipped.fetch_add(1, Ordering::Relaxed);
                            return None;
                        }
                        let i = n % keys;
                        let count = counts[i as usize].fetch_add(1, Ordering::Relaxed) + 1;
                        let series = EventSeries {
                            count: Some(count as i32),
                            last_observed_time: Some(MicroTime(Timestamp::now())),
                        };
                        let patch = serde_json::json!({ "series": series });
                        Some(
                            api.patch(
                                &format!("web-{i:07}.ingest"),
                                &PatchParams::default(),
                                &Patch::Merge(&patch),
                            )
                            .await,
                        )
                    }
                })
                .buffer_unordered(conc)
                .for_each(|r| {
                    if let Some(r) = r {
                        note(r, "change");
                    }
                    async {}
                })
                .await;
            let secs = begun.elapsed().as_secs_f64();
            summary.insert("target_rate".into(), rate.into());
            summary.insert("skipped".into(), skipped.load(Ordering::Relaxed).into());
            summary.insert("changes_s".into(), secs.into());
            summary.insert(
                "achieved_rate".into(),
                (done.load(Ordering::Relaxed) as f64 / secs).into(),
            );
        }
    }
    summary.insert("done".into(), done.load(Ordering::Relaxed).into());
    summary.insert("failed".into(), failed.load(Ordering::Relaxed).into());
    summary.insert("wall_s".into(), start.elapsed().as_secs_f64().into());
    println!("{}", serde_json::Value::Object(summary));
    Ok(())
}
