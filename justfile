# event-series development commands. `just` lists them.

set shell := ["bash", "-euo", "pipefail", "-c"]

# List the recipes.
default:
    @just --list

# Everything: fmt, clippy, unit, property, manifest (helm, promtool) and end-to-end tests (real kube-apiserver in target/envtest-e2e; a real node in target/envtest-node, which must start when CI=true), then the end-to-end tests of lifecycle, restart, install and admission policy on the oldest supported Kubernetes minor. Prints each stage's time (hack/test.sh).
test:
    JUST="{{just_executable()}}" bash hack/test.sh

# The apiserver end-to-end suite on every supported Kubernetes minor (tests/envtest/minors and the
# newest); the table of results in target/matrix/versions.md. MATRIX_MINORS="1.34" picks some.
test-matrix:
    bash hack/test-matrix.sh

# A local real kube-apiserver + etcd (kubeconfig target/envtest/kubeconfig, kubectl target/envtest/bin/kubectl).
cluster-up:
    bash hack/cluster-up.sh

# The same apiserver plus kube-scheduler, kube-controller-manager, kube-proxy and a kubelet with containerd and CNI (one node; Linux, root), the images imported.
cluster-up-node:
    bash hack/cluster-up-node.sh

# Stop what cluster-up or cluster-up-node started, and remove every trace of the node.
cluster-down:
    bash hack/cluster-down.sh

# The runtime image without a Docker engine (static binary, FROM scratch, uid 65532; buildah): target/image/event-series.oci.tar.
image:
    bash hack/image.sh

# Format check, clippy (functions at most 80 lines: clippy.toml) and rustdoc with warnings as errors over the workspace (the operator, core/, test-support/); the core's purity; file sizes.
lint:
    cargo fmt --all -- --check
    cargo clippy --workspace --all-targets -- -D warnings
    RUSTDOCFLAGS="-D warnings -A rustdoc::private_intra_doc_links" cargo doc --workspace --no-deps --document-private-items --quiet
    bash hack/check-core.sh
    bash hack/lint-scripts.sh
    python3 hack/sizes.py --check src core/src

# Every suite that needs no cluster (no Go build, no apiserver, no helm): the inner loop. The rest, on the real apiserver and node, is in `just test`.
unit:
    #!/usr/bin/env bash
    set -euo pipefail
    unit=(engine late_writes properties restart tenants mapping crashloop cli reading docs formats release)
    cluster=(e2e faults node scrape upgrade manifests)
    # A new suite must be put in one list or the other.
    for f in tests/*.rs tests/*/main.rs; do
      name="$(basename "${f%/main.rs}" .rs)"
      [[ " ${unit[*]} ${cluster[*]} " == *" $name "* ]] || { echo "unit: tests/$name is in neither list of the justfile's unit recipe" >&2; exit 1; }
    done
    cargo test --workspace --lib --bins "${unit[@]/#/--test=}"
    # The benchmarks' own arithmetic (percentiles, lateness, the bill's verdict), on made-up audit logs.
    python3 -m unittest bench/test_scale_figures.py

# Regenerate crds/ from the Rust types, and the chart's copies in files/ of the CRD and of config/grafana's dashboard (tests fail when they differ).
crds:
    cargo run --quiet -- crd > crds/eventseries.dev_eventseriespolicies.yaml
    cp crds/eventseries.dev_eventseriespolicies.yaml charts/event-series/files/
    cp config/grafana/event-series.json charts/event-series/files/grafana-dashboard.json

# Format the code.
fmt:
    cargo fmt --all

# Build the release binary.
build:
    cargo build --release

# Install event-series and, linked to it, the kubectl plugin kubectl-series (`kubectl series`) into cargo's bin directory.
install:
    #!/usr/bin/env bash
    set -euo pipefail
    cargo install --path . --locked
    bin="${CARGO_INSTALL_ROOT:-${CARGO_HOME:-$HOME/.cargo}}/bin"
    ln -sf event-series "$bin/kubectl-series"
    echo "installed $bin/event-series and $bin/kubectl-series (-> event-series); put $bin on your PATH for \`kubectl series\`"

# Build helm (3 and 4), helm-unittest, promtool and Alertmanager (Go modules) into target/tools/bin for the chart, manifest and alert tests; kept per version outside the clone (hack/tools.sh).
tools:
    bash hack/tools.sh

# The benchmarks (not part of `just test`; bench/README.md lists them); figures go to docs/BENCHMARKS.md. Ends with bench-e2e (about 45 min).
bench: && bench-e2e bench-node
    bash bench/engine.sh

# The engine's criterion benchmarks, the decode of a watch event, and the engine's heap per series (benches/engine.rs, benches/decode.rs, benches/memory.rs) into one result file with commit and machine (bench/engine.sh; ENGINE_BENCH_ARGS for criterion; a few minutes).
bench-engine:
    bash bench/engine.sh

# A newcomer's first command: local apiserver, the manifests, the operator, a crash-loop storm, the series. DEMO_SECONDS=n stops after n s.
demo:
    bash hack/demo.sh

# Every benchmark, one after the other (about twelve hours on 2 cores): engine, memory, the end-to-end set, the node, heartbeats, the default bound, scale, failover, the rollout, growth, the soak; then the generated tables of docs/ and the list of stale ones. RESUME=1 skips a benchmark whose newest result is current (bench/all.sh).
bench-all:
    bash bench/all.sh

# The engine's criterion benchmarks of two commits side by side, alternating in the same minutes (bench/results/engine-compare/).
bench-engine-compare base head="HEAD":
    bash bench/engine-compare.sh {{base}} {{head}}

# One real crash loop on a real node for NODE_MINUTES (default 35): the kubelet's API writes beside event-series' (bench/node.sh; Linux, root).
bench-node: bench-build
    bash bench/node.sh

# Two hours (SOAK_MINUTES) on a real node under churn: crash loops, the scheduler's and controller-manager's events, the leader Pod deleted every 20 min, the apiserver restarted twice; RSS, fds, threads, tasks per minute, every key checked (bench/soak.sh; Linux, root).
bench-soak: bench-build
    bash bench/soak.sh

# A simulated cluster (kwok Nodes and Pods, the real scheduler and controller-manager): steps of 1k, 5k, 20k Pods over 10, 100, 1,000 namespaces, then the API server's bill in PAIRS (5) alternating pairs without/with the operator over BILL_MINUTES (8) each (bench/scale.sh; STEPS, BILL, PAIRS, LOAD_MINUTES, BILL_MINUTES, WATCH_CACHE=on for the events watch cache; about 2 h).
bench-scale: bench-build
    bash hack/build-envtest.sh node
    bash hack/tools.sh kwok
    bash bench/scale.sh

# A leader killed with SIGKILL beside 10^6 stored raw events and 10^5 series, its standby cold (--standby cold, the baseline) and warm in one run: Lease, first write and longest write gap; RSS of both replicas; API server CPU and watch bytes with one and two replicas (bench/failover.sh; HISTORY, SERIES, MODES, WINDOW).
bench-failover: bench-build
    bash bench/failover.sh

# A `kubectl rollout restart` of the installed operator (2 replicas) on the real node at SERIES (100,000) series, alerts firing, a stream written throughout: the longest gap between series writes, each change of leader and its first write, alerts that lapsed, every key's count, each Pod's RSS (bench/rollout.sh; holds NODE_LOCK for the run; about 30-40 min; Linux, root).
bench-rollout: bench-build
    bash bench/rollout.sh

# What the restart buffer costs a restore: 400,000 stored raw events and 100,000 series, restarts with --restart-buffer-bytes 64Mi and 8Mi alternating, peak RSS against the steady RSS (bench/restore-buffer.sh; BUFFERS, ROUNDS; FLAG and VALUES alternate another flag the same way; about 25 min).
bench-restore-buffer: bench-build
    bash bench/restore-buffer.sh

# Growth curves: RSS and restart time against series (1k-100k), stored raw events (10k-10^6) and namespaces (10-10k); docs/growth.svg (bench/growth.sh; AXES; about 45 min).
bench-growth: bench-build
    bash bench/growth.sh
    python3 bench/plot_growth.py

# Heartbeats above the writer's pace, scaled by ten: 10,000 series at a 3-minute heartbeat (100,000 at 30 min), default --qps, 6-minute event TTL, 15 min; no object may expire between two writes (bench/heartbeats.sh).
bench-heartbeats: bench-build
    bash bench/heartbeats.sh

# The default bound as shipped: 50,000 loops (an occurrence each every 5 min) under the default policy and flags for 110 min, candidates, key bytes and alerts full beside them, then a restart; every object's longest time between two writes against the 1 h TTL, peak RSS against 256 MiB (bench/bound.sh; about 2 h).
bench-bound: bench-build
    bash bench/bound.sh

# Allocator comparison (docs/BENCHMARKS.md, Memory): bench-memory once per allocator variant (about 45 min).
bench-allocators: bench-build
    bash bench/allocators.sh

# End-to-end benchmarks on private real apiservers (bench/README.md): economy, memory+restart, bookmarks, ingest, plot.
bench-e2e: bench-build
    bash bench/economy.sh
    bash bench/memory.sh
    bash bench/flood.sh
    bash bench/bookmarks.sh
    bash bench/ingest.sh
    python3 bench/plot.py

# Peak RSS with 300 raw events carrying 1 MB messages against 100-byte ones, watching and after a restart.
bench-flood: bench-build
    bash bench/flood.sh

# API writes of one crash-loop storm: tools/record, tools/events, kube-rs Recorder, event-series (then the plot).
bench-economy: bench-build
    bash bench/economy.sh
    python3 bench/plot.py

# Operator RSS with 10,000 and 100,000 active series, and restart time to /readyz.
bench-memory: bench-build
    bash bench/memory.sh

# Raw events re-sent after forced watch reconnects, with and without bookmarks.
bench-bookmarks: bench-build
    bash bench/bookmarks.sh

# Highest sustained rate of raw event changes, with ingest lag, CPU and RSS (the operator's CPU per change without the apiserver is in bench-engine).
bench-ingest: bench-build
    bash bench/ingest.sh

# What the end-to-end benchmarks run: the envtest binaries, the release operator, and the programs in bench/ (the kube-rs emitter, the loader).
bench-build:
    bash hack/build-envtest.sh
    cargo build --release --bin event-series --example kube_recorder --example bench-loader

# Kubernetes' own e2e tests of Events (e2e.test from the k8s.io/kubernetes module, tests/conformance) on a node with the operator selecting every namespace: what ran and passed, and the series the operator wrote in the tests' namespaces (hack/conformance.sh; FOCUS, KEEP=1; not in `just test`).
conformance:
    bash hack/conformance.sh

# The release files in dist/ (hack/release.sh, docs/RELEASE.md): install.yaml (the whole install, image by digest), the chart archive, the image's OCI archive (an index of linux/amd64 and linux/arm64), CycloneDX SBOMs of the crates and of the image, the kubectl plugin archives for linux/amd64 and linux/arm64 and their krew manifest, shell completions; the image signature, SLSA provenance and SHA256SUMS, signed with RELEASE_SIGNING_KEY (or a key made for the release). Then verify-release on it.
release:
    bash hack/release.sh

# Checks a release directory: SHA256SUMS and its signature, every file against it, the image index (linux/amd64 and linux/arm64, each config and binary of its architecture) and its signature, the provenance's signature and subjects, the SBOMs, the krew manifest. key: the public key to trust (default: the event-series.pub that came with the files).
verify-release dir="dist" $key="":
    python3 hack/release.py verify "{{dir}}" ${key:+--key "$key"}

# Fault tests (not in `just test`): kill -9 x20 mid-storm, apiserver+etcd restarts, a 10-minute 429 storm of 1,000 keys, then `just fuzz`. FAULTS_SEED replays a run; figures in docs/FAULTS.md.
faults:
    #!/usr/bin/env bash
    set -euo pipefail
    bash hack/build-envtest.sh   # apiserver, etcd, kubectl and the client-go emitter
    bash hack/tools.sh           # helm and promtool, for the chart and alert-rule tests
    cargo test --test faults -- --ignored --test-threads=1 --nocapture
    just faults-cutoff
    just fuzz

# The cut-off leader test (e2e::network) FAULTS_CUTOFF_RUNS times in a row (default 20) on one apiserver; a failing run keeps both replicas' logs and the audit log in target/faults-cutoff-N.
faults-cutoff:
    #!/usr/bin/env bash
    set -euo pipefail
    export ENVTEST_DIR="$PWD/target/envtest-cutoff"
    trap 'bash hack/cluster-down.sh' EXIT
    bash hack/build-envtest.sh
    bash hack/cluster-up.sh
    for i in $(seq "${FAULTS_CUTOFF_RUNS:-20}"); do
      echo "faults-cutoff: run $i"
      rm -rf target/e2e-logs
      if ! EVENT_SERIES_E2E_KUBECONFIG="$ENVTEST_DIR/kubeconfig" cargo test --test e2e -- --exact \
          network::a_leader_cut_off_fences_itself_before_the_standby_takes_over --nocapture; then
        mkdir -p "target/faults-cutoff-$i"
        cp -r target/e2e-logs "$ENVTEST_DIR/audit.log" "target/faults-cutoff-$i/" || true
        echo "faults-cutoff: run $i failed; logs in target/faults-cutoff-$i" >&2
        exit 1
      fi
    done
    echo "faults-cutoff: ${FAULTS_CUTOFF_RUNS:-20} runs, no failure"

# The cargo-fuzz targets on event normalisation and mapping and on the policy parser, FUZZ_SECONDS each (default 120), seeded with real events (fuzz/seeds). A crash leaves its input in fuzz/artifacts/.
fuzz:
    #!/usr/bin/env bash
    set -euo pipefail
    command -v cargo-fuzz >/dev/null 2>&1 || cargo install cargo-fuzz --locked
    cd fuzz
    for target in event_json event_fields policy_spec; do
      mkdir -p "corpus/$target"
      seeds=() flags=()
      if [ "$target" = event_json ]; then seeds=(seeds/event) flags=(-dict=event.dict); fi
      echo "fuzz: $target for ${FUZZ_SECONDS:-120}s"
      # Saved crashes run first: a regression fails the recipe at once.
      cargo +nightly fuzz run "$target" "corpus/$target" "regressions/$target" "${seeds[@]}" -- \
        -max_total_time="${FUZZ_SECONDS:-120}" -print_final_stats=1 "${flags[@]}"
    done
