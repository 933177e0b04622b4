# event-series development commands. `just` lists them.

set shell := ["bash", "-euo", "pipefail", "-c"]

# List the recipes.
default:
    @just --list

# Everything: fmt, clippy, unit, property and end-to-end tests (real kube-apiserver in target/envtest-e2e).
test: lint
    #!/usr/bin/env bash
    set -euo pipefail
    export ENVTEST_DIR="$PWD/target/envtest-e2e"
    trap 'bash hack/cluster-down.sh' EXIT
    bash hack/build-envtest.sh   # apiserver, etcd, kubectl and the client-go emitter
    bash hack/cluster-up.sh
    EVENT_SERIES_E2E_KUBECONFIG="$ENVTEST_DIR/kubeconfig" cargo test --all-targets

# A local real kube-apiserver + etcd (kubeconfig target/envtest/kubeconfig, kubectl target/envtest/bin/kubectl).
cluster-up:
    bash hack/cluster-up.sh

# Stop what cluster-up started.
cluster-down:
    bash hack/cluster-down.sh

# Format check and clippy with warnings as errors.
lint:
    cargo fmt --all -- --check
    cargo clippy --all-targets -- -D warnings

# Regenerate crds/ from the Rust types (a test fails when they differ).
crds:
    cargo run --quiet -- crd > crds/eventseries.dev_eventseriespolicies.yaml

# Format the code.
fmt:
    cargo fmt --all

# Build the release binary.
build:
    cargo build --release

# The benchmarks (not part of `just test`); figures go to docs/BENCHMARKS.md.
bench:
    cargo bench --bench engine
    cargo bench --bench memory

# A newcomer's first command: local apiserver, the manifests, the operator, a crash-loop storm, the series. DEMO_SECONDS=n stops after n s.
demo:
    bash hack/demo.sh
