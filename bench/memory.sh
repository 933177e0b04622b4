#!/usr/bin/env bash
# Memory and restart of the operator on a real kube-apiserver (target/envtest-bench-memory):
#   1. seeds SMALL legacy raw events, each already counting 2 recent occurrences of its own Pod (so each
#      is a series at once), runs the operator, waits until it has created every series object, and
#      reads its RSS (/proc/<pid>/status VmRSS, and VmHWM, the peak);
#   2. restart: stops it (SIGTERM) and starts it again, and times process start -> /readyz 200 (the
#      engine rebuilt from the SMALL Ongoing series objects and the raw events, paginated lists);
#   3. seeds LARGE - SMALL more, waits for LARGE active series, reads the RSS again, and times a
#      restart at LARGE as well;
#   4. then, with the LARGE series objects and LARGE raw events stored, times the harness's kubectl
#      listing each of the two sets (paginated like the operator, `-o name | wc -l`), BARE_LISTS times
#      each, as the reference for the restart time; and the same lists paged with curl, the bodies
#      only counted, not decoded (the apiserver's share alone).
# Each restart's phases (request, decode, parse, restore, buffer, sort, replay ... in ms) are taken
# from the operator's log lines into the JSON, with the writes it made by /readyz and 10 s later.
# The operator runs with --qps/--burst 2000 (so its creates finish quickly) and finishAfter,
# seriesWindow and heartbeatInterval of 2h (nothing finishes or heartbeats during the run).
#
# Usage: bench/memory.sh        Environment: SMALL (10000) LARGE (100000) OUT (bench/results)
#   BARE_LISTS (3; 0: none) BARE_CHUNKS ("500": kubectl's --chunk-size, one or more, each timed
#   BARE_LISTS times) CURL_LISTS (BARE_LISTS) CURL_CHUNKS (BARE_CHUNKS) likewise for curl
#   NAME (memory: the result's name)
#   OPERATOR (bench/lib.sh)
# Result: $OUT/$NAME.json
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$ROOT/bench/lib.sh"

SMALL="${SMALL:-10000}" LARGE="${LARGE:-100000}" OUT="${OUT:-$ROOT/bench/results}"
BARE_LISTS="${BARE_LISTS:-3}" BARE_CHUNKS="${BARE_CHUNKS:-500}" NAME="${NAME:-memory}"
CURL_LISTS="${CURL_LISTS:-$BARE_LISTS}" CURL_CHUNKS="${CURL_CHUNKS:-$BARE_CHUNKS}"
need_loader
mkdir -p "$OUT"
OP_PID=''
trap 'stop_pid "$OP_PID"; cluster_stop' EXIT

cluster_start memory EVENT_TTL=3h
k apply --server-side -f "$ROOT/crds/eventseries.dev_eventseriespolicies.yaml" >/dev/null
k wait --for=condition=Established --timeout=60s crd/eventseriespolicies.eventseries.dev >/dev/null
# 100,000 series, twice the default bound (--max-active-series, where no policy applies), their creates
# all queued at once (--max-pending-writes: past the default 50,000 the newest are shed until their
# next write).
OPFLAGS=(--qps 2000 --burst 2000 --finish-after 2h --series-window 2h --heartbeat-interval 2h --max-active-series 100000
  --max-pending-writes 100000)
creates() { op_metric 'event_series_api_requests_total{verb="create",code="201"}'; }
# writes: every API request the operator's writer made (all verbs and codes).
writes() {
  { curl -fsS --max-time 5 "$OP_URL/metrics" || true; } |
    awk '/^event_series_api_requests_total\{/ { n += $NF } END { printf "%d\n", n }'
}

# phases LOGFILE MESSAGE: the numeric fields (key=value) of the operator's first log line with
# MESSAGE, as a JSON object.
phases() {
  grep -m1 -F "$2" "$1" | sed 's/\x1b\[[0-9;]*m//g' | grep -oE '[a-z_]+=[0-9]+' |
    jq -Rn '[inputs | split("=") | {(.[0]): (.[1] | tonumber)}] | add // {}'
}

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
  local active restored w_ready w_later p occ
  active="$(op_metric event_series_series_active)"
  w_ready="$(writes)"
  # Occurrences the rebuilt engine counted: 0 when every raw event was already absorbed into the
  # series objects it restored (nothing happened while it was down).
  occ="$(op_metric event_series_occurrences_total)"
  restored="$(grep -o 'own series objects restored.*' "$logfile" | head -1)"
  log "restart with $1 series: ready after ${ms} ms, $active active ($restored)"
  sleep 10
  w_later="$(writes)"
  p="$(jq -n --argjson a "$(phases "$logfile" 'own series objects restored')" \
    --argjson b "$(phases "$logfile" 'own series restored; first list of raw events under way')" \
    --argjson c "$(phases "$logfile" 'recovered; watching')" \
    '{own_list: $a, restored: $b, recovered: $c}')"
  log "restart phases: $(jq -c . <<<"$p"); writes by /readyz $w_ready, 10 s later $w_later"
  RESTART="$(printf '{"series":%s,"ready_ms":%s,"active_after":%s,"occurrences_after":%s,"writes_at_ready":%s,"writes_10s_later":%s,"phases":%s,"log":"%s","machine":%s}' \
    "$1" "$ms" "${active%.*}" "${occ%.*}" "$w_ready" "$w_later" "$p" "${restored//\"/\'}" "$(machine_json)")"
}

# json_array ITEM...: the JSON objects given, as one array ([] for none).
json_array() {
  [ $# -gt 0 ] || {
    echo '[]'
    return
  }
  printf '%s\n' "$@" | jq -s .
}

# bare_list SELECTOR: times `kubectl get events -A -l SELECTOR --chunk-size=C -o name | wc -l`
# BARE_LISTS times for each C of BARE_CHUNKS; a JSON array.
bare_list() {
  local c i t0 t1 n out=()
  for c in $BARE_CHUNKS; do
    for ((i = 0; i < BARE_LISTS; i++)); do
      t0="$(date +%s%N)"
      n="$(k get events -A -l "$1" --chunk-size="$c" -o name | wc -l)"
      t1="$(date +%s%N)"
      log "kubectl list -l '$1' --chunk-size=$c: $n objects in $(((t1 - t0) / 1000000)) ms"
      out+=("$(printf '{"selector":"%s","chunk_size":%s,"objects":%s,"ms":%s,"machine":%s}' \
        "$1" "$c" "$n" $(((t1 - t0) / 1000000)) "$(machine_json)")")
    done
  done
  json_array "${out[@]}"
}

# curl_list PATH SELECTOR: times paging through PATH?labelSelector=SELECTOR with curl, pages of C
# for each C of CURL_CHUNKS, CURL_LISTS times: only the continue token is read from each body and its
# objects counted; a JSON array.
curl_list() {
  local sel c i t0 t1 n body cont out=()
  sel="$(jq -rn --arg s "$2" '$s | @uri')"
  for c in $CURL_CHUNKS; do
    for ((i = 0; i < CURL_LISTS; i++)); do
      t0="$(date +%s%N)" n=0 cont=''
      while :; do
        # (a User-Agent of curl's own would get the body pretty-printed)
        body="$(api_get "$1?labelSelector=$sel&limit=$c${cont:+&continue=$cont}" -A event-series-bench)"
        n=$((n + $(grep -o '"creationTimestamp":"' <<<"$body" | wc -l)))
        cont="$(head -c 4096 <<<"$body" | grep -o '"continue":"[^"]*"' | head -1 | cut -d'"' -f4)"
        [ -n "$cont" ] || break
      done
      t1="$(date +%s%N)"
      log "curl list $1 -l '$2' limit=$c: $n objects in $(((t1 - t0) / 1000000)) ms"
      out+=("$(printf '{"path":"%s","selector":"%s","chunk_size":%s,"objects":%s,"ms":%s,"machine":%s}' \
        "$1" "$2" "$c" "$n" $(((t1 - t0) / 1000000)) "$(machine_json)")")
    done
  done
  json_array "${out[@]}"
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
bare_own="$(bare_list app.kubernetes.io/managed-by=event-series)"
bare_raw="$(bare_list 'app.kubernetes.io/managed-by!=event-series')"
curl_own="$(curl_list /apis/events.k8s.io/v1/events app.kubernetes.io/managed-by=event-series)"
curl_raw="$(curl_list /api/v1/events 'app.kubernetes.io/managed-by!=event-series')"
jq -n --argjson a "$m_small" --argjson b "$r_small" --argjson c "$m_small_after" \
  --argjson d "$m_large" --argjson e "$r_large" --argjson f "$m_large_after" \
  --argjson g "$bare_own" --argjson h "$bare_raw" --argjson i "$curl_own" --argjson j "$curl_raw" \
  --arg op "$OPERATOR" \
  --arg tuning "${EVENT_SERIES_MALLOC_TUNING:-}" --arg flags "${OPFLAGS[*]}" \
  '{memory: [$a, $d], restart: [$b, $e], memory_after_restart: [$c, $f],
    bare_list: {own_series: $g, raw_events: $h}, curl_list: {own_series: $i, raw_events: $j},
    operator: $op, malloc_tuning_env: $tuning,
    operator_flags: $flags}' \
  >"$OUT/$NAME.json"
keep_dated "$NAME" "$OUT/$NAME.json"
log "done: $OUT/$NAME.json"
