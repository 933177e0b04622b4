#!/usr/bin/env bash
# `just test`: lint, the Kubernetes binaries and tools the tests need, a real kube-apiserver in
# target/envtest-e2e, every cargo test (the node tests start their node in target/envtest-node when
# their turn comes, which must succeed when CI=true), then the end-to-end subset below on the oldest
# supported Kubernetes minor (`just test-matrix` runs the whole suite on every minor).
#
# Each stage prints its wall time as it ends, each test binary too; where STAGE_TIMES names a file
# (.ci/run sets it), each adds a line "start<TAB>seconds<TAB>name<TAB>result" there, for the table
# .ci/run prints at the end.
#
# The builds the foreground needs later run in the background from the start, where they take the
# CPU the foreground leaves idle (a serial tail of the cargo build, links, the end-to-end tests
# waiting on their servers): in a session of their own whose share of CPU has nice 19 (the kernel
# shares CPU between sessions first, then by nice within one: the servers the tests start in their
# own sessions keep their share), with idle I/O, one after the other in the order they are needed:
#   1. kube-apiserver, etcd, kubectl and the emitter, then the tools (before the cluster starts);
#   2. the node's Kubernetes binaries and, where a node can run, Prometheus (tests/scrape), the
#      operator's release build its image takes (hack/cluster-up-node.sh and hack/image.sh, when
#      the node tests start: they wait for what is still being built), then the previous release's
#      image (hack/previous-image.sh, the upgrade tests, which starts from that build's dependencies);
#   3. the oldest minor's kube-apiserver, etcd and kubectl (the matrix at the end);
#   4. the arm64 release build (hack/build-static.sh: rustup's arm64 standard library, Debian's
#      cross gcc), for the last stage: the image index of both platforms, its arm64 binary run
#      under qemu (tests/release.rs, ignored in the cargo test run).
# Their output goes to target/background/builds.log, printed when one fails. TEST_BACKGROUND=0 runs
# them first, in the foreground, instead.
set -euo pipefail
cd "$(dirname "$0")/.."

# The end-to-end tests that also run on the oldest supported minor: lifecycle, restart, install and
# admission policy (not the hand-over of 2,000 alerts: the alert planner, not the API, is its subject).
OLDEST_SUBSET="operator:: install:: policy:: ha:: watch:: --skip ha::thousands_of_alerting"

export ENVTEST_DIR="$PWD/target/envtest-e2e"
node_dir="$PWD/target/envtest-node"
# shellcheck source-path=SCRIPTDIR source=common.sh
. hack/common.sh

# The time in microseconds since the epoch.
now_us() { echo "${EPOCHREALTIME//[.,]/}"; }

# record START NAME EXIT [COUNTS]: prints the time since START (now_us), and adds the line to
# STAGE_TIMES.
record() {
  local took=$((($(now_us) - $1) / 1000000)) result=ok
  [ "$3" = 0 ] || result="FAILED (exit $3)"
  if [ "$3" = 0 ]; then
    echo "test: $2: $took s${4:+ ($4)}" >&2
  else
    echo "test: $2: $took s${4:+ ($4)}, $result" >&2
  fi
  [ -z "${STAGE_TIMES:-}" ] || printf '%s\t%s\t%s\t%s\n' "$1" "$took" "$2" "$result${4:+: $4}" >>"$STAGE_TIMES"
}

# stage NAME COMMAND...: runs COMMAND and records its time.
stage() {
  local name="$1" start rc=0
  shift
  start=$(now_us)
  "$@" || rc=$?
  record "$start" "$name" "$rc"
  return "$rc"
}

# multiarch_unfit: what this machine lacks for the arm64 build and its test (buildah, the cross gcc,
# qemu), in one line; nothing when it has all. With CI=true nothing: the test must run, and fail.
multiarch_unfit() {
  local missing
  [ "${CI:-}" = true ] && return
  missing="$(missing_of "${RELEASE_PREREQS[@]}" buildah:buildah | xargs)"
  [ -z "$missing" ] || echo "missing: $missing (Debian: apt-get install $(packages_of "${RELEASE_PREREQS[@]}" buildah:buildah | xargs))"
}

# The background builds (`hack/test.sh --background`), each recorded as "background: NAME";
# target/background/ready once the foreground's first need (1.) is met, target/background/exit with
# their exit status at the end.
background_builds() {
  local oldest
  trap 'echo $? >target/background/exit' EXIT
  oldest="$(bash hack/test-matrix.sh --oldest)"
  stage "background: Kubernetes binaries (kube-apiserver, etcd, kubectl, emitter)" bash hack/build-envtest.sh
  stage "background: tools (helm 3 and 4, helm-unittest, promtool, Alertmanager)" bash hack/tools.sh
  touch target/background/ready
  stage "background: the node's Kubernetes binaries" bash hack/build-envtest.sh node
  if [ -z "$(node_unfit)" ]; then
    stage "background: Prometheus (tests/scrape)" bash hack/tools.sh prometheus
    # What hack/image.sh builds, the same script.
    stage "background: the release build (for the node's image)" bash hack/build-static.sh x86_64-unknown-linux-gnu
    stage "background: the previous release's image" bash hack/previous-image.sh
  fi
  stage "background: Kubernetes $oldest binaries" env ENVTEST_MINOR="$oldest" \
    bash hack/build-envtest.sh kube-apiserver etcd kubectl
  touch target/background/oldest
  if [ -z "$(multiarch_unfit)" ]; then
    stage "background: the arm64 release build (for the image index)" bash hack/build-static.sh aarch64-unknown-linux-gnu
  fi
}
if [ "${1:-}" = --background ]; then
  background_builds
  exit 0
fi

builds_pid=""
log=target/background/builds.log
start_background() {
  rm -rf target/background
  mkdir -p target/background
  if [ "${TEST_BACKGROUND:-1}" = 0 ]; then
    bash hack/test.sh --background
    return
  fi
  echo "test: building the Kubernetes binaries, the tools, the images and the oldest minor's binaries in the background (log $log)" >&2
  setsid -w bash -c 'echo 19 >/proc/self/autogroup 2>/dev/null || true
    exec nice -n 19 ionice -c 3 bash hack/test.sh --background' >"$log" 2>&1 &
  builds_pid=$!
}

# wait_for WHAT: until target/background/WHAT (ready, oldest) or the end of the background builds
# (WHAT=all); fails with the end of their log when they failed.
wait_for() {
  local rc=0
  while [ ! -e target/background/exit ] && { [ "$1" = all ] || [ ! -e "target/background/$1" ]; }; do
    sleep 1
  done
  if [ -e target/background/exit ] && [ -n "$builds_pid" ]; then
    wait "$builds_pid" || rc=$?
    builds_pid=""
    [ "$(cat target/background/exit)" = 0 ] || rc=1
  fi
  if [ "$rc" != 0 ]; then
    { echo "---- the end of $log ----"; tail -n 60 "$log"; } >&2
    return 1
  fi
}

kill_tree() {
  local child
  for child in $(pgrep -P "$1" || true); do kill_tree "$child"; done
  kill "$1" 2>/dev/null || true
}

cleanup() {
  if [ -n "$builds_pid" ]; then
    # The background builds are a process group of their own (setsid): all of it at once, so that
    # no build starts a step after its parent was stopped; then anything left under it.
    kill -- -"$builds_pid" 2>/dev/null || true
    kill_tree "$builds_pid"
  fi
  bash hack/cluster-down.sh
  ENVTEST_DIR="$node_dir" bash hack/cluster-down.sh
}
trap cleanup EXIT

# cargo test's output passed through, each test binary's time and counts recorded from libtest's
# summary line ("test result: ok. 52 passed; 0 failed; 3 ignored; ...").
test_times() {
  local line name="" start counts
  start=$(now_us)
  while IFS= read -r line || [ -n "$line" ]; do
    printf '%s\n' "$line"
    case "$line" in
      "     Running "*) name="${line#*Running }"; name="${name%% (*}"; start=$(now_us) ;;
      "   Doc-tests "*) name="doc-tests ${line#*Doc-tests }"; start=$(now_us) ;;
      "test result: "*)
        counts="$(sed -E 's/^test result: [A-Za-z]+\. ([0-9]+) passed; ([0-9]+) failed; ([0-9]+) ignored.*/\1 passed, \2 failed, \3 ignored/' <<<"$line")"
        case "$line" in
          "test result: ok."*) record "$start" "${name:-tests}" 0 "$counts" ;;
          *) record "$start" "${name:-tests}" 1 "$counts" ;;
        esac
        ;;
    esac
  done
}
run_tests() {
  cargo test --workspace --all-targets 2>&1 | test_times
}
run_multiarch() {
  cargo test --test release -- --ignored 2>&1 | test_times
}

start_background
stage "lint" "${JUST:-just}" lint
stage "bench arithmetic" python3 -m unittest bench/test_scale_figures.py
stage "cargo test: build" cargo test --workspace --all-targets --no-run
stage "waiting for the Kubernetes binaries and the tools" wait_for ready
stage "cluster up" bash hack/cluster-up.sh
# The node tests start their node (hack/cluster-up-node.sh in target/envtest-node) when their turn
# comes, so that it does not run beside the other end-to-end tests.
export EVENT_SERIES_E2E_KUBECONFIG="$ENVTEST_DIR/kubeconfig"
stage "cargo test: run" run_tests
# The oldest minor with nothing else running.
bash hack/cluster-down.sh
ENVTEST_DIR="$node_dir" bash hack/cluster-down.sh
stage "waiting for the oldest minor's binaries" wait_for oldest
MATRIX_OLDEST=1 MATRIX_TESTS="$OLDEST_SUBSET" MATRIX_OUT=target/matrix-oldest bash hack/test-matrix.sh
# The image index of both platforms, its arm64 binary under qemu, once the arm64 build is done.
stage "waiting for the background builds" wait_for all
if [ -z "$(multiarch_unfit)" ]; then
  stage "cargo test: the image index, arm64 under qemu" run_multiarch
else
  echo "test: skipped the image index of both platforms and its arm64 binary under qemu: $(multiarch_unfit)" >&2
fi
