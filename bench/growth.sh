#!/usr/bin/env bash
# `just bench-growth`: how the operator grows, on a real kube-apiserver (target/envtest-bench-growth),
# one fresh control plane per axis (per step for namespaces). At each point: the operator's steady
# RSS, then a restart (SIGTERM, a new process, timed from its start to /readyz 200: its own series
# objects and every raw event listed and replayed) with the new process' peak RSS (VmHWM) by then.
#   series:     SERIES_STEPS (1000 10000 100000) series in 10 namespaces, seeded one step onto the last;
#   stored:     1,000 series beside STORED_STEPS (10000 100000 1000000) stored raw events of loops that
#               ended 150 minutes ago (beyond the 2 h seriesWindow of FLAGS, within the 3 h TTL: what
#               most of a cluster's events are), added step by step;
#   namespaces: 10,000 series spread over NS_STEPS (10 100 1000 10000) namespaces;
#   message:    MSG_RATE (20) changes a second of legacy (kubelet-style) raw events for MSG_SECONDS (60)
#               with messages of MSG_STEPS (100 10000 1000000) bytes: the operator's CPU per change
#               (the note is cut to 1,024 bytes once decoded; changes include the 100 creates), less
#               its CPU idle right before, scaled to the same length of time. Legacy events, since the API server refuses a new-style event's message
#               beyond 1,024 bytes.
# AXES picks some (default "series stored namespaces message"). Result: bench/results/growth/<date>.json;
# docs/growth.svg is drawn from it by bench/plot_growth.py.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$ROOT/bench/lib.sh"

AXES="${AXES:-series stored namespaces message}"
SERIES_STEPS="${SERIES_STEPS:-1000 10000 100000}" STORED_STEPS="${STORED_STEPS:-10000 100000 1000000}"
NS_STEPS="${NS_STEPS:-10 100 1000 10000}" MSG_STEPS="${MSG_STEPS:-100 10000 1000000}" MSG_RATE="${MSG_RATE:-20}" MSG_SECONDS="${MSG_SECONDS:-60}"
need_loader
OP_PID=''
trap 'stop_pid "$OP_PID"; cluster_stop' EXIT
# Up to 100,000 series, twice the default bound (--max-active-series, where no policy applies), their creates
# all queued at once (--max-pending-writes: past the default 50,000 the newest are shed until their
# next write). --event-ttl 3h as the API server's: at the default 1h the operator spaces heartbeats
# at most 45 minutes (three quarters of the TTL) whatever --heartbeat-interval says, and 100,000
# series created together would all be written again 45 minutes later, in the middle of a run.
FLAGS=(--qps 2000 --burst 2000 --finish-after 2h --series-window 2h --heartbeat-interval 2h --max-active-series 100000
  --max-pending-writes 100000 --event-ttl 3h)
loader() { KUBECONFIG="$KUBECONFIG_FILE" "$LOADER" --concurrency 48 "$@"; }
load() { loader "$@" >/dev/null; }

fresh() {
  cluster_stop 2>/dev/null || true
  cluster_start growth EVENT_TTL=3h "ETCD_EXTRA_ARGS=--quota-backend-bytes=8589934592"
  k apply --server-side -f "$ROOT/crds/eventseries.dev_eventseriespolicies.yaml" >/dev/null
  k wait --for=condition=Established --timeout=60s crd/eventseriespolicies.eventseries.dev >/dev/null
  operator_start "$CLUSTER_DIR/operator.log" "${FLAGS[@]}"
}

# settle N: until N series are active and the writer has owed nothing for 10 s in a row, so that
# the steady RSS is the idle operator's, not one taken mid-create (the writer's queue and its
# requests in flight are memory too).
settle() {
  local t0=$SECONDS quiet=0
  until [ "$(op_metric event_series_series_active | cut -d. -f1)" -ge "$1" ] && [ "$quiet" -ge 10 ]; do
    [ $((SECONDS - t0)) -lt 1800 ] || die "fewer than $1 series, or writes still pending, after 30 min"
    kill -0 "$OP_PID" || die "the operator exited (log $CLUSTER_DIR/operator.log)"
    if [ "$(op_metric event_series_writes_pending | cut -d. -f1)" = 0 ]; then
      quiet=$((quiet + 1))
    else
      quiet=0
    fi
    sleep 1
  done
}

# point AXIS X SERIES STORED: steady RSS, then a timed restart; appends one JSON object to
# `points`. Runs in this shell (not in $(...)), so that OP_PID names the new process afterwards.
point() {
  local rss t0 ms hwm
  settle "$3"
  rss="$(rss_kib "$OP_PID")"
  stop_pid "$OP_PID"
  t0="$(date +%s%N)"
  operator_start "$CLUSTER_DIR/operator.log" "${FLAGS[@]}"
  until operator_ready; do
    kill -0 "$OP_PID" || die "the operator exited (log $CLUSTER_DIR/operator.log)"
    sleep 0.02
  done
  ms=$((($(date +%s%N) - t0) / 1000000))
  hwm="$(hwm_kib "$OP_PID")"
  log "$1 $2: $3 series, $4 stored raw events: steady RSS $rss KiB; restart $ms ms, peak RSS $hwm KiB"
  points+=("$(printf '{"axis":"%s","x":%s,"series":%s,"stored":%s,"steady_rss_kib":%s,"restart_ms":%s,"restart_peak_rss_kib":%s,"machine":%s}' \
    "$1" "$2" "$3" "$4" "$rss" "$ms" "$hwm" "$(machine_json)")")
}

points=()
for axis in $AXES; do
  case "$axis" in
  series)
    fresh
    last=0
    for n in $SERIES_STEPS; do
      load seed --first "$last" --count $((n - last))
      last=$n
      point series "$n" "$n" "$n"
    done
    ;;
  stored)
    fresh
    load seed --count 1000
    last=0
    for n in $STORED_STEPS; do
      load history --count $((n - last)) --first "$last" --age-minutes 150
      last=$n
      point stored "$n" 1000 $((n + 1000))
    done
    ;;
  namespaces)
    for n in $NS_STEPS; do
      fresh
      load seed --count 10000 --namespaces "$n"
      point namespaces "$n" 10000 10000
    done
    ;;
  message)
    fresh
    until operator_ready; do sleep 0.2; done
    sleep 10
    for bytes in $MSG_STEPS; do
      # The operator's own CPU without changes (ticks, heartbeats, metrics), scaled below to the
      # length of the loaded window (which also holds the loader's start and its 100 creates).
      before="$(cpu_ticks "$OP_PID")" t0="$(date +%s%N)"
      sleep $((MSG_SECONDS + 5))
      idle=$(($(cpu_ticks "$OP_PID") - before)) idle_ns=$(($(date +%s%N) - t0))
      before="$(cpu_ticks "$OP_PID")" seen="$(op_metric event_series_occurrences_total | cut -d. -f1)" t0="$(date +%s%N)"
      # What the loader wrote beside what the operator counted: a slow API server takes fewer large
      # messages in the same time, and the CPU per change is then over fewer changes.
      wrote="$(loader rate --legacy --rate "$MSG_RATE" --duration "$MSG_SECONDS" --keys 100 --namespace "msg-$bytes" \
        --message-bytes "$bytes")"
      sleep 5
      ticks=$(($(cpu_ticks "$OP_PID") - before))
      idle=$((idle * ($(date +%s%N) - t0) / idle_ns))
      changes=$(($(op_metric event_series_occurrences_total | cut -d. -f1) - seen))
      log "message $bytes B: $changes changes, $ticks CPU ticks ($idle idle); loader: $wrote"
      points+=("$(printf '{"axis":"message","x":%s,"changes":%s,"planned":%s,"loader":%s,"cpu_ticks":%s,"idle_ticks":%s,"clk_tck":%s,"cpu_us_per_change":%s,"rss_kib":%s,"machine":%s}' \
        "$bytes" "$changes" $((MSG_RATE * MSG_SECONDS + 100)) "$wrote" "$ticks" "$idle" "$(getconf CLK_TCK)" \
        "$(awk -v t="$ticks" -v i="$idle" -v c="$changes" -v h="$(getconf CLK_TCK)" 'BEGIN { d = t - i; if (d < 0) d = 0; printf "%.1f", c ? d / h * 1e6 / c : 0 }')" \
        "$(rss_kib "$OP_PID")" "$(machine_json)")")
    done
    ;;
  *) die "unknown axis $axis" ;;
  esac
done

mkdir -p "$ROOT/bench/results/growth"
out="$ROOT/bench/results/growth/$(date -u +%Y%m%dT%H%M%SZ).json"
printf '%s\n' "${points[@]}" | jq -s --arg commit "$BENCH_COMMIT" \
  --argjson machine "$(machine_json)" --arg flags "${FLAGS[*]}" \
  '{commit: $commit, machine: $machine, flags: $flags, points: .}' >"$out"
log "done: $out"
