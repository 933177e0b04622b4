//! Raw core/v1 Event load for the end-to-end benchmarks in `bench/` (an example target,
//! `cargo build --release --example bench-loader`; never run by `just test`). The load itself is
//! `event_series_test_support::load`.
//!
//! ```text
//! bench-loader seed   --count N [--first I] [--namespaces M]   N legacy events, each already counting 2
//!                                                             recent occurrences of its own Pod, so each
//!                                                             becomes a series at once (Output)
//! bench-loader lone   --count N [--first I] [--namespaces M] [--prefix P] [--at-limit]
//!                                                             N one-off legacy events (one occurrence
//!                                                             each, now): keys that stay candidates;
//!                                                             --at-limit: every key field at its limit
//! bench-loader filler --count N [--rate R]                    N events labelled managed-by=event-series:
//!                                                             writes the operator's watch filters out
//! bench-loader rate   --rate R --duration S [--keys K]        R raw event changes per second for S s:
//!                                                             new-style events (eventTime with
//!                                                             microseconds), one object per key, each
//!                                                             change a merge patch of series.count and
//!                                                             series.lastObservedTime = now
//!                     [--namespaces M] [--legacy]             keys spread over M namespaces; legacy
//!                                                             (count, lastTimestamp) events
//! ```
//! Common: `--concurrency C` requests in flight (default 64). Kubeconfig: KUBECONFIG. Prints a JSON
//! summary (requests done, failed, achieved rate).

use clap::{Parser, Subcommand};
use event_series_test_support::cluster::client_from_env;
use event_series_test_support::load::{Changes, Load};

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
    /// Legacy events of loops that ended long ago (1 to 3 occurrences each, one Pod each): the bulk
    /// of a cluster's stored events, which a restart lists but must not count again.
    History {
        #[arg(long)]
        count: u64,
        /// Index of the first Pod (to add more to an earlier history).
        #[arg(long, default_value_t = 0)]
        first: u64,
        /// Spread over this many namespaces history-0, history-1, ...
        #[arg(long, default_value_t = 1000)]
        namespaces: u64,
        /// Minutes since their last occurrence (beyond seriesWindow, within the event TTL).
        #[arg(long, default_value_t = 30)]
        age_minutes: u64,
    },
    /// One-off legacy events (one occurrence each, now): keys that stay candidates.
    Lone {
        #[arg(long)]
        count: u64,
        /// Index of the first Pod.
        #[arg(long, default_value_t = 0)]
        first: u64,
        /// Spread over this many namespaces <prefix>-0, <prefix>-1, ...
        #[arg(long, default_value_t = 10)]
        namespaces: u64,
        #[arg(long, default_value = "lone")]
        prefix: String,
        /// Every field of each key at its API limit (about 4.6 KB a key with its note).
        #[arg(long)]
        at_limit: bool,
    },
    /// Events the operator's watch filters out (label app.kubernetes.io/managed-by=event-series).
    Filler {
        #[arg(long)]
        count: u64,
        /// Writes per second (default: as fast as the apiserver answers).
        #[arg(long)]
        rate: Option<f64>,
    },
    /// A sustained rate of raw event changes (new-style events, merge patches of their series; or
    /// legacy ones).
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
        /// Give every change a new message of this many bytes.
        #[arg(long)]
        message_bytes: Option<usize>,
        /// Legacy (kubelet-style) events, changed through `count` and `lastTimestamp`: the API
        /// server takes their messages up to its request size, a new-style event's up to 1,024 bytes.
        #[arg(long)]
        legacy: bool,
        /// Spread the keys over this many namespaces <namespace>-0, <namespace>-1, ... (1: all in
        /// <namespace>).
        #[arg(long, default_value_t = 1)]
        namespaces: u64,
    },
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let client = client_from_env().await?;
    let load = Load::new(client, args.concurrency);
    let figures = match args.mode {
        Mode::Seed {
            count,
            first,
            namespaces,
        } => {
            load.seed(count, first, namespaces).await?;
            Default::default()
        }
        Mode::History {
            count,
            first,
            namespaces,
            age_minutes,
        } => {
            load.history(
                count,
                first,
                namespaces,
                std::time::Duration::from_secs(age_minutes * 60),
            )
            .await?;
            Default::default()
        }
        Mode::Lone {
            count,
            first,
            namespaces,
            prefix,
            at_limit,
        } => {
            load.lone(count, first, namespaces, &prefix, at_limit)
                .await?;
            Default::default()
        }
        Mode::Filler { count, rate } => {
            load.filler(count, rate).await?;
            Default::default()
        }
        Mode::Rate {
            rate,
            duration,
            keys,
            namespace,
            message_bytes,
            legacy,
            namespaces,
        } => {
            let changes = Changes {
                message_bytes,
                legacy,
                namespaces,
            };
            load.rate(rate, duration, keys, &namespace, changes).await?
        }
    };
    println!("{}", load.summary(figures));
    Ok(())
}
