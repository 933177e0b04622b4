//! End-to-end tests against a real kube-apiserver and etcd (the cluster fixture is
//! `event_series_test_support::cluster`).

// A scenario reads as one story from top to bottom: the function-length lint is for the product.
#![allow(clippy::too_many_lines)]

mod alerts;
mod completeness;
mod economy;
mod flood;
mod ha;
mod harness;
mod install;
mod isolation;
mod network;
mod observability;
mod operator;
mod policy;
mod ports;
mod reading;
mod secure_metrics;
mod shares;
mod slow;
mod tenant_text;
mod trouble;
mod updates;
mod watch;

use event_series_test_support::process::Launcher;

/// The operator these tests start; their logs go to `target/e2e-logs`.
const OPERATOR: Launcher = Launcher {
    bin: env!("CARGO_BIN_EXE_event-series"),
    logs: "target/e2e-logs",
};
