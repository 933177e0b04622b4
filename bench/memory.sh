#!/usr/bin/env bash
# Memory and restart of the operator on a real kube-apiserver (target/envtest-bench-memory):
#   1. seeds SMALL legacy raw events, each already counting 2 recent occurrences of its own Pod (so each
#      is a series at once), runs the operator, waits until it has created every series object, and
#      reads its RSS (/proc/<pid>/status VmRSS, and VmHWM, the peak);
#   2. restart: stops it (SIGTERM) and starts it again, and times process start -> /readyz 200 (the
#      engine rebuilt from the SMALL Ongoing series objects and the raw events, paginated lists);
#   3. seeds LARGE - SMALL more, waits for LARGE active series, reads the RSS again, and times a
#      restart at LARGE as well.
# The operator runs with --qps/--burst 2000 (so its creates finish quickly) and finishAfter,
# seriesWindow and heartbeatInterval of 2h (nothing finishes or heartbeats during the run).
#
# Usage: bench/memory.sh        Environment: SMALL (10000) LARGE (100000) OUT (bench/results)
# Result: $OUT/memory.json
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$ROOT/bench/lib.sh"

SMALL="${SMALL:-10000}" LARGE="${LARGE:-100000}" OUT="${OUT:-$ROOT/bench/results}"
LOADER="$TARGET/release/examples/bench-loader"
[ -x "$LOADER" ] || die "no $LOADER: cargo build --release --example bench-loader"
[ -x "$OPERATOR" ] || die "no $OPERATOR: cargo build --release"
mkdir -p "$OUT"
OP_PID=''
trap 'stop_pid "$OP_PID"; cluster_stop' EXIT

cluster_start memory EVENT_TTL=3h
k apply --server-side -f "$ROOT/crds/eventseries.dev_eventseriespolicies.yaml" >/dev/null
k wait --for=condition=Established --timeout=60s crd/eventseriespolicies.eventseries.dev >/dev/null
OPFLAGS=(--qps 2000 --burst 2000 --finish-after 2h --series-window 2h --heartbeat-interval 2h)
creates() { op_metric 'event_series_api_requests_total{verb="create",code="201"}'; }

# seed FIRST COUNT
seed() {
  local t0=$SECONDS out
  out="$(KUBECONFIG="$KUBECONFIG_FILE" "$LOADER" --concurrency 32 seed --first "$1" --count "$2")"
  log "seeded $2 raw events in $((SECONDS - t0))s: $out"
}

# wait_series N CREATES: until N series are active and this process made CREATES creates.
wait_series() {
  local t0=$SECONDS active c
  while :; do
    active="$(op_metric event_series_series_active)"
    c="$(creates)"
    [ "${active%.*}" -ge "$1" ] && [ "${c%.*}" -ge "$2" ] && break
    [ $((SECONDS - t0)) -lt 1800 ] || die "only $active active series, $c creates after 1800s"
    kill -0 "$OP_PID" 2>/dev/null || die "the operator exited (log $CLUSTER_DIR/operator-*.log)"
    sleep 2
  done
  log "$1 series active, $c creates, after $((SECONDS - t0))s"
}

# measure N: RSS now (after a pause, so allocations from the bursts settle) as JSON.
measure() {
  sleep 10
  local rss hwm
  rss="$(rss_kib "$OP_PID")"
  hwm="$(hwm_kib "$OP_PID")"
  log "$1 active series: VmRSS $rss KiB, VmHWM $hwm KiB"
  printf '{"series":%s,"vmrss_kib":%s,"vmhwm_kib":%s,"cpu_ticks":%s,"machine":%s}' \
    "$1" "$rss" "$hwm" "$(cpu_ticks "$OP_PID")" "$(machine_json)"
}

# restart N: SIGTERM, then time a new process from exec to /readyz 200. Sets RESTART (JSON); runs in
# this shell (not in $(...)), so that OP_PID and OP_URL name the new process afterwards.
restart() {
  stop_pid "$OP_PID"
  local logfile="$CLUSTER_DIR/operator-restart-$1.log" t0 t1 ms
  t0="$(date +%s%N)"
  operator_start "$logfile" "${OPFLAGS[@]}"
  until operator_ready; do
    kill -0 "$OP_PID" 2>/dev/null || die "the operator exited (log $logfile)"
    sleep 0.02
  done
  t1="$(date +%s%N)"
  ms=$(((t1 - t0) / 1000000))
  local active restored
  active="$(op_metric event_series_series_active)"
  restored="$(grep -o 'own series objects restored.*' "$logfile" | head -1)"
  log "restart with $1 series: ready after ${ms} ms, $active active ($restored)"
  RESTART="$(printf '{"series":%s,"ready_ms":%s,"active_after":%s,"log":"%s","machine":%s}' \
    "$1" "$ms" "${active%.*}" "${restored//\"/\'}" "$(machine_json)")"
}

seed 0 "$SMALL"
operator_start "$CLUSTER_DIR/operator-first.log" "${OPFLAGS[@]}"
wait_series "$SMALL" "$SMALL"
m_small="$(measure "$SMALL")"
restart "$SMALL"
r_small="$RESTART"
m_small_after="$(measure "$SMALL")"
seed "$SMALL" $((LARGE - SMALL))
wait_series "$LARGE" $((LARGE - SMALL))
m_large="$(measure "$LARGE")"
restart "$LARGE"
r_large="$RESTART"
m_large_after="$(measure "$LARGE")"
jq -n --argjson a "$m_small" --argjson b "$r_small" --argjson c "$m_small_after" \
  --argjson d "$m_large" --argjson e "$r_large" --argjson f "$m_large_after" \
  '{memory: [$a, $d], restart: [$b, $e], memory_after_restart: [$c, $f],
    operator_flags: "--qps 2000 --burst 2000 --finish-after 2h --series-window 2h --heartbeat-interval 2h"}' \
  >"$OUT/memory.json"
log "done: $OUT/memory.json"
