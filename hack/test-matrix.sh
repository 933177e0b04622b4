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
#
# Writes target/matrix/<minor>.log and target/matrix/versions.md (the README's table: minor,
# release, result, date); exits non-zero when any minor failed.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
command -v go >/dev/null 2>&1 || export PATH="$PATH:/usr/local/go/bin"
OUT="$ROOT/target/matrix"
mkdir -p "$OUT"

newest="$(awk '$1 == "k8s.io/kubernetes" { print $2; exit }' tests/envtest/go.mod)"
newest_minor="${newest#v}"; newest_minor="${newest_minor%.*}"
mapfile -t older < <(ls tests/envtest/minors | sort -t. -k1,1n -k2,2n -r)
if [ -n "${MATRIX_MINORS:-}" ]; then
  read -r -a minors <<<"$MATRIX_MINORS"
elif [ "${MATRIX_OLDEST:-0}" = 1 ]; then
  minors=("${older[-1]}")
else
  minors=("$newest_minor" "${older[@]}")
fi
read -r -a filters <<<"${MATRIX_TESTS:-}"

# release MINOR -> the Kubernetes release its module file pins.
release() {
  local mod=tests/envtest/go.mod
  [ "$1" = "$newest_minor" ] || mod="tests/envtest/minors/$1/go.mod"
  awk '$1 == "k8s.io/kubernetes" { print $2; exit }' "$mod"
}

cargo build --tests --test e2e --quiet
status=0
rows=()
for m in "${minors[@]}"; do
  minor_env=""
  [ "$m" = "$newest_minor" ] || minor_env="$m"
  [ "$m" = "$newest_minor" ] || [ -f "tests/envtest/minors/$m/go.mod" ] || {
    echo "test-matrix: no module file for $m" >&2; exit 2; }
  dir="$ROOT/target/envtest-matrix-$m"
  log="$OUT/$m.log"
  echo "test-matrix: Kubernetes $(release "$m") (${filters[*]:-whole suite}); log $log" >&2
  started=$SECONDS
  result=passed
  if ! (
    export ENVTEST_MINOR="$minor_env" ENVTEST_DIR="$dir"
    trap 'bash hack/cluster-down.sh >/dev/null 2>&1 || true' EXIT
    bash hack/build-envtest.sh kube-apiserver etcd kubectl emitter
    bash hack/cluster-up.sh
    served="$("$( [ -n "$minor_env" ] && echo "target/envtest/bin-$m" || echo target/envtest/bin)/kubectl" \
      --kubeconfig "$dir/kubeconfig" version -o json | python3 -c 'import json,sys; print(json.load(sys.stdin)["serverVersion"]["gitVersion"])')"
    echo "test-matrix: the API server reports $served"
    [ "$served" = "$(release "$m")" ] || { echo "test-matrix: expected $(release "$m"), got $served" >&2; exit 1; }
    EVENT_SERIES_E2E_KUBECONFIG="$dir/kubeconfig" cargo test --test e2e -- "${filters[@]}"
  ) >"$log" 2>&1; then
    result=FAILED
    status=1
  fi
  # "test result: ok. 52 passed; 0 failed; ..." -> "52 passed, 0 failed"
  summary="$(grep -E '^test result:' "$log" | tail -n 1 | sed -E 's/.* ([0-9]+) passed; ([0-9]+) failed.*/\1 passed, \2 failed/')"
  echo "test-matrix: $m $result in $((SECONDS - started)) s: ${summary:-no test result (see $log)}" >&2
  rows+=("| $m | $(release "$m") | $result (${summary:-no test result}) | $(date -u +%F) |")
done

{
  echo "| minor | release | end-to-end suite${filters[*]:+ (${filters[*]})} | tested |"
  echo "|---|---|---|---|"
  printf '%s\n' "${rows[@]}"
} | tee "$OUT/versions.md"
exit "$status"
