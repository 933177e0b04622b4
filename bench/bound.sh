#!/usr/bin/env bash
# `just bench-bound`: the default bound at its real size, with every other bound full at once.
# bench/heartbeats.sh scales a bound above the pace by ten; this runs the default as shipped: SERIES (50,000, the default
# maxActiveSeries) loops, each an occurrence every ROTATE_S (300) seconds, so that none finishes
# under the default finishAfter (6m), spread over NAMESPACES (100) namespaces, under the default
# policy and flags (heartbeatInterval 30m, firstRefresh 1m, --qps 50, --burst 100, --event-ttl 1h on
# the operator and the API server). The API server deletes an Event an hour after its last write:
# a series object not written again within the hour is gone.
#
# The other bounds are filled too, before the loops start:
# - candidates: LONE (100,000) one-off events in 10 namespaces, as many as the candidate table holds
#   (twice maxActiveSeries);
# - key bytes: LONE_AT_LIMIT (15,000) one-off events whose every key field is at its API limit, in 5
#   namespaces: about 69 MB of keys and notes against --max-key-bytes 32Mi. These namespaces hold
#   the most bytes, so the budget gives up their keys, never the loops';
# - alerts: a policy alerting on every loop, with the default --max-alerts 10,000 and
#   --max-alerts-per-namespace 100 (100 namespaces fill it), posted to an Alertmanager URL where
#   nothing listens, so that the outbox fills and its posts are retried throughout;
# - pending writes: 50,000 creates at --qps 50 keep up to every series' write pending;
# - the restart buffer: at the end the operator is restarted (SIGTERM, a new process) beside
#   everything stored, and the new process's first list goes through --restart-buffer-bytes (8Mi).
#
# MINUTES (110) from the start of the loops: the creates (about 17 min at --qps 50), then a
# heartbeat cycle (30m) and the TTL (1h). Every 30 s: the operator's RSS and peak (VmHWM), writes
# pending, creates, patches and patches answered 404 (an object gone); every 30 min the series
# objects stored (a list that reads every stored Event, so not more often). Then, from the API server's audit log, every series object's longest time between
# two writes (an object not written since: to the end of the log) against the TTL, and the
# occurrences counted against those written. Result: bench/results/bound/<date>.json; a line on
# stdout. About 2 h.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$ROOT/bench/lib.sh"

SERIES="${SERIES:-50000}" NAMESPACES="${NAMESPACES:-100}" ROTATE_S="${ROTATE_S:-300}"
LONE="${LONE:-100000}" LONE_AT_LIMIT="${LONE_AT_LIMIT:-15000}" MINUTES="${MINUTES:-110}"
TTL_S=3600 LIMIT_MIB=256
need_loader
OP_PID='' LOAD_PID=''
trap 'kill "$LOAD_PID" 2>/dev/null || true; stop_pid "$OP_PID"; cluster_stop' EXIT

# Compaction as the defaults have it (every 5 minutes); an etcd quota that holds the raw events.
cluster_start bound "ETCD_EXTRA_ARGS=--quota-backend-bytes=8589934592"
machine="$(machine_json)"
k apply --server-side -f "$ROOT/crds/eventseries.dev_eventseriespolicies.yaml" >/dev/null
k wait --for=condition=Established --timeout=60s crd/eventseriespolicies.eventseries.dev >/dev/null
# The default policy's times, and every loop an alert.
k apply -f - >/dev/null <<EOF
apiVersion: eventseries.dev/v1alpha1
kind: EventSeriesPolicy
metadata: {name: default}
spec:
  alert: {minCount: 2}
EOF
read -r dead_port <<<"$(free_ports 1)"
operator_start "$CLUSTER_DIR/operator.log" --alertmanager-url "http://127.0.0.1:$dead_port"
for _ in $(seq 120); do operator_ready && break; sleep 1; done
operator_ready || die "the operator did not become ready (log $CLUSTER_DIR/operator.log)"

t0=$SECONDS
KUBECONFIG="$KUBECONFIG_FILE" "$LOADER" --concurrency 48 lone --count "$LONE" --namespaces 10 >/dev/null
KUBECONFIG="$KUBECONFIG_FILE" "$LOADER" --concurrency 16 lone --count "$LONE_AT_LIMIT" --first "$LONE" \
  --namespaces 5 --prefix limit --at-limit >/dev/null
log "stored $LONE one-off events and $LONE_AT_LIMIT at every limit in $((SECONDS - t0)) s"

rate="$(awk -v s="$SERIES" -v r="$ROTATE_S" 'BEGIN { printf "%.3f", s / r }')"
log "loops: $SERIES keys over $NAMESPACES namespaces, $rate changes/s for $MINUTES min"
KUBECONFIG="$KUBECONFIG_FILE" "$LOADER" --concurrency 96 rate --legacy --rate "$rate" \
  --duration $((MINUTES * 60)) --keys "$SERIES" --namespace bound --namespaces "$NAMESPACES" \
  >"$CLUSTER_DIR/load.json" &
LOAD_PID=$!

# The series objects stored now, over a paginated list.
stored() {
  k get events.v1.events.k8s.io -A -l app.kubernetes.io/managed-by=event-series -o name --chunk-size=1000 | wc -l
}
metric() { local v; v="$(op_metric "$1")"; echo "${v%.*}"; }
samples=()
max_rss=0 max_pending=0 stored_min=-1 next_stored=0
start=$SECONDS
while kill -0 "$LOAD_PID" 2>/dev/null; do
  sleep 30
  kill -0 "$OP_PID" 2>/dev/null || die "the operator exited (log $CLUSTER_DIR/operator.log)"
  t=$((SECONDS - start))
  rss="$(rss_kib "$OP_PID")" hwm="$(hwm_kib "$OP_PID")"
  p="$(metric event_series_writes_pending)"
  c="$(metric 'event_series_api_requests_total{verb="create",code="201"}')"
  h="$(metric 'event_series_api_requests_total{verb="patch",code="200"}')"
  gone="$(metric 'event_series_api_requests_total{verb="patch",code="404"}')"
  active="$(metric event_series_series_active)"
  firing="$(metric event_series_alerts_firing)"
  s=null
  if [ "$t" -ge "$next_stored" ]; then
    next_stored=$((t + 1800))
    s="$(stored)"
    # Once every series has been created, none may disappear.
    if [ "$c" -ge "$SERIES" ] && { [ "$stored_min" -lt 0 ] || [ "$s" -lt "$stored_min" ]; }; then stored_min="$s"; fi
  fi
  samples+=("{\"t\":$t,\"rss_kib\":$rss,\"hwm_kib\":$hwm,\"pending\":$p,\"creates\":$c,\"patches\":$h,\"patch_404\":$gone,\"active\":$active,\"alerts_firing\":$firing,\"stored\":$s,\"proc_stat_cpu\":[$(awk '/^cpu / { print $2","$3","$4","$5","$6","$7","$8","$9; exit }' /proc/stat)]}")
  [ "$rss" -gt "$max_rss" ] && max_rss="$rss"
  [ "$p" -gt "$max_pending" ] && max_pending="$p"
  log "$t s: RSS $((rss / 1024)) MiB (peak $((hwm / 1024))), active $active, pending $p, creates $c, patches $h, patch 404 $gone, alerts $firing, stored $s"
done
wait "$LOAD_PID" || die "the load failed ($CLUSTER_DIR/load.json)"
LOAD_PID=''
# And once more at the end of the loops, a TTL after most objects were created.
s="$(stored)"
if [ "$stored_min" -lt 0 ] || [ "$s" -lt "$stored_min" ]; then stored_min="$s"; fi
# Intake settles; then every occurrence written must have been counted once: the one-off events
# one each, each loop's key its first occurrence and one per change.
sleep 60
load="$(cat "$CLUSTER_DIR/load.json")"
written="$(jq --argjson lone $((LONE + LONE_AT_LIMIT)) --argjson keys "$SERIES" '$lone + $keys + .done' <<<"$load")"
counted="$(metric event_series_occurrences_total)"
hwm_first="$(hwm_kib "$OP_PID")"
metrics_first="$(curl -fsS --max-time 5 "$OP_URL/metrics" |
  grep -E '^event_series_(series_evicted_total|dropped_total|alerts_sent_total|alerts_over_limit|writes_shed_total|series_finished_total|write_latency_seconds_(sum|count)|fields_truncated_total)' || true)"

# The restart: everything stored, the new process's restore and first list (through the restart
# buffer), until Ready and a minute more.
stop_pid "$OP_PID"
OP_PID=''
t0=$SECONDS
operator_start "$CLUSTER_DIR/operator-2.log" --alertmanager-url "http://127.0.0.1:$dead_port"
until operator_ready; do
  kill -0 "$OP_PID" 2>/dev/null || die "the restarted operator exited (log $CLUSTER_DIR/operator-2.log)"
  [ $((SECONDS - t0)) -lt 1800 ] || die "the restarted operator was not ready in 30 min"
  sleep 1
done
ready_s=$((SECONDS - t0))
sleep 60
hwm_second="$(hwm_kib "$OP_PID")" rss_second="$(rss_kib "$OP_PID")"
log "restart: ready after $ready_s s; peak RSS $((hwm_second / 1024)) MiB, RSS $((rss_second / 1024)) MiB a minute later"
stop_pid "$OP_PID"
OP_PID=''

# Every series object's longest time between two writes, from the audit log (rotated files included).
gaps="$(python3 "$ROOT/bench/write_gaps.py" "$CLUSTER_DIR" "$TTL_S")"
peak_kib=$((hwm_first > hwm_second ? hwm_first : hwm_second))
verdict="every object written again within the TTL"
if [ "$(jq '.over_ttl' <<<"$gaps")" -gt 0 ]; then verdict="MISSED: objects outlived the TTL between two writes"; fi
if [ "$peak_kib" -ge $((LIMIT_MIB * 1024)) ]; then
  verdict="$verdict; MISSED: peak RSS over ${LIMIT_MIB} MiB"
else
  verdict="$verdict; peak RSS under ${LIMIT_MIB} MiB"
fi
mkdir -p "$ROOT/bench/results/bound"
out="bench/results/bound/$(date -u +%Y%m%dT%H%M%SZ).json"
jq -n --arg commit "$BENCH_COMMIT" --argjson machine "$machine" \
  --argjson series "$SERIES" --argjson namespaces "$NAMESPACES" --argjson rotate "$ROTATE_S" \
  --argjson lone "$LONE" --argjson at_limit "$LONE_AT_LIMIT" --argjson minutes "$MINUTES" \
  --arg flags "defaults (--qps 50 --burst 100 --event-ttl 1h --max-key-bytes 32Mi --max-alerts 10000 --restart-buffer-bytes 8Mi), --alertmanager-url to a closed port; policy: default times, alert minCount 2; apiserver --event-ttl 1h" \
  --argjson max_rss "$max_rss" --argjson hwm_first "$hwm_first" --argjson hwm_second "$hwm_second" \
  --argjson rss_second "$rss_second" --argjson ready_s "$ready_s" --argjson max_pending "$max_pending" \
  --argjson stored_min "$stored_min" --argjson written "$written" --argjson counted "$counted" \
  --argjson load "$load" --argjson audit "$gaps" --arg metrics "$metrics_first" --arg verdict "$verdict" \
  --argjson limit "$LIMIT_MIB" --argjson samples "[$(IFS=,; echo "${samples[*]}")]" \
  '{commit: $commit, machine: $machine, series: $series, namespaces: $namespaces, rotate_s: $rotate,
    lone: $lone, lone_at_limit: $at_limit, minutes: $minutes, flags: $flags, limit_mib: $limit,
    max_rss_kib: $max_rss, peak_rss_kib: $hwm_first, restart: {ready_s: $ready_s,
    peak_rss_kib: $hwm_second, rss_kib_after_a_minute: $rss_second}, max_pending: $max_pending,
    min_stored_after_creates: $stored_min, occurrences: {written: $written, counted: $counted},
    load: $load, audit: $audit, metrics: ($metrics | split("\n") | map(select(. != ""))),
    verdict: $verdict, samples: $samples}' >"$ROOT/$out"
echo "bound: $SERIES series, defaults, $MINUTES min: peak RSS $((hwm_first / 1024)) MiB (restart $((hwm_second / 1024)) MiB) against ${LIMIT_MIB} MiB, most pending $max_pending; audit $gaps; occurrences $counted of $written; $verdict ($out)"
