//! Fault tests, run by `just faults`: the operator killed with SIGKILL at 20 random moments of a storm,
//! the apiserver and etcd restarted mid-storm, a 10-minute storm of 1,000 keys against an apiserver
//! that answers 429, and the replay of the fuzz corpus (`fuzz/`). Every slow test is `#[ignore]`d so
//! that `just test` skips it; the replay is quick and runs everywhere.
//!
//! Each test runs its own apiserver (`target/envtest-e2e-faults-*`) and prints its figures; logs go to
//! `target/faults-logs/`. `FAULTS_SEED` replays the random choices of a run.

// A scenario reads as one story from top to bottom: the function-length lint is for the product.
#![allow(clippy::too_many_lines)]

mod apiserver_restart;
mod fuzz_corpus;
mod kill9;
mod support;
mod throttled;

use event_series_test_support::process::Launcher;

/// Where the operators and emitters these tests start write their logs.
const LOGS: &str = "target/faults-logs";

/// The operator these tests start.
const OPERATOR: Launcher = Launcher {
    bin: env!("CARGO_BIN_EXE_event-series"),
    logs: LOGS,
};
