#!/usr/bin/env bash
# `just bench-failover`: a leader killed with SIGKILL at a realistic size, on a real kube-apiserver
# (target/envtest-bench-failover).
#   1. stores HISTORY (900,000) raw events of loops that ended 150 minutes ago (1-3 occurrences each, in
#      1,000 namespaces: what most of a cluster's stored events are) and SERIES (100,000) raw events that
#      each count 2 recent occurrences (each a series at once, in 10 namespaces): HISTORY + SERIES stored
#      raw events in all;
#   2. runs two replicas with leader election (--qps/--burst 2000 so that the creates finish quickly;
#      finishAfter, seriesWindow 2h so that nothing finishes), and waits until the leader has written
#      every series object; the leader's RSS then is the steady RSS;
#   3. times the bare paginated lists of the same objects with kubectl (--chunk-size 500, like the
#      operator's pages), the raw events and the series objects, one after the other;
#   4. starts a small raw load (RATE changes a second on 50 other keys, so that there is always a write
#      to make), kills the leader with SIGKILL, and times, from the kill: the standby holding the Lease
#      (its event_series_leader gauge), its engine rebuilt (its log's "recovered; watching"), and its
#      first write answered by the API server (event_series_api_requests_total); with its peak RSS
#      (VmHWM) over that restore.
# Result: bench/results/failover/<date>.json and one line on stdout.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$ROOT/bench/lib.sh"

HISTORY="${HISTORY:-900000}" SERIES="${SERIES:-100000}" RATE="${RATE:-5}"
need_loader
A_PID='' B_PID='' LOAD_PID='' SAMPLER_PID=''
trap 'kill "$LOAD_PID" "$SAMPLER_PID" 2>/dev/null || true; kill -9 "$A_PID" 2>/dev/null || true; stop_pid "$B_PID"; cluster_stop' EXIT

# 10^6 events of about 1 KB each: etcd's default 2 GiB quota holds them, with room for compaction.
# Compaction (etcd's own, and the API server's) every 2 hours, not every 5 minutes: one bare list of
# 10^6 events takes about 6 minutes here, and kubectl, unlike the operator, cannot go on from the
# token a 410 offers; a compaction during the run would also send the leader's watch a 410 and
# make it relist, which is not what this benchmark measures.
cluster_start failover EVENT_TTL=3h \
  "ETCD_EXTRA_ARGS=--quota-backend-bytes=8589934592 --auto-compaction-retention=2h" \
  "APISERVER_EXTRA_ARGS=--etcd-compaction-interval=2h"
machine="$(machine_json)"
k apply --server-side -f "$ROOT/crds/eventseries.dev_eventseriespolicies.yaml" >/dev/null
k wait --for=condition=Established --timeout=60s crd/eventseriespolicies.eventseries.dev >/dev/null
k create namespace event-series-system >/dev/null

t0=$SECONDS
# 150 minutes old: beyond the 2 h seriesWindow of FLAGS below (so they are history, not series) and
# within the 3 h event TTL. (At the loader's default 30 minutes, the first run at 10^6 made 600,000
# of them series, which filled the writer's queue.)
KUBECONFIG="$KUBECONFIG_FILE" "$LOADER" --concurrency 48 history --count "$HISTORY" --age-minutes 150 >/dev/null
log "stored $HISTORY raw events of finished loops in $((SECONDS - t0)) s"
t0=$SECONDS
KUBECONFIG="$KUBECONFIG_FILE" "$LOADER" --concurrency 48 seed --count "$SERIES" >/dev/null
log "stored $SERIES raw events that are series in $((SECONDS - t0)) s"

FLAGS=(--leader-elect --lease-namespace event-series-system --qps 2000 --burst 2000
  --finish-after 2h --series-window 2h)
operator_start "$CLUSTER_DIR/operator-a.log" "${FLAGS[@]}" --instance replica-a
A_PID=$OP_PID A_URL=$OP_URL
for _ in $(seq 300); do [ "$(op_metric event_series_leader)" = 1 ] && break; sleep 0.2; done
[ "$(op_metric event_series_leader)" = 1 ] || die "replica-a did not lead (log $CLUSTER_DIR/operator-a.log)"
operator_start "$CLUSTER_DIR/operator-b.log" "${FLAGS[@]}" --instance replica-b
B_PID=$OP_PID B_URL=$OP_URL B_HEALTH=$OP_HEALTH

# Until the leader has written every series object.
t0=$SECONDS
OP_URL=$A_URL OP_PID=$A_PID
wait_for_creates "$SERIES" "$CLUSTER_DIR/operator-a.log"
sleep 20
steady_rss="$(rss_kib "$A_PID")"
log "replica-a created $SERIES series in $((SECONDS - t0)) s; steady RSS $steady_rss KiB"

# The bare lists of the same objects, as a client pages them.
list_ms() {
  local t n
  t="$(date +%s%N)"
  n="$(k get "$1" -A -l "$2" --chunk-size=500 -o name | wc -l)"
  echo "$n $((($(date +%s%N) - t) / 1000000))"
}
read -r own_n own_ms <<<"$(list_ms events.v1.events.k8s.io app.kubernetes.io/managed-by=event-series)"
read -r raw_n raw_ms <<<"$(list_ms events 'app.kubernetes.io/managed-by!=event-series')"
log "bare lists: $own_n series objects in $own_ms ms, $raw_n raw events in $raw_ms ms"

OP_URL=$B_URL OP_HEALTH=$B_HEALTH
operator_ready || die "the standby is not Ready before the kill"
b_hwm_before="$(hwm_kib "$B_PID")"
KUBECONFIG="$KUBECONFIG_FILE" "$LOADER" --concurrency 4 rate --rate "$RATE" --duration 900 --keys 50 \
  >"$CLUSTER_DIR/load.json" &
LOAD_PID=$!
sleep 5
# Series writes only: api_requests_total also counts the standby's Lease requests.
series_writes() {
  { curl -fsS --max-time 5 "$OP_URL/metrics" || true; } |
    awk '$1 ~ /^event_series_api_requests_total\{verb="(create|patch)",code="2/ { n += $2 } END { printf "%d\n", n }'
}
writes_before="$(series_writes)"
t_kill="$(date +%s%N)"
# The standby's RSS and peak (KiB) every 0.2 s from the kill: where in the restore the peak falls.
timeline="$CLUSTER_DIR/standby-rss.tsv"
(
  while kill -0 "$B_PID" 2>/dev/null; do
    printf '%s %s\n' "$((($(date +%s%N) - t_kill) / 1000000))" \
      "$(awk '/^VmRSS:/ { r = $2 } /^VmHWM:/ { h = $2 } END { print r, h }' "/proc/$B_PID/status")"
    sleep 0.2
  done
) >"$timeline" 2>/dev/null &
SAMPLER_PID=$!
kill -9 "$A_PID"
A_PID=''
ms() { echo $((($(date +%s%N) - t_kill) / 1000000)); }
lease_ms='' restored_ms='' write_ms=''
while [ -z "$write_ms" ] || [ -z "$restored_ms" ]; do
  [ "$(ms)" -lt 1800000 ] || die "the standby did not take over within 30 min (log $CLUSTER_DIR/operator-b.log)"
  kill -0 "$B_PID" || die "the standby exited (log $CLUSTER_DIR/operator-b.log)"
  [ -z "$lease_ms" ] && [ "$(op_metric event_series_leader)" = 1 ] && lease_ms="$(ms)"
  [ -z "$restored_ms" ] && grep -q 'recovered; watching' "$CLUSTER_DIR/operator-b.log" && restored_ms="$(ms)"
  [ -z "$write_ms" ] && [ "$(series_writes)" -gt "$writes_before" ] && write_ms="$(ms)"
  sleep 0.1
done
b_hwm="$(hwm_kib "$B_PID")"
kill "$SAMPLER_PID" 2>/dev/null || true
SAMPLER_PID=''
ready=$([ "$(curl -s -o /dev/null -w '%{http_code}' "$B_HEALTH/readyz")" = 200 ] && echo true || echo false)
log "after SIGKILL: Lease at $lease_ms ms, rebuilt at $restored_ms ms, first write at $write_ms ms; peak RSS $b_hwm KiB (steady $steady_rss)"
phases="$(grep -m1 -F 'recovered; watching' "$CLUSTER_DIR/operator-b.log" | sed 's/\x1b\[[0-9;]*m//g' |
  grep -oE '[a-z_]+=[0-9]+' | jq -Rn '[inputs | split("=") | {(.[0]): (.[1] | tonumber)}] | add // {}')"

mkdir -p "$ROOT/bench/results/failover"
out="$ROOT/bench/results/failover/$(date -u +%Y%m%dT%H%M%SZ).json"
# When the peak was reached, and the RSS every second (ms after the kill, KiB).
peak_at="$(awk -v hwm="$b_hwm" '$3 >= hwm { print $1; exit }' "$timeline")"
rss_timeline="$(awk '$1 >= next_ms { printf "%s[%d,%d]", sep, $1, $2; sep = ","; next_ms = $1 + 1000 }' "$timeline")"
jq -n --arg commit "$BENCH_COMMIT" --argjson machine "$machine" \
  --argjson history "$HISTORY" --argjson series "$SERIES" --arg flags "${FLAGS[*]}" \
  --argjson own_n "$own_n" --argjson own_ms "$own_ms" --argjson raw_n "$raw_n" --argjson raw_ms "$raw_ms" \
  --argjson lease "$lease_ms" --argjson restored "$restored_ms" --argjson write "$write_ms" \
  --argjson steady "$steady_rss" --argjson hwm_before "$b_hwm_before" --argjson hwm "$b_hwm" \
  --argjson ready "$ready" --argjson phases "$phases" \
  --argjson peak_at "${peak_at:-null}" --argjson rss_timeline "[$rss_timeline]" \
  '{commit: $commit, machine: $machine, stored_raw_events: ($history + $series), series: $series,
    flags: $flags,
    bare_list_ms: {series_objects: $own_ms, raw_events: $raw_ms, both: ($own_ms + $raw_ms),
                   objects: {series_objects: $own_n, raw_events: $raw_n}},
    after_sigkill_ms: {lease: $lease, rebuilt: $restored, first_write: $write},
    rebuild_over_bare_lists: (($restored - $lease) / ($own_ms + $raw_ms) * 1000 | round / 1000),
    rss_kib: {leader_steady: $steady, standby_peak_before: $hwm_before, standby_peak_after_restore: $hwm},
    peak_over_steady: ($hwm / $steady * 1000 | round / 1000), standby_ready_after: $ready,
    restore_phases: $phases, standby_peak_at_ms: $peak_at, standby_rss_timeline_ms_kib: $rss_timeline}' >"$out"
echo "failover: $((HISTORY + SERIES)) raw events, $SERIES series: Lease $lease_ms ms, rebuilt $restored_ms ms, first write $write_ms ms after SIGKILL; bare lists $own_ms + $raw_ms ms; peak RSS $b_hwm KiB vs steady $steady_rss KiB ($out)"
