//! A crash-loop event storm emitted through kube-rs's own recorder (`kube::runtime::events::Recorder`),
//! the same storm `target/envtest/bin/emitter --scenario crashloop` emits through client-go's
//! recorders: `--pods` Pods in `--namespace`, each with a `Warning BackOff` (action `StartContainer`)
//! reported by `kubelet` on `node-1`, `--rate` times per second per Pod, for `--duration`. The storm
//! itself is `event_series_test_support::recorder`.
//!
//! Used by `bench/economy.sh` (`just bench-economy`) to count the API writes kube-rs's Recorder makes
//! for a storm (one per occurrence).
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
use event_series_test_support::cluster::client_from_env;
use event_series_test_support::recorder::{self, Storm};
use std::time::Duration;

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
    #[arg(long, default_value = "60s", value_parser = duration)]
    duration: Duration,
    /// Write the JSON summary here instead of stdout.
    #[arg(long)]
    output: Option<std::path::PathBuf>,
    /// Every second, write the number of occurrences emitted so far to this file (for samplers).
    #[arg(long)]
    progress: Option<std::path::PathBuf>,
}

/// The operator's own duration syntax, so that the benchmark scripts pass the same values to both.
fn duration(s: &str) -> Result<Duration, String> {
    event_series_core::duration::parse("--duration", s)
        .map_err(|e| e.to_string())?
        .to_std()
        .map_err(|e| e.to_string())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let client = client_from_env().await?;
    let storm = Storm {
        namespace: args.namespace,
        pods: args.pods,
        rate: args.rate,
        duration: args.duration,
        progress: args.progress,
    };
    let summary = recorder::emit(client, &storm).await?;
    let text = serde_json::to_string_pretty(&summary)?;
    match args.output {
        Some(path) => std::fs::write(&path, text + "\n")
            .with_context(|| format!("writing {}", path.display()))?,
        None => println!("{text}"),
    }
    Ok(())
}
