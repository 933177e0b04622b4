//! A crash-loop event storm emitted through kube-rs's own recorder (`kube::runtime::events::Recorder`),
//! the same storm `target/envtest/bin/emitter --scenario crashloop` emits through client-go's
//! recorders: `--pods` Pods in `--namespace`, each with a `Warning BackOff` (action `StartContainer`)
//! reported by `kubelet` on `node-1`, `--rate` times per second per Pod, for `--duration`.
//!
//! Used by `bench/economy.sh` (`just bench-economy`) to count the API writes kube-rs's Recorder makes
//! for a storm. The Recorder creates an events.k8s.io/v1 Event on a key's first occurrence and patches
//! it (`series.count + 1`) on every later one, so it writes once per occurrence.
//!
//! ```sh
//! KUBECONFIG=target/envtest/kubeconfig cargo run --release --example kube_recorder -- \
//!     --pods 100 --rate 1 --duration 300s --output /tmp/kube.json
//! ```
//!
//! Prints (or writes to `--output`) a JSON summary: occurrences emitted, publish calls that
//! succeeded and failed, and the wall time.

use anyhow::Context;
use clap::Parser;
use k8s_openapi::api::core::v1::{Namespace, ObjectReference};
use kube::api::{Api, PostParams};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

#[derive(Debug, Parser)]
#[command(about = "A crash-loop event storm through kube::runtime::events::Recorder")]
struct Args {
    /// Namespace of the Pods (created when missing).
    #[arg(long, default_value = "default")]
    namespace: String,
    /// Number of crash-looping Pods.
    #[arg(long, default_value_t = 100)]
    pods: usize,
    /// Occurrences per second per Pod.
    #[arg(long, default_value_t = 1.0)]
    rate: f64,
    /// How long to emit (e.g. 300s, 10m).
    #[arg(long, default_value = "60s", value_parser = humantime::parse_duration)]
    duration: Duration,
    /// Write the JSON summary here instead of stdout.
    #[arg(long)]
    output: Option<std::path::PathBuf>,
    /// Every second, write the number of occurrences emitted so far to this file (for samplers).
    #[arg(long)]
    progress: Option<std::path::PathBuf>,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    anyhow::ensure!(args.rate > 0.0, "--rate must be positive");
    let client = kube::Client::try_default()
        .await
        .context("no usable kubeconfig")?;
    let nss: Api<Namespace> = Api::all(client.clone());
    let ns = Namespace {
        metadata: kube::api::ObjectMeta {
            name: Some(args.namespace.clone()),
            ..Default::default()
        },
        ..Default::default()
    };
    match nss.create(&PostParams::default(), &ns).await {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(e) => return Err(e).context("creating the namespace"),
    }

    // One recorder for the whole process, as a controller would hold it (its cache is shared).
    let recorder = Recorder::new(
        client,
        Reporter {
            controller: "kubelet".into(),
            instance: Some("node-1".into()),
        },
    );
    let emitted = Arc::new(AtomicU64::new(0));
    let ok = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    let period = Duration::from_secs_f64(1.0 / args.rate);
    let start = Instant::now();
    let deadline = tokio::time::Instant::now() + args.duration;
    let mut tasks = Vec::with_capacity(args.pods);
    for i in 0..args.pods {
        let name = format!("app-{i:05}-crash");
        let reference = ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Pod".into()),
            namespace: Some(args.namespace.clone()),
            name: Some(name.clone()),
            uid: Some(format!("00000000-0000-4000-8000-{i:012}")),
            field_path: Some("spec.containers{app}".into()),
            ..Default::default()
        };
        let note = format!(
            "Back-off restarting failed container app in pod {name}_{}",
            args.namespace
        );
        let (recorder, emitted, ok, failed) = (
            recorder.clone(),
            emitted.clone(),
            ok.clone(),
            failed.clone(),
        );
        // Spread the Pods' phases over one period, as the client-go emitter does.
        let phase = period.mul_f64(i as f64 / args.pods as f64);
        tasks.push(tokio::spawn(async move {
            let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + phase, period);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                if tokio::time::Instant::now() >= deadline {
                    break;
                }
                let ev = Event {
                    type_: EventType::Warning,
                    reason: "BackOff".into(),
                    note: Some(note.clone()),
                    action: "StartContainer".into(),
                    secondary: None,
                };
                emitted.fetch_add(1, Ordering::Relaxed);
                match recorder.publish(&ev, &reference).await {
                    Ok(()) => ok.fetch_add(1, Ordering::Relaxed),
                    Err(e) => {
                        eprintln!("kube_recorder: publish for {name}: {e}");
                        failed.fetch_add(1, Ordering::Relaxed)
                    }
                };
            }
        }));
    }
    let reporter = args.progress.clone().map(|path| {
        let emitted = emitted.clone();
        tokio::spawn(async move {
            let tmp = path.with_extension("tmp");
            loop {
                let n = emitted.load(Ordering::Relaxed);
                if std::fs::write(&tmp, format!("{n}\n")).is_ok() {
                    let _ = std::fs::rename(&tmp, &path);
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        })
    });
    for t in tasks {
        t.await?;
    }
    if let Some(r) = reporter {
        r.abort();
    }
    if let Some(path) = &args.progress {
        std::fs::write(path, format!("{}\n", emitted.load(Ordering::Relaxed)))?;
    }
    let summary = serde_json::json!({
        "recorder": "kube-rs",
        "pods": args.pods,
        "rate": args.rate,
        "duration_s": args.duration.as_secs_f64(),
        "emitted": emitted.load(Ordering::Relaxed),
        "publish_ok": ok.load(Ordering::Relaxed),
        "publish_failed": failed.load(Ordering::Relaxed),
        "wall_s": start.elapsed().as_secs_f64(),
    });
    let text = serde_json::to_string_pretty(&summary)?;
    match args.output {
        Some(path) => std::fs::write(&path, text + "\n")
            .with_context(|| format!("writing {}", path.display()))?,
        None => println!("{text}"),
    }
    Ok(())
}
