#!/usr/bin/env bash
# `just bench-restore-buffer`: what the restart buffer (`--restart-buffer-bytes`) costs a restore, side
# by side on one real kube-apiserver (target/envtest-bench-restore-buffer). Stores HISTORY (400,000)
# raw events of loops that ended 150 minutes ago (1,000 namespaces) and SERIES (100,000) raw events
# that are series at once (10 namespaces); one operator creates every series object, and its RSS
# 20 s later is the steady RSS; it is then killed with SIGKILL. Then, ROUNDS (2) times, each of
# BUFFERS ("64Mi 8Mi") in turn (in reverse order in even rounds, so that drift favours none): a new process with that buffer, timed from its start to "recovered;
# watching" (every own object restored, every raw event listed and replayed), its peak RSS (VmHWM)
# by then and its RSS 15 s later; then killed. The flags of bench/failover.sh, and heartbeats every
# 2 h so that no heartbeat falls due during the restarts.
# FLAG (default --restart-buffer-bytes) with VALUES (default BUFFERS) alternates another flag the same
# way, for example FLAG=--max-key-bytes VALUES="64Mi 32Mi": whether a default changed a restore's time
# is then measured side by side, not read across two runs on two machines.
# Result: bench/results/restore-buffer/<date>.json (another FLAG: bench/results/restore-<flag>/) and
# one line per restart on stdout.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$ROOT/bench/lib.sh"

HISTORY="${HISTORY:-400000}" SERIES="${SERIES:-100000}" ROUNDS="${ROUNDS:-2}" BUFFERS="${BUFFERS:-64Mi 8Mi}"
FLAG="${FLAG:---restart-buffer-bytes}" VALUES="${VALUES:-$BUFFERS}"
RESULTS="$ROOT/bench/results/restore-buffer"
[ "$FLAG" = --restart-buffer-bytes ] || RESULTS="$ROOT/bench/results/restore-${FLAG#--}"
need_loader
OP_PID=''
trap 'kill -9 "$OP_PID" 2>/dev/null || true; cluster_stop' EXIT
# 100,000 series, twice the default bound (--max-active-series, where no policy applies), their creates
# all queued at once (--max-pending-writes: past the default 50,000 the newest are shed until their
# next write). --event-ttl 3h as the API server's: at the default 1h the operator spaces heartbeats
# at most 45 minutes (three quarters of the TTL) whatever --heartbeat-interval says, and 100,000
# series created together would all be written again 45 minutes later, in the middle of a run.
FLAGS=(--qps 2000 --burst 2000 --finish-after 2h --series-window 2h --heartbeat-interval 2h --max-active-series 100000
  --max-pending-writes 100000 --event-ttl 3h)

cluster_start restore-buffer EVENT_TTL=3h \
  "ETCD_EXTRA_ARGS=--quota-backend-bytes=8589934592 --auto-compaction-retention=2h" \
  "APISERVER_EXTRA_ARGS=--etcd-compaction-interval=2h"
k apply --server-side -f "$ROOT/crds/eventseries.dev_eventseriespolicies.yaml" >/dev/null
k wait --for=condition=Established --timeout=60s crd/eventseriespolicies.eventseries.dev >/dev/null
[ "$HISTORY" = 0 ] || KUBECONFIG="$KUBECONFIG_FILE" "$LOADER" --concurrency 48 history --count "$HISTORY" --age-minutes 150 >/dev/null
KUBECONFIG="$KUBECONFIG_FILE" "$LOADER" --concurrency 48 seed --count "$SERIES" >/dev/null
log "stored $HISTORY + $SERIES raw events"

operator_start "$CLUSTER_DIR/operator-first.log" "${FLAGS[@]}"
wait_for_creates "$SERIES" "$CLUSTER_DIR/operator-first.log"
sleep 20
steady="$(rss_kib "$OP_PID")"
kill -9 "$OP_PID"
wait "$OP_PID" 2>/dev/null || true
log "$SERIES series created; steady RSS $steady KiB"

runs=()
for round in $(seq "$ROUNDS"); do
  order="$VALUES"
  # shellcheck disable=SC2086 # VALUES is a list of values, split on its spaces
  [ $((round % 2)) = 0 ] && order="$(printf '%s\n' $VALUES | tac | xargs)"
  for value in $order; do
    logfile="$CLUSTER_DIR/operator-$value-$round.log"
    load="$(cut -d' ' -f1 /proc/loadavg)"
    t0="$(date +%s%N)"
    operator_start "$logfile" "${FLAGS[@]}" "$FLAG" "$value"
    until grep -q 'recovered; watching' "$logfile"; do
      kill -0 "$OP_PID" || die "the operator exited (log $logfile)"
      [ $((($(date +%s%N) - t0) / 1000000000)) -lt 1800 ] || die "no rebuild within 30 min (log $logfile)"
      sleep 0.1
    done
    ms=$((($(date +%s%N) - t0) / 1000000))
    peak="$(hwm_kib "$OP_PID")"
    sleep 15
    after="$(rss_kib "$OP_PID")"
    kill -9 "$OP_PID"
    wait "$OP_PID" 2>/dev/null || true
    flushes="$(grep -m1 -F 'recovered; watching' "$logfile" | grep -oE 'flushes=[0-9]+' | cut -d= -f2)"
    ratio="$(awk -v p="$peak" -v s="$steady" 'BEGIN { printf "%.3f", p / s }')"
    echo "restore-buffer: $FLAG $value round $round: rebuilt in $ms ms, $flushes early replays, peak RSS $peak KiB (${ratio}x the steady $steady KiB), $after KiB 15 s later"
    runs+=("$(printf '{"value":"%s","round":%s,"rebuilt_ms":%s,"flushes":%s,"peak_rss_kib":%s,"rss_after_15s_kib":%s,"peak_over_steady":%s,"loadavg_1m":%s}' \
      "$value" "$round" "$ms" "${flushes:-0}" "$peak" "$after" "$ratio" "$load")")
  done
done

mkdir -p "$RESULTS"
out="$RESULTS/$(date -u +%Y%m%dT%H%M%SZ).json"
printf '%s\n' "${runs[@]}" | jq -s --arg commit "$BENCH_COMMIT" \
  --argjson machine "$(machine_json)" --arg flags "${FLAGS[*]}" --arg flag "$FLAG" \
  --argjson history "$HISTORY" --argjson series "$SERIES" --argjson steady "$steady" \
  '{commit: $commit, machine: $machine, flags: $flags, flag: $flag, stored_raw_events: ($history + $series),
    series: $series, leader_steady_rss_kib: $steady, runs: .}' >"$out"
log "done: $out"
