//! A crash-loop event storm emitted through kube-rs's own recorder (`kube::runtime::events::Recorder`),
//! the same storm `target/envtest/bin/emitter --scenario crashloop` emits through client-go's
//! recorders: Pods each with a `Warning BackOff` (action `StartContainer`) reported by `kubelet` on
//! `node-1`, at a fixed rate per Pod. `bench/kube_recorder.rs` is its command line.
//!
//! The Recorder creates an events.k8s.io/v1 Event on a key's first occurrence and patches it
//! (`series.count + 1`) on every later one, so it writes once per occurrence.

use crate::cluster::ensure_namespace;
use crate::raw::{backoff_message, numbered_pod};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// One storm.
#[derive(Clone, Debug)]
pub struct Storm {
    /// Namespace of the Pods (created when missing).
    pub namespace: String,
    /// Number of crash-looping Pods.
    pub pods: usize,
    /// Occurrences per second per Pod.
    pub rate: f64,
    /// How long to emit.
    pub duration: Duration,
    /// Every second, the number of occurrences emitted so far is written here (for samplers).
    pub progress: Option<PathBuf>,
}

/// Emits `storm` and returns its summary: occurrences emitted, publish calls that succeeded and
/// failed, and the wall time.
pub async fn emit(client: kube::Client, storm: &Storm) -> anyhow::Result<serde_json::Value> {
    anyhow::ensure!(storm.rate > 0.0, "--rate must be positive");
    ensure_namespace(&client, &storm.namespace).await?;

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
    let period = Duration::from_secs_f64(1.0 / storm.rate);
    let start = Instant::now();
    let deadline = tokio::time::Instant::now() + storm.duration;
    let mut tasks = Vec::with_capacity(storm.pods);
    for i in 0..storm.pods {
        let name = format!("app-{i:05}-crash");
        let reference = numbered_pod(&storm.namespace, &name, i as u64);
        let note = backoff_message(&storm.namespace, &name);
        let (recorder, emitted, ok, failed) = (
            recorder.clone(),
            emitted.clone(),
            ok.clone(),
            failed.clone(),
        );
        // Spread the Pods' phases over one period, as the client-go emitter does.
        let phase = period.mul_f64(i as f64 / storm.pods as f64);
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
    let reporter = storm.progress.clone().map(|path| {
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
    if let Some(path) = &storm.progress {
        std::fs::write(path, format!("{}\n", emitted.load(Ordering::Relaxed)))?;
    }
    Ok(serde_json::json!({
        "recorder": "kube-rs",
        "pods": storm.pods,
        "rate": storm.rate,
        "duration_s": storm.duration.as_secs_f64(),
        "emitted": emitted.load(Ordering::Relaxed),
        "publish_ok": ok.load(Ordering::Relaxed),
        "publish_failed": failed.load(Ordering::Relaxed),
        "wall_s": start.elapsed().as_secs_f64(),
    }))
}
