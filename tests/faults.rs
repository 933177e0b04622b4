//! Fault tests (issue 6), run by `just faults`: the operator killed with SIGKILL at 20 random moments
//! of a storm, the apiserver and etcd restarted mid-storm, a 10-minute storm of 1,000 keys against an
//! apiserver that answers 429, and the replay of the fuzz corpus (`fuzz/`). Every slow test is
//! `#[ignore]`d so that `just test` skips it; the replay is quick and runs everywhere.
//!
//! Each test runs its own apiserver (`target/envtest-e2e-faults-*`) and prints its figures; logs go to
//! `target/faults-logs/`. `FAULTS_SEED` replays the random choices of a run.

#[allow(dead_code)]
#[path = "e2e/fixture.rs"]
mod fixture;

#[path = "faults/apiserver_restart.rs"]
mod apiserver_restart;
#[path = "faults/fuzz_corpus.rs"]
mod fuzz_corpus;
#[path = "faults/kill9.rs"]
mod kill9;
#[allow(dead_code)]
#[path = "e2e/process.rs"]
mod process;
#[allow(dead_code)]
#[path = "faults/support.rs"]
mod support;
#[path = "faults/throttled.rs"]
mod throttled;

/// Where the operators these tests start write their logs.
const LOGS: &str = "target/faults-logs";
