#!/usr/bin/env bash
# `just bench-failover`: a leader killed with SIGKILL, its standby cold and warm in the same run, on
# the same stored data, on a real kube-apiserver (target/envtest-bench-failover).
#   1. stores HISTORY (900,000) raw events of loops that ended 150 minutes ago (1-3 occurrences each, in
#      1,000 namespaces: what most of a cluster's stored events are) and SERIES (100,000) raw events that
#      each count 2 recent occurrences (each a series at once, in 10 namespaces);
#   2. for each of MODES (cold warm), replicas started with the hidden `--standby MODE`: a cold standby
#      waits for the Lease before it lists anything and then rebuilds (the old behaviour, kept as the
#      baseline), a warm one lists, watches and keeps its engine current meanwhile. Flags: --qps/--burst
#      2000 so that the first leader's creates finish quickly; finishAfter, seriesWindow and the
#      heartbeat 2 h so that the stored series are not written again during the run. A raw load (RATE
#      changes a second, kubelet-style core/v1 Events, on 50 keys in a namespace of the mode's own) runs
#      throughout; a policy gives that namespace's series a STREAM_HEARTBEAT heartbeat, so that the
#      leader writes a steady stream of patches;
#      - replica A leads (the first mode: until it has created every series object), then the API
#        server's and etcd's CPU seconds and the bytes of watch events it sent for Events over WINDOW
#        seconds with one replica; replica B starts, is Ready, and the same window with two; RSS of both;
#      - A is killed with SIGKILL; from the kill: B holding the Lease (its event_series_leader gauge),
#        its engine rebuilt (cold: its log's "recovered; watching"), its first series write answered
#        (event_series_api_requests_total create/patch 2xx); from the API server's audit log (every
#        events.k8s.io write, timed by the API server): the first write after the kill and the longest
#        gap between two series writes from 30 s before the kill to 30 s after that first write;
#      - with ALERTS=1 (the default) the SERIES loops are also alerts (a policy alerting on them,
#        --max-alerts-per-namespace 1000, so up to 10,000 fire, posted to a real Alertmanager with
#        the default resend): from 30 s before the kill to 90 s after the first write, the number
#        of alerts Alertmanager holds unresolved, every second; an alert that lapsed in between
#        resolved and fires again (0 expected: each post is valid for four resend intervals);
#      - B is stopped (SIGTERM, which hands the Lease over), and the next mode starts with a new A.
# Result: bench/results/failover/<date>.json (written after each mode) and one line on stdout.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$ROOT/bench/lib.sh"

HISTORY="${HISTORY:-900000}" SERIES="${SERIES:-100000}" RATE="${RATE:-5}"
MODES="${MODES:-cold warm}" WINDOW="${WINDOW:-60}" STREAM_HEARTBEAT="${STREAM_HEARTBEAT:-5s}"
ALERTS="${ALERTS:-1}"
need_loader
A_PID='' B_PID='' LOAD_PID='' AM_PID='' POLL_PID=''
trap 'kill "$LOAD_PID" "$AM_PID" "$POLL_PID" 2>/dev/null || true; kill -9 "$A_PID" 2>/dev/null || true; stop_pid "$B_PID"; cluster_stop' EXIT

# 10^6 events of about 1 KB each: etcd's default 2 GiB quota holds them, with room for compaction.
# Compaction (etcd's own, and the API server's) every 2 hours, not every 5 minutes: a compaction
# during the run would send the replicas' watches a 410 and make them relist, which is not what this
# benchmark measures.
cluster_start failover EVENT_TTL=3h \
  "ETCD_EXTRA_ARGS=--quota-backend-bytes=8589934592 --auto-compaction-retention=2h" \
  "APISERVER_EXTRA_ARGS=--etcd-compaction-interval=2h"
machine="$(machine_json)"
APISERVER_PID="$(cat "$CLUSTER_DIR/apiserver.pid")" ETCD_PID="$(cat "$CLUSTER_DIR/etcd.pid")"
k apply --server-side -f "$ROOT/crds/eventseries.dev_eventseriespolicies.yaml" >/dev/null
k wait --for=condition=Established --timeout=60s crd/eventseriespolicies.eventseries.dev >/dev/null
k create namespace event-series-system >/dev/null
# The stream's namespaces (one per mode, labelled while their mode runs): a heartbeat short enough
# that the leader writes several times a second.
k apply -f - >/dev/null <<EOF
apiVersion: eventseries.dev/v1alpha1
kind: EventSeriesPolicy
metadata:
  name: failover-stream
spec:
  namespaceSelector:
    matchLabels:
      bench-failover-stream: "on"
  heartbeatInterval: $STREAM_HEARTBEAT
  firstRefresh: "0"
  finishAfter: 2h
  seriesWindow: 2h
EOF

t0=$SECONDS
# 150 minutes old: beyond the 2 h seriesWindow of FLAGS below (so they are history, not series) and
# within the 3 h event TTL.
KUBECONFIG="$KUBECONFIG_FILE" "$LOADER" --concurrency 48 history --count "$HISTORY" --age-minutes 150 >/dev/null
history_s=$((SECONDS - t0))
log "stored $HISTORY raw events of finished loops in $history_s s"
t0=$SECONDS
KUBECONFIG="$KUBECONFIG_FILE" "$LOADER" --concurrency 48 seed --count "$SERIES" >/dev/null
seed_s=$((SECONDS - t0))
log "stored $SERIES raw events that are series in $seed_s s"

# 100,000 series, twice the default bound (--max-active-series, where no policy applies), their creates
# all queued at once (--max-pending-writes: past the default 50,000 the newest are shed until their
# next write). --event-ttl 3h as the API server's: at the default 1h the operator spaces heartbeats
# at most 45 minutes (three quarters of the TTL) whatever --heartbeat-interval says, and 100,000
# series created together would all be written again 45 minutes later, in the middle of a run.
FLAGS=(--leader-elect --lease-namespace event-series-system --qps 2000 --burst 2000
  --finish-after 2h --series-window 2h --heartbeat-interval 2h --max-active-series "$SERIES"
  --max-pending-writes "$SERIES" --event-ttl 3h)

# A real Alertmanager that notifies nobody, and a policy that makes every stored series' loop an
# alert (the loader's namespaces bench-0 ... bench-9), with the same times and bound as the flags above.
if [ "$ALERTS" = 1 ]; then
  silent_alertmanager 127.0.0.1
  FLAGS+=(--alertmanager-url "$AM_URL" --max-alerts-per-namespace 1000)
  k apply -f - >/dev/null <<EOF
apiVersion: eventseries.dev/v1alpha1
kind: EventSeriesPolicy
metadata:
  name: failover-alerts
spec:
  namespaceSelector:
    matchExpressions:
    - {key: kubernetes.io/metadata.name, operator: In, values: [$(seq -s, -f 'bench-%g' 0 9)]}
  heartbeatInterval: 2h
  firstRefresh: "0"
  finishAfter: 2h
  seriesWindow: 2h
  maxActiveSeries: $SERIES
  alert:
    minCount: 2
EOF
fi

# am_unresolved: the alerts Alertmanager holds unresolved (active, suppressed or unprocessed; it
# leaves resolved ones out of alertmanager_alerts).
am_unresolved() {
  { curl -fsS --max-time 2 "$AM_URL/metrics" || true; } |
    awk '/^alertmanager_alerts\{/ { n += $NF } END { printf "%d\n", n }'
}

# poll_alerts FILE: "<ms> <unresolved alerts>" every second into FILE, until killed.
poll_alerts() {
  while :; do
    echo "$(now_ms) $(am_unresolved)" >>"$1"
    sleep 1
  done
}

# cpu_s PID: the process's CPU seconds (user + system).
cpu_s() { awk -v hz="$(getconf CLK_TCK)" '{ printf "%.2f\n", ($14 + $15) / hz }' "/proc/$1/stat"; }

# watch_bytes: "<core> <events.k8s.io>": the bytes of watch events the API server has sent for Events
# of each group (apiserver_watch_events_sizes_sum).
watch_bytes() {
  api_get /metrics | awk '
    /^apiserver_watch_events_sizes_sum\{/ && (/resource="events"/ || /kind="Event"/) {
      g = $0; sub(/.*group="/, "", g); sub(/".*/, "", g)
      if (g == "") core += $NF; else if (g == "events.k8s.io") ev += $NF
    }
    END { printf "%d %d\n", core, ev }'
}

# leader_heartbeats, leader_shed: the heartbeats the replica at OP_URL has written, and the series
# writes it has shed (every kind), so far.
leader_heartbeats() {
  op_metric 'event_series_write_latency_seconds_count{kind="heartbeat"}' | awk '{ printf "%d\n", $1 }'
}
leader_shed() {
  { curl -fsS --max-time 5 "$OP_URL/metrics" || true; } |
    awk '$1 ~ /^event_series_writes_shed_total(\{|$)/ { v += $2 } END { printf "%d\n", v }'
}

# window: the API server's and etcd's CPU seconds and the watch bytes for Events (core, events.k8s.io)
# over WINDOW seconds, as a JSON object.
window() {
  local a0 e0 a1 e1 c0 v0 c1 v1
  a0="$(cpu_s "$APISERVER_PID")" e0="$(cpu_s "$ETCD_PID")"
  read -r c0 v0 <<<"$(watch_bytes)"
  sleep "$WINDOW"
  a1="$(cpu_s "$APISERVER_PID")" e1="$(cpu_s "$ETCD_PID")"
  read -r c1 v1 <<<"$(watch_bytes)"
  jq -n --argjson a "$(awk -v a="$a0" -v b="$a1" 'BEGIN { printf "%.2f", b - a }')" \
    --argjson e "$(awk -v a="$e0" -v b="$e1" 'BEGIN { printf "%.2f", b - a }')" \
    --argjson c "$((c1 - c0))" --argjson v "$((v1 - v0))" --argjson s "$WINDOW" \
    -c '{seconds: $s, apiserver_cpu_s: $a, etcd_cpu_s: $e, watch_bytes: {core: $c, events_k8s_io: $v}}'
}

# until_quiet: until the operator at OP_URL is Ready with no write pending (10 s in a row).
until_quiet() {
  local t0=$SECONDS quiet=0
  while [ "$quiet" -lt 10 ]; do
    [ $((SECONDS - t0)) -lt 3600 ] || die "the operator did not settle in an hour ($1)"
    kill -0 "$OP_PID" || die "the operator exited ($1)"
    if operator_ready && [ "$(op_metric event_series_writes_pending | cut -d. -f1)" = 0 ]; then
      quiet=$((quiet + 1))
    else
      quiet=0
    fi
    sleep 1
  done
}

# Series writes answered to the operator at OP_URL (api_requests_total also counts Lease requests).
series_writes() {
  { curl -fsS --max-time 5 "$OP_URL/metrics" || true; } |
    awk '$1 ~ /^event_series_api_requests_total\{verb="(create|patch)",code="2/ { n += $2 } END { printf "%d\n", n }'
}

# audit_writes FROM_MS: the API server's answer times (ms since the epoch, sorted) of the 2xx creates
# and patches of events.k8s.io Events recorded in the audit log since FROM_MS.
audit_writes() {
  find "$CLUSTER_DIR" -maxdepth 1 -name 'audit*.log' -newer "$CLUSTER_DIR/window.mark" -print0 |
    xargs -0 grep -hF '"stage":"ResponseComplete"' | grep -F '"apiGroup":"events.k8s.io"' |
    jq -r --argjson from "$1" '
      select(.objectRef.resource == "events" and (.verb == "create" or .verb == "patch")
             and .responseStatus.code < 300)
      | (.stageTimestamp | capture("^(?<s>[^.Z]+)(\\.(?<f>[0-9]+))?Z$")) as $t
      | ((($t.s + "Z") | fromdateiso8601) * 1000 + (("0." + ($t.f // "0")) | tonumber) * 1000 | floor)
      | select(. >= $from)' | sort -n
}

# longest_gap FROM_MS TO_MS (stdin: sorted ms): the longest time without a write in [FROM, TO] (the
# window's ends count as writes' bounds), and the number of writes in it.
longest_gap() {
  awk -v from="$1" -v to="$2" '
    $1 >= from && $1 <= to { if ($1 - prev > g) g = $1 - prev; prev = $1; n++ }
    BEGIN { prev = from } END { if (to - prev > g) g = to - prev; printf "%d %d\n", g, n }'
}

# run_mode MODE FIRST: one failover with standbys of MODE; FIRST=1 for the run's first (its leader
# creates the series objects). Writes the mode's figures, as JSON, to $CLUSTER_DIR/mode-MODE.json.
run_mode() {
  local mode="$1" first="$2" stream="failover-stream-$1" one two a_rss b_rss
  local a_log="$CLUSTER_DIR/operator-$1-a.log" b_log="$CLUSTER_DIR/operator-$1-b.log"
  k create namespace "$stream" >/dev/null
  k label namespace "$stream" bench-failover-stream=on >/dev/null
  local at_start
  at_start="$(machine_json)"
  operator_start "$a_log" "${FLAGS[@]}" --standby "$mode" --instance "$mode-a"
  A_PID=$OP_PID
  local A_URL=$OP_URL
  for _ in $(seq 300); do [ "$(op_metric event_series_leader)" = 1 ] && break; sleep 0.2; done
  [ "$(op_metric event_series_leader)" = 1 ] || die "$mode-a did not lead (log $a_log)"
  local t0=$SECONDS
  [ "$first" = 1 ] && wait_for_creates "$SERIES" "$a_log"
  until_quiet "$a_log"
  local a_settled_s=$((SECONDS - t0))
  log "$mode: replica A leads, settled in $a_settled_s s"
  KUBECONFIG="$KUBECONFIG_FILE" "$LOADER" --concurrency 4 rate --legacy --rate "$RATE" --duration 7200 \
    --keys 50 --namespace "$stream" >/dev/null &
  LOAD_PID=$!
  sleep 20
  one="$(window)"
  # What the leader wrote while the standby started and ran beside it: a wave of heartbeats in
  # these minutes is the leader's cost, not the standby's, and its table says so.
  local hb0 shed0
  hb0="$(leader_heartbeats)" shed0="$(leader_shed)"
  operator_start "$b_log" "${FLAGS[@]}" --standby "$mode" --instance "$mode-b"
  B_PID=$OP_PID
  local B_URL=$OP_URL B_HEALTH=$OP_HEALTH
  t0=$SECONDS
  until operator_ready; do
    [ $((SECONDS - t0)) -lt 3600 ] || die "$mode-b not Ready in an hour (log $b_log)"
    kill -0 "$B_PID" || die "$mode-b exited (log $b_log)"
    sleep 1
  done
  local b_ready_s=$((SECONDS - t0))
  log "$mode: replica B Ready in $b_ready_s s"
  sleep 20
  two="$(window)"
  local hb1 shed1
  hb1="$(OP_URL=$A_URL leader_heartbeats)" shed1="$(OP_URL=$A_URL leader_shed)"
  a_rss="$(rss_kib "$A_PID")" b_rss="$(rss_kib "$B_PID")"
  log "$mode: RSS leader $a_rss KiB, standby $b_rss KiB; one replica $one; two $two"

  OP_URL=$B_URL OP_HEALTH=$B_HEALTH OP_PID=$B_PID
  local ready_before writes_before recovered_before kill_ms alerts_file="$CLUSTER_DIR/alerts-$mode.tsv"
  if [ "$ALERTS" = 1 ]; then
    : >"$alerts_file"
    poll_alerts "$alerts_file" &
    POLL_PID=$!
  fi
  ready_before=$(operator_ready && echo true || echo false)
  # The hand-over measured must be the SIGKILL's: a leader deposed earlier (its renewals slowed past
  # the renew deadline by the standby's start) is recorded, and the figures below are then not a
  # failover's.
  local a_alive b_led
  a_alive=$(kill -0 "$A_PID" 2>/dev/null && echo true || echo false)
  b_led=$([ "$(op_metric event_series_leader)" = 1 ] && echo true || echo false)
  [ "$a_alive" = true ] && [ "$b_led" = false ] ||
    log "$mode: WARNING: the leader changed before the kill (A alive: $a_alive, B leads: $b_led)"
  writes_before="$(series_writes)"
  recovered_before="$(grep -cF 'recovered; watching' "$b_log" || true)"
  sleep 30
  touch "$CLUSTER_DIR/window.mark"
  sleep 1
  kill_ms="$(now_ms)"
  # (Waited for here, so that the shell's note of a killed job does not end up in the log.)
  { kill -9 "$A_PID" && wait "$A_PID"; } 2>/dev/null || true
  A_PID=''
  local lease_ms='' restored_ms='' write_ms='' ms
  while [ -z "$write_ms" ] || { [ "$mode" = cold ] && [ -z "$restored_ms" ]; }; do
    ms=$(($(now_ms) - kill_ms))
    [ "$ms" -lt 1800000 ] || die "$mode-b did not take over within 30 min (log $b_log)"
    kill -0 "$B_PID" || die "$mode-b exited (log $b_log)"
    [ -z "$lease_ms" ] && [ "$(op_metric event_series_leader)" = 1 ] && lease_ms=$ms
    [ -z "$restored_ms" ] && [ "$(grep -cF 'recovered; watching' "$b_log" || true)" -gt "$recovered_before" ] &&
      restored_ms=$ms
    [ -z "$write_ms" ] && [ "$(series_writes)" -gt "$writes_before" ] && write_ms=$ms
    sleep 0.1
  done
  local b_hwm ready_after phases='{}'
  b_hwm="$(hwm_kib "$B_PID")"
  sleep 30
  ready_after=$(operator_ready && echo true || echo false)
  local alerts=null
  if [ "$ALERTS" = 1 ]; then
    sleep 60
    kill "$POLL_PID" 2>/dev/null || true
    wait "$POLL_PID" 2>/dev/null || true
    POLL_PID=''
    # Unresolved alerts just before the kill, the fewest after it, and at the end.
    alerts="$(awk -v k="$kill_ms" '
      $1 <= k { before = $2 } $1 > k { if (min == "" || $2 < min) min = $2; last = $2 }
      END { printf "{\"unresolved_before_kill\": %d, \"fewest_after_kill\": %d, \"at_end\": %d, \"lapsed\": %d}\n",
            before, min, last, (before > min ? before - min : 0) }' "$alerts_file")"
    log "$mode: alerts $alerts"
  fi
  [ "$mode" = cold ] && phases="$(grep -F 'recovered; watching' "$b_log" | tail -1 | sed 's/\x1b\[[0-9;]*m//g' |
    grep -oE '[a-z_]+=[0-9]+' | jq -Rn '[inputs | split("=") | {(.[0]): (.[1] | tonumber)}] | add // {}')"
  local audit first_audit before_gap before_n across_gap across_n
  audit="$(audit_writes $((kill_ms - 30000)) || true)"
  first_audit="$(awk -v k="$kill_ms" '$1 > k { print $1 - k; exit }' <<<"$audit")"
  read -r before_gap before_n <<<"$(longest_gap $((kill_ms - 30000)) "$kill_ms" <<<"$audit")"
  read -r across_gap across_n <<<"$(longest_gap $((kill_ms - 30000)) $((kill_ms + write_ms + 30000)) <<<"$audit")"
  log "$mode: after SIGKILL: Lease $lease_ms ms, rebuilt ${restored_ms:-n/a} ms, first write $write_ms ms" \
    "(audit ${first_audit:-?} ms); longest write gap $across_gap ms ($before_gap ms before the kill)"
  kill "$LOAD_PID" 2>/dev/null || true
  wait "$LOAD_PID" 2>/dev/null || true
  LOAD_PID=''
  stop_pid "$B_PID"
  B_PID=''
  # The stream's series go back to the defaults: the next mode's leader has its own stream.
  k label namespace "$stream" bench-failover-stream- >/dev/null
  jq -n --argjson at_start "$at_start" --argjson lease "$lease_ms" --argjson restored "${restored_ms:-null}" \
    --argjson write "$write_ms" --argjson first_audit "${first_audit:-null}" \
    --argjson across_gap "$across_gap" --argjson across_n "$across_n" \
    --argjson before_gap "$before_gap" --argjson before_n "$before_n" \
    --argjson a_rss "$a_rss" --argjson b_rss "$b_rss" --argjson b_hwm "$b_hwm" \
    --argjson b_ready_s "$b_ready_s" --argjson ready_before "$ready_before" --argjson ready_after "$ready_after" \
    --argjson a_alive "$a_alive" --argjson b_led "$b_led" --argjson a_settled_s "$a_settled_s" \
    --argjson hb "$((hb1 - hb0))" --argjson shed "$((shed1 - shed0))" \
    --argjson one "$one" --argjson two "$two" --argjson phases "$phases" --argjson alerts "$alerts" \
    '{machine_at_start: $at_start,
      after_sigkill_ms: {lease: $lease, rebuilt: $restored, first_write: $write,
                         first_write_audit: $first_audit},
      write_gap_ms: {across_handover: $across_gap, writes_across: $across_n,
                     steady_before_kill: $before_gap, writes_before: $before_n},
      rss_kib: {leader: $a_rss, standby: $b_rss, standby_peak_after_takeover: $b_hwm},
      standby_ready_after_start_s: $b_ready_s, standby_ready_before_kill: $ready_before,
      standby_ready_after_takeover: $ready_after, leader_settled_s: $a_settled_s,
      leader_while_standby_started: {heartbeats: $hb, shed: $shed},
      leader_kept_until_kill: ($a_alive and ($b_led | not)),
      one_replica: $one, two_replicas: $two, restore_phases: $phases,
      alerts_resolved_then_fired: $alerts}' >"$CLUSTER_DIR/mode-$mode.json"
}

# The result is written after each mode, so that a long run stopped early keeps what it measured.
mkdir -p "$ROOT/bench/results/failover"
out="$ROOT/bench/results/failover/$(date -u +%Y%m%dT%H%M%SZ).json"
modes='{}' first=1
for mode in $MODES; do
  run_mode "$mode" "$first"
  # The replicas' logs stay beside the result: the cluster directory is reused by the next run.
  mkdir -p "${out%.json}.logs"
  cp "$CLUSTER_DIR/operator-$mode-a.log" "$CLUSTER_DIR/operator-$mode-b.log" "${out%.json}.logs/"
  modes="$(jq --arg m "$mode" --slurpfile f "$CLUSTER_DIR/mode-$mode.json" '. + {($m): $f[0]}' <<<"$modes")"
  first=0
  jq -n --arg commit "$BENCH_COMMIT" --argjson machine "$machine" \
    --argjson history "$HISTORY" --argjson series "$SERIES" --arg flags "${FLAGS[*]}" \
    --argjson rate "$RATE" --arg heartbeat "$STREAM_HEARTBEAT" --argjson window "$WINDOW" \
    --argjson history_s "$history_s" --argjson seed_s "$seed_s" --argjson modes "$modes" \
    '{commit: $commit, machine: $machine, stored_raw_events: ($history + $series), series: $series,
      flags: $flags, stream: {rate_per_s: $rate, keys: 50, heartbeat: $heartbeat}, window_s: $window,
      store_s: {history: $history_s, series: $seed_s}, mode_order: ($modes | keys_unsorted),
      modes: $modes}' >"$out"
done
echo "failover: $((HISTORY + SERIES)) raw events, $SERIES series: $(jq -c '.modes | map_values(.after_sigkill_ms)' "$out") ($out)"
