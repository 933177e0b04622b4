#!/usr/bin/env bash
# A tenant's flood of 1 MB messages against the operator's memory: 300 legacy raw events carrying
# 1 MB messages, then the same with 100-byte messages, each on a private kube-apiserver
# (target/envtest-e2e-flood); the operator's peak RSS (VmHWM) while it watches them arrive and
# after a restart that lists them all (pages sized by --list-page-bytes, 1Mi by default). The
# measurement is the end-to-end test `flood::one_mb_messages_cost_no_more_memory_than_short_ones`,
# run here against the release build, RUNS times; its figures go to the JSON.
#
# Usage: bench/flood.sh        Environment: RUNS (3) OUT (bench/results)
# Result: $OUT/flood.json
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$ROOT/bench/lib.sh"
RUNS="${RUNS:-3}" OUT="${OUT:-$ROOT/bench/results}"
mkdir -p "$OUT"
cd "$ROOT"
bash hack/build-envtest.sh >&2
runs=()
for i in $(seq "$RUNS"); do
  log "flood run $i of $RUNS"
  # The test starts a cluster of its own.
  out="$(cargo test --release --quiet --test e2e flood::one_mb -- --nocapture 2>&1)" || {
    printf '%s\n' "$out" >&2
    die "flood run $i failed"
  }
  line() { printf '%s\n' "$out" | sed -n "s/^flood $1: .*peak \([0-9]*\) KiB watching, \([0-9]*\) KiB after a restart$/\1 \2/p"; }
  read -r sw sr <<<"$(line short)"
  read -r lw lr <<<"$(line long)"
  [ -n "${sw:-}" ] && [ -n "${lw:-}" ] || die "no figures in the output of run $i"
  runs+=("{\"short_watch_kib\": $sw, \"short_restart_kib\": $sr, \"long_watch_kib\": $lw, \"long_restart_kib\": $lr}")
  log "100 B: $sw KiB watching, $sr KiB restarted; 1 MB: $lw KiB watching, $lr KiB restarted"
done
{
  printf '{"machine": %s, "events": 300, "messages": [100, 1000000], "list_page_bytes": "1Mi", "runs": [' "$(machine_json)"
  (IFS=,; printf '%s' "${runs[*]}")
  printf ']}\n'
} >"$OUT/flood.json"
keep_dated flood "$OUT/flood.json"
log "wrote $OUT/flood.json"
