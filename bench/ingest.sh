#!/usr/bin/env bash
# Ingest: the highest sustained rate of raw event changes the operator keeps up with, on a real
# kube-apiserver (target/envtest-bench-ingest).
#
# For each rate R of RATES, bench-loader writes R raw event changes per second for STEP seconds
# (new-style core/v1 Events with microsecond eventTime; each change a merge patch setting
# series.count + 1 and series.lastObservedTime = now, over KEYS objects, in a fresh namespace per step).
# Per step, from the operator's /metrics and /proc: the ingest lag (event_series_ingest_lag_seconds:
# the change's lastObservedTime to the engine observing it, p50/p99 interpolated in the histogram's
# buckets), occurrences counted, CPU of the operator, apiserver and etcd (share of one core), the
# operator's RSS, and the rate the loader achieved (the apiserver answering is part of it).
#
# Usage: bench/ingest.sh   Environment: RATES ("200 400 800 1600") STEP (30) KEYS (1000)
#                          CONCURRENCY (64) OUT (bench/results)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$ROOT/bench/lib.sh"

RATES="${RATES:-200 400 800 1600}" STEP="${STEP:-30}" KEYS="${KEYS:-1000}"
CONCURRENCY="${CONCURRENCY:-64}" OUT="${OUT:-$ROOT/bench/results}"
LOADER="$TARGET/release/examples/bench-loader"
[ -x "$LOADER" ] || die "no $LOADER: cargo build --release --example bench-loader"
mkdir -p "$OUT"
OP_PID=''
trap 'stop_pid "$OP_PID"; cluster_stop' EXIT

cluster_start ingest
k apply --server-side -f "$ROOT/crds/eventseries.dev_eventseriespolicies.yaml" >/dev/null
operator_start "$CLUSTER_DIR/operator.log" --qps 2000 --burst 2000
for _ in $(seq 300); do operator_ready && break; sleep 0.2; done
operator_ready || die "the operator is not ready"
api_pid="$(cat "$CLUSTER_DIR/apiserver.pid")"
etcd_pid="$(cat "$CLUSTER_DIR/etcd.pid")"

# step_stats BEFORE AFTER SECONDS: lag quantiles and counts between two scrapes, as JSON.
step_stats() {
  python3 - "$1" "$2" "$3" <<'PY'
import json, re, sys
def parse(path):
    buckets, vals = {}, {}
    for line in open(path):
        m = re.match(r'event_series_ingest_lag_seconds_bucket\{le="([^"]+)"\} (\S+)', line)
        if m:
            buckets[float(m.group(1))] = float(m.group(2))
            continue
        m = re.match(r'(event_series_[a-z_]+) (\S+)$', line)
        if m:
            vals[m.group(1)] = float(m.group(2))
    return buckets, vals
(b0, v0), (b1, v1) = parse(sys.argv[1]), parse(sys.argv[2])
secs = float(sys.argv[3])
bounds = sorted(b1)
cum = [b1[b] - b0.get(b, 0) for b in bounds]
total = v1.get("event_series_ingest_lag_seconds_count", 0) - v0.get("event_series_ingest_lag_seconds_count", 0)
def q(p):
    if total <= 0:
        return None
    target, prev_b, prev_c = p * total, 0.0, 0.0
    for b, c in zip(bounds, cum):
        if c >= target:
            if b == float("inf"):
                return prev_b
            return prev_b + (b - prev_b) * (target - prev_c) / max(c - prev_c, 1e-9)
        prev_b, prev_c = b, c
    return None
lag_sum = v1.get("event_series_ingest_lag_seconds_sum", 0) - v0.get("event_series_ingest_lag_seconds_sum", 0)
occ = v1.get("event_series_occurrences_total", 0) - v0.get("event_series_occurrences_total", 0)
print(json.dumps({"observed": total, "observed_per_s": total / secs, "occurrences": occ,
                  "lag_p50_s": q(0.5), "lag_p99_s": q(0.99), "lag_mean_s": lag_sum / total if total else None}))
PY
}

results=()
i=0
for rate in $RATES; do
  i=$((i + 1))
  ns="ingest-$i"
  # Objects first (the loader creates them before timing), then the timed changes.
  before="$CLUSTER_DIR/metrics-$i-before.txt" after="$CLUSTER_DIR/metrics-$i-after.txt"
  KUBECONFIG="$KUBECONFIG_FILE" "$LOADER" --concurrency "$CONCURRENCY" rate --rate "$rate" --duration "$STEP" \
    --keys "$KEYS" --namespace "$ns" >"$CLUSTER_DIR/loader-$i.json" 2>"$CLUSTER_DIR/loader-$i.log" &
  loader=$!
  # Wait until the keys exist (the loader's untimed part): the objects' creations show as lag samples.
  for _ in $(seq 600); do
    [ "$(k get events -n "$ns" --no-headers 2>/dev/null | wc -l)" -ge "$KEYS" ] && break
    sleep 0.5
  done
  sleep 2
  curl -fsS "$OP_URL/metrics" >"$before"
  c0="$(cpu_ticks "$OP_PID")" a0="$(cpu_ticks "$api_pid")" e0="$(cpu_ticks "$etcd_pid")" t0="$(date +%s.%N)"
  load="$(cut -d' ' -f1-3 /proc/loadavg)"
  wait "$loader" || die "the loader failed (log $CLUSTER_DIR/loader-$i.log)"
  sleep 2 # the last changes reach the operator
  curl -fsS "$OP_URL/metrics" >"$after"
  c1="$(cpu_ticks "$OP_PID")" a1="$(cpu_ticks "$api_pid")" e1="$(cpu_ticks "$etcd_pid")" t1="$(date +%s.%N)"
  secs="$(python3 -c "print($t1 - $t0)")"
  stats="$(step_stats "$before" "$after" "$secs")"
  hz="$(getconf CLK_TCK)"
  row="$(jq -n --argjson rate "$rate" --argjson loader "$(cat "$CLUSTER_DIR/loader-$i.json")" --argjson s "$stats" \
    --argjson secs "$secs" --arg load "$load" \
    --argjson op_cpu "$(python3 -c "print(round(($c1 - $c0) / $hz / $secs, 3))")" \
    --argjson api_cpu "$(python3 -c "print(round(($a1 - $a0) / $hz / $secs, 3))")" \
    --argjson etcd_cpu "$(python3 -c "print(round(($e1 - $e0) / $hz / $secs, 3))")" \
    --argjson rss "$(rss_kib "$OP_PID")" \
    '{target_rate: $rate, achieved_rate: $loader.achieved_rate, failed: $loader.failed,
      window_s: $secs, loadavg_at_start: $load,
      operator_observed_per_s: $s.observed_per_s, occurrences: $s.occurrences,
      lag_p50_s: $s.lag_p50_s, lag_p99_s: $s.lag_p99_s, lag_mean_s: $s.lag_mean_s,
      operator_cpu_cores: $op_cpu, apiserver_cpu_cores: $api_cpu, etcd_cpu_cores: $etcd_cpu,
      operator_rss_kib: $rss}')"
  log "rate $rate: $(jq -c . <<<"$row")"
  results+=("$row")
done
printf '%s\n' "${results[@]}" | jq -s --argjson machine "$(machine_json)" --argjson keys "$KEYS" \
  --argjson step "$STEP" --argjson conc "$CONCURRENCY" \
  '{keys: $keys, step_s: $step, loader_concurrency: $conc, steps: ., machine_end: $machine}' >"$OUT/ingest.json"
keep_dated ingest "$OUT/ingest.json"
log "done: $OUT/ingest.json"
