#!/usr/bin/env bash
# The apiserver end-to-end suite (`cargo test --test e2e`) on every supported Kubernetes minor: the
# newest (tests/envtest/go.mod) and each older one in tests/envtest/minors (hack/envtest-minor.sh).
# Each minor gets its own cluster (kube-apiserver, etcd and kubectl of that release, built by
# hack/build-envtest.sh with ENVTEST_MINOR); the operator and the client-go emitter are the same.
#
# Environment:
#   MATRIX_MINORS  the minors to run, e.g. "1.34 1.37" (default: all, newest first)
#   MATRIX_TESTS   test name filters for every minor (default: the whole suite)
#   MATRIX_OLDEST  1: only the oldest minor (what `just test` runs beside the newest)
#   MATRIX_OUT     where the logs and the table go (default target/matrix)
#
# Writes MATRIX_OUT/<minor>.log and MATRIX_OUT/versions.md (the README's table: minor, release,
# result, date); prints a failed minor's failures; exits non-zero when any minor failed. Where
# STAGE_TIMES names a file (.ci/run), adds each minor's stage times to it.
#
# `hack/test-matrix.sh --oldest` prints the oldest minor (what MATRIX_OLDEST=1 runs).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
command -v go >/dev/null 2>&1 || export PATH="$PATH:/usr/local/go/bin"
newest="$(awk '$1 == "k8s.io/kubernetes" { print $2; exit }' tests/envtest/go.mod)"
newest_minor="${newest#v}"; newest_minor="${newest_minor%.*}"

# The older minors, newest first.
older=()
for f in tests/envtest/minors/*/go.mod; do
  [ -f "$f" ] && older+=("$(basename "$(dirname "$f")")")
done
mapfile -t older < <(printf '%s\n' "${older[@]}" | sort -t. -k1,1nr -k2,2nr | grep .)
if [ "${1:-}" = --oldest ]; then
  [ ${#older[@]} -gt 0 ] || { echo "test-matrix: no older minor in tests/envtest/minors" >&2; exit 2; }
  echo "${older[-1]}"
  exit 0
fi

# The time in microseconds since the epoch.
now_us() { echo "${EPOCHREALTIME//[.,]/}"; }

# stage_time START NAME RESULT: a line for STAGE_TIMES (START from now_us).
stage_time() {
  [ -z "${STAGE_TIMES:-}" ] || printf '%s\t%s\t%s\t%s\n' "$1" "$((($(now_us) - $1) / 1000000))" "$2" "$3" >>"$STAGE_TIMES"
}

# release MINOR -> the Kubernetes release its module file pins.
release() {
  local mod=tests/envtest/go.mod
  [ "$1" = "$newest_minor" ] || mod="tests/envtest/minors/$1/go.mod"
  awk '$1 == "k8s.io/kubernetes" { print $2; exit }' "$mod"
}

# --one MINOR: the suite on one minor, in a process of its own (so that errexit holds: a build or
# start that fails fails the minor).
if [ "${1:-}" = --one ]; then
  m="$2"
  shift 2
  export ENVTEST_MINOR="" ENVTEST_DIR="$ROOT/target/envtest-matrix-$m"
  [ "$m" = "$newest_minor" ] || ENVTEST_MINOR="$m"
  trap 'bash hack/cluster-down.sh >/dev/null 2>&1 || true' EXIT
  started=$(now_us)
  bash hack/build-envtest.sh kube-apiserver etcd kubectl emitter
  stage_time "$started" "Kubernetes $(release "$m"): binaries" ok
  started=$(now_us)
  bash hack/cluster-down.sh >/dev/null 2>&1 || true   # a leftover of an interrupted run
  bash hack/cluster-up.sh
  stage_time "$started" "Kubernetes $(release "$m"): cluster up" ok
  # shellcheck disable=SC1091
  . "$ENVTEST_DIR/cluster.env"
  served="$("$KUBECTL" --kubeconfig "$KUBECONFIG" version -o json \
    | python3 -c 'import json,sys; print(json.load(sys.stdin)["serverVersion"]["gitVersion"])')"
  echo "test-matrix: the API server reports $served"
  [ "$served" = "$(release "$m")" ] || { echo "test-matrix: expected $(release "$m"), got $served" >&2; exit 1; }
  EVENT_SERIES_E2E_KUBECONFIG="$KUBECONFIG" cargo test --test e2e -- "$@"
  exit 0
fi

OUT="${MATRIX_OUT:-$ROOT/target/matrix}"
case "$OUT" in /*) ;; *) OUT="$ROOT/$OUT" ;; esac
mkdir -p "$OUT"
if [ -n "${MATRIX_MINORS:-}" ]; then
  read -r -a minors <<<"$MATRIX_MINORS"
elif [ "${MATRIX_OLDEST:-0}" = 1 ]; then
  [ ${#older[@]} -gt 0 ] || { echo "test-matrix: no older minor in tests/envtest/minors" >&2; exit 2; }
  minors=("${older[-1]}")
else
  minors=("$newest_minor" "${older[@]}")
fi
read -r -a filters <<<"${MATRIX_TESTS:-}"
for m in "${minors[@]}"; do
  [ "$m" = "$newest_minor" ] || [ -f "tests/envtest/minors/$m/go.mod" ] \
    || { echo "test-matrix: no module file for $m" >&2; exit 2; }
done

cargo build --test e2e --quiet
status=0
rows=()
for m in "${minors[@]}"; do
  log="$OUT/$m.log"
  echo "test-matrix: Kubernetes $(release "$m") (${filters[*]:-whole suite}); log $log" >&2
  started=$SECONDS
  start_us=$(now_us)
  result=passed
  if ! bash "$0" --one "$m" "${filters[@]}" >"$log" 2>&1; then
    result=FAILED
    status=1
    { echo "---- $m: the end of $log ----"; sed -n '/^failures:$/,$p' "$log" | grep -v '^ *[0-9]*: \|^ *at ' | head -n 60
      tail -n 15 "$log"; } >&2
  fi
  # "test result: ok. 52 passed; 0 failed; ..." -> "52 passed, 0 failed"
  summary="$(grep -E '^test result:' "$log" | tail -n 1 | sed -E 's/.* ([0-9]+) passed; ([0-9]+) failed.*/\1 passed, \2 failed/')"
  echo "test-matrix: $m $result in $((SECONDS - started)) s: ${summary:-no test result (see $log)}" >&2
  counts="$(grep -E '^test result:' "$log" | tail -n 1 | sed -E 's/.* ([0-9]+) passed; ([0-9]+) failed; ([0-9]+) ignored.*/\1 passed, \2 failed, \3 ignored/')"
  if [ "$result" = passed ]; then
    stage_time "$start_us" "Kubernetes $(release "$m"): end-to-end tests" "ok${counts:+: $counts}"
  else
    stage_time "$start_us" "Kubernetes $(release "$m"): end-to-end tests" "FAILED${counts:+: $counts}"
  fi
  rows+=("| $m | $(release "$m") | $result (${summary:-no test result}) | $(date -u +%F) |")
done

{
  echo "| minor | release | end-to-end suite${filters[*]:+ (${filters[*]})} | tested |"
  echo "|---|---|---|---|"
  printf '%s\n' "${rows[@]}"
} | tee "$OUT/versions.md"
exit "$status"
