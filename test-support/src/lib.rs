//! What the event-series test suites, benchmarks and fuzz targets share, each written once:
//!
//! - [`alertmanager`]: a real Alertmanager whose receiver is a webhook served by the test;
//! - [`audit`]: the test apiserver's audit log of series and Lease writes;
//! - [`proxy`]: a fault-injection TCP proxy (freeze, reset, latency) in front of the apiserver;
//! - [`raw`]: raw core/v1 Events as the kubelet's recorder writes them;
//! - [`sim`]: a simulated cluster for engine tests (injected clock, no API server);
//! - [`check`]: the invariants the fuzz targets check, with the events.k8s.io/v1 rules restated;
//! - [`cluster`]: the real kube-apiserver the end-to-end tests run against, and what they read back;
//! - [`node`]: the one-node cluster (kubelet, scheduler, controller-manager) with the operator as Pods;
//! - [`process`]: one `event-series run` process;
//! - [`emitter`]: client-go's own recorders (the Go emitter of `tests/envtest`) and their ground truth;
//! - [`writes`]: raw event writes retried until the API accepts them;
//! - [`load`]: raw event load for the end-to-end benchmarks (`bench/loader.rs`);
//! - [`recorder`]: a crash-loop storm through kube-rs's Recorder (`bench/kube_recorder.rs`).
//!
//! Not published: it exists for this repository's own targets.

// Harness code that drives real processes step by step: the function-length lint is for the product.
#![allow(clippy::too_many_lines)]

pub mod alertmanager;
pub mod audit;
pub mod check;
pub mod cluster;
pub mod emitter;
pub mod load;
pub mod manifests;
pub mod node;
pub mod process;
pub mod proxy;
pub mod raw;
pub mod recorder;
pub mod sim;
pub mod writes;

use std::path::{Path, PathBuf};

/// The repository's root, where `hack/`, `crds/`, `config/` and `target/` are.
pub fn repo_root() -> PathBuf {
    let this_crate = Path::new(env!("CARGO_MANIFEST_DIR"));
    this_crate.parent().unwrap_or(this_crate).to_path_buf()
}

/// `kubectl` of the release the test cluster runs: the newest's, or under `ENVTEST_MINOR` (the
/// test matrix, `just test-matrix`) the older minor's, as `hack/build-envtest.sh` builds them.
pub fn kubectl_bin() -> PathBuf {
    match std::env::var("ENVTEST_MINOR") {
        Ok(minor) if !minor.is_empty() => {
            repo_root().join(format!("target/envtest/bin-{minor}/kubectl"))
        }
        _ => repo_root().join("target/envtest/bin/kubectl"),
    }
}
