//! End-to-end tests against a real kube-apiserver and etcd (see `tests/e2e/fixture.rs`).

#[path = "e2e/economy.rs"]
mod economy;
#[path = "e2e/fixture.rs"]
mod fixture;
#[path = "e2e/ha.rs"]
mod ha;
#[path = "e2e/harness.rs"]
mod harness;
#[path = "e2e/install.rs"]
mod install;
#[path = "e2e/operator.rs"]
mod operator;
#[path = "e2e/policy.rs"]
mod policy;
#[allow(dead_code)]
#[path = "e2e/process.rs"]
mod process;
#[path = "e2e/watch.rs"]
mod watch;

/// Where the operators these tests start write their logs.
const LOGS: &str = "target/e2e-logs";
