#!/usr/bin/env bash
# `just bench-heartbeats`: heartbeats above the writer's pace, scaled by ten. 100,000 series (a policy
# at twice the default bound) at a 30-minute heartbeat need 55.6 writes a second, above the default
# --qps 50; here SERIES (10,000) series at a 3-minute heartbeat, the same ratio, at the default
# --qps and --burst, with the event TTL scaled too (6 minutes, on the apiserver and as --event-ttl).
# The operator paces heartbeats at 3/4 of --qps, never more than 3/4 of the TTL apart. For MINUTES
# (15) after the seed, every 15 s: the series objects stored (an object whose TTL ran out would be
# gone), writes pending, creates and patches.
# Then, from the apiserver's audit log, the longest time between two writes of one series object
# (must stay under the TTL), and while it all runs a raw-event load of RATE changes a second on other
# keys whose occurrences must all be counted (intake never stalls).
# Result: bench/results/heartbeats/<date>.json and one line on stdout.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$ROOT/bench/lib.sh"

SERIES="${SERIES:-10000}" MINUTES="${MINUTES:-15}" RATE="${RATE:-5}"
need_loader
OP_PID='' LOAD_PID=''
trap 'kill "$LOAD_PID" 2>/dev/null || true; stop_pid "$OP_PID"; cluster_stop' EXIT

cluster_start heartbeats EVENT_TTL=6m
machine="$(machine_json)"
FLAGS=(--heartbeat-interval 3m --finish-after 1h --series-window 1h --event-ttl 6m)
KUBECONFIG="$KUBECONFIG_FILE" "$LOADER" --concurrency 32 seed --count "$SERIES" >/dev/null
log "seeded $SERIES raw events, each a series at once; operator ${FLAGS[*]} (default --qps 50 --burst 100)"
operator_start "$CLUSTER_DIR/operator.log" "${FLAGS[@]}"
# A steady raw load on other keys, all run long: its occurrences must all be counted.
KUBECONFIG="$KUBECONFIG_FILE" "$LOADER" --concurrency 4 rate --rate "$RATE" --duration $((MINUTES * 60)) \
  --keys 50 >"$CLUSTER_DIR/load.json" &
LOAD_PID=$!

# The series objects stored now, counted over a paginated list (the API server gives no
# remainingItemCount with a label selector).
stored() {
  k get events.v1.events.k8s.io -A -l app.kubernetes.io/managed-by=event-series -o name --chunk-size=1000 | wc -l
}
samples=()
min_stored=-1 max_pending=0
start=$SECONDS
while [ $((SECONDS - start)) -lt $((MINUTES * 60)) ]; do
  sleep 15
  kill -0 "$OP_PID" 2>/dev/null || die "the operator exited (log $CLUSTER_DIR/operator.log)"
  s="$(stored)"
  p="$(op_metric event_series_writes_pending)"
  c="$(op_metric 'event_series_api_requests_total{verb="create",code="201"}')"
  h="$(op_metric 'event_series_api_requests_total{verb="patch",code="200"}')"
  gone="$(op_metric 'event_series_api_requests_total{verb="patch",code="404"}')"
  t=$((SECONDS - start))
  samples+=("{\"t\":$t,\"stored\":$s,\"pending\":${p%.*},\"creates\":${c%.*},\"patches\":${h%.*},\"patch_404\":${gone%.*}}")
  # Once every series has been created, none may disappear.
  if [ "${c%.*}" -ge "$SERIES" ] && { [ "$min_stored" -lt 0 ] || [ "$s" -lt "$min_stored" ]; }; then min_stored="$s"; fi
  [ "${p%.*}" -gt "$max_pending" ] && max_pending="${p%.*}"
  log "$t s: stored $s, pending ${p%.*}, creates ${c%.*}, patches ${h%.*}, patch 404 ${gone%.*}"
done
wait "$LOAD_PID" || true
LOAD_PID=''
sleep 5
occ="$(op_metric event_series_occurrences_total)"
lat_sum="$(op_metric 'event_series_write_latency_seconds_sum{kind="heartbeat"}')"
lat_n="$(op_metric 'event_series_write_latency_seconds_count{kind="heartbeat"}')"
# The longest time between two writes of one series object, as the apiserver logged them.
gaps="$(python3 "$ROOT/bench/write_gaps.py" "$CLUSTER_DIR" 360)"
# Objects that outlived their TTL between two writes: a patch answered 404, then created again.
gone="$(op_metric 'event_series_api_requests_total{verb="patch",code="404"}')"
creates="$(op_metric 'event_series_api_requests_total{verb="create",code="201"}')"
verdict="every object written again within the TTL"
if [ "${gone%.*}" -gt 0 ] || python3 -c "import json,sys; sys.exit(json.loads(sys.argv[1])['longest_gap_s'] <= 360)" "$gaps"; then
  verdict="MISSED: objects outlived the TTL between two writes"
fi
mkdir -p bench/results/heartbeats
out="bench/results/heartbeats/$(date -u +%Y%m%dT%H%M%SZ).json"
cat >"$out" <<EOF
{"commit": "$BENCH_COMMIT", "machine": $machine, "series": $SERIES, "minutes": $MINUTES,
 "flags": "${FLAGS[*]} (default --qps 50 --burst 100), apiserver --event-ttl 6m",
 "min_stored_after_creates": $min_stored, "max_pending": $max_pending,
 "heartbeat_latency_mean_s": $(python3 -c "print(round($lat_sum / max($lat_n, 1), 2))"), "heartbeats": ${lat_n%.*},
 "patch_404": ${gone%.*}, "creates": ${creates%.*}, "verdict": "$verdict",
 "audit": $gaps, "load": $(cat "$CLUSTER_DIR/load.json"), "occurrences_counted": ${occ%.*},
 "samples": [$(IFS=,; echo "${samples[*]}")]}
EOF
echo "heartbeats: $SERIES series, 3m interval, qps 50, TTL 6m, $MINUTES min: fewest stored after the creates $min_stored, most pending $max_pending, ${lat_n%.*} heartbeats (mean wait $(python3 -c "print(round($lat_sum / max($lat_n, 1), 2))") s); audit $gaps; $verdict ($out)"
