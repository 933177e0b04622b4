#!/usr/bin/env bash
# Write economy on a real kube-apiserver: the API writes one crash-loop storm costs with
#   legacy        client-go tools/record alone (the kubelet's recorder; core/v1 Events)
#   events        client-go tools/events alone (events.k8s.io/v1, client-side series)
#   kube-rs       kube::runtime::events::Recorder (kube 5; bench/kube_recorder.rs)
#   event-series  tools/record + the event-series operator on top (SPEC default durations)
# Each approach gets its own fresh apiserver (target/envtest-bench-econ-<approach>); the writes are
# the apiserver's own apiserver_request_total for resource "events" (every verb but GET/LIST/WATCH,
# every code), split by group: core ("") is what tools/record writes, events.k8s.io what tools/events,
# kube-rs and the operator write. /metrics is sampled every SAMPLE seconds for the plot.
#
# Usage: bench/economy.sh [approach...]        (default: all four, run at the same time)
# Environment:
#   PODS (100) RATE (1, occurrences/s per pod) DURATION (2100, seconds of storm: 35 minutes, so that a
#   loop outlives one 30-minute heartbeat or refresh of tools/events and of the operator)
#   LINGER (780): seconds the tools/events emitter stays alive after the storm, for the final write
#   its recorder makes 6-12 minutes after a series' last occurrence, as a long-lived component's does
#   SAMPLE (10, seconds between samples)   SERIAL=1 runs the approaches one after the other
#   OUT (bench/results/economy)             where samples-<approach>.csv and <approach>.json go
#   FINISH_AFTER, HEARTBEAT, WINDOW (SPEC defaults 6m, 30m, 6m): the operator's durations
#   DRAIN (FINISH_AFTER + 90 s): how long to keep sampling after the storm for the operator's finish writes
# Results: $OUT/<approach>.json, $OUT/samples-<approach>.csv, then `python3 bench/plot.py`.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$ROOT/bench/lib.sh"

PODS="${PODS:-100}" RATE="${RATE:-1}" DURATION="${DURATION:-2100}" SAMPLE="${SAMPLE:-10}" LINGER="${LINGER:-780}"
OUT="${OUT:-$ROOT/bench/results/economy}"
FINISH_AFTER="${FINISH_AFTER:-6m}" HEARTBEAT="${HEARTBEAT:-30m}" WINDOW="${WINDOW:-6m}"
secs() { local d="$1"; case "$d" in *m) echo $((${d%m} * 60)) ;; *s) echo "${d%s}" ;; *h) echo $((${d%h} * 3600)) ;; *) echo "$d" ;; esac; }
DRAIN="${DRAIN:-$(($(secs "$FINISH_AFTER") + 90))}"
KUBE_RECORDER="$TARGET/release/examples/kube_recorder"
NS=storm

one() {
  local approach="$1"
  local csv="$OUT/samples-$approach.csv" json="$OUT/$approach.json"
  emitter_pid='' OP_PID='' OP_URL=''
  trap 'stop_pid "$emitter_pid"; stop_pid "$OP_PID"; cluster_stop' EXIT
  cluster_start "econ-$approach"
  local machine_before
  machine_before="$(machine_json)"
  if [ "$approach" = event-series ]; then
    k apply --server-side -f "$ROOT/crds/eventseries.dev_eventseriespolicies.yaml" >/dev/null
    k wait --for=condition=Established --timeout=60s crd/eventseriespolicies.eventseries.dev >/dev/null
    operator_start "$CLUSTER_DIR/operator.log" --finish-after "$FINISH_AFTER" \
      --heartbeat-interval "$HEARTBEAT" --series-window "$WINDOW"
    for _ in $(seq 300); do operator_ready && break; sleep 0.2; done
    operator_ready || die "$approach: the operator is not ready (log $CLUSTER_DIR/operator.log)"
  fi
  local base_core base_ev
  read -r base_core base_ev <<<"$(api_writes)"
  local storm=(--namespace "$NS" --pods "$PODS" --rate "$RATE" --duration "${DURATION}s")
  case "$approach" in
    legacy | event-series)
      "$BIN/emitter" --kubeconfig "$KUBECONFIG_FILE" --recorder legacy --scenario crashloop "${storm[@]}" \
        --qps 1000 --burst 1000 --output "$CLUSTER_DIR/emitter.json" >"$CLUSTER_DIR/emitter.log" 2>&1 &
      ;;
    events)
      "$BIN/emitter" --kubeconfig "$KUBECONFIG_FILE" --recorder events --scenario crashloop "${storm[@]}" \
        --linger "${LINGER}s" --qps 1000 --burst 1000 --output "$CLUSTER_DIR/emitter.json" >"$CLUSTER_DIR/emitter.log" 2>&1 &
      ;;
    kube-rs)
      rm -f "$CLUSTER_DIR/progress"
      KUBECONFIG="$KUBECONFIG_FILE" "$KUBE_RECORDER" "${storm[@]}" --output "$CLUSTER_DIR/emitter.json" \
        --progress "$CLUSTER_DIR/progress" \
        >"$CLUSTER_DIR/emitter.log" 2>&1 &
      ;;
    *) die "unknown approach $approach" ;;
  esac
  emitter_pid=$!
  local t0=$SECONDS storm_end='' core ev t occ
  echo "elapsed_s,occurrences,core_writes,events_k8s_io_writes" >"$csv"
  while :; do
    t=$((SECONDS - t0))
    read -r core ev <<<"$(api_writes)"
    # Occurrences so far: counted by kube_recorder (its publish calls wait for the API); the client-go
    # recorders never block the caller, so theirs follow the clock.
    if [ "$approach" = kube-rs ]; then
      occ="$(cat "$CLUSTER_DIR/progress" 2>/dev/null || echo 0)"
    else
      occ=$(python3 -c "print(round(min($t, $DURATION) * $PODS * $RATE))")
    fi
    echo "$t,$occ,$((core - base_core)),$((ev - base_ev))" >>"$csv"
    if [ -z "$storm_end" ] && ! kill -0 "$emitter_pid" 2>/dev/null; then
      wait "$emitter_pid" || die "$approach: the emitter failed (log $CLUSTER_DIR/emitter.log)"
      emitter_pid=''
      storm_end=$t
      log "$approach: storm and recorder flush over after ${t}s"
      [ "$approach" = event-series ] || break
    fi
    if [ -n "$storm_end" ]; then
      # event-series: sample on until every series is Finished (or DRAIN s after the storm).
      local started finished
      started="$(op_metric event_series_series_started_total)"
      finished="$(op_metric event_series_series_finished_total)"
      if [ "${started%.*}" -gt 0 ] && [ "$started" = "$finished" ]; then
        sleep 3 # let the last finish writes land
        read -r core ev <<<"$(api_writes)"
        echo "$((SECONDS - t0)),$occ,$((core - base_core)),$((ev - base_ev))" >>"$csv"
        break
      fi
      [ $((t - storm_end)) -ge "$DRAIN" ] && break
    fi
    sleep "$SAMPLE"
  done

  # What the API ends up holding: occurrences counted in the stored objects.
  local emitted api_count op_json='{}'
  if [ "$approach" = kube-rs ]; then
    emitted="$(jq .emitted "$CLUSTER_DIR/emitter.json")"
    api_count="$(k get events.v1.events.k8s.io -n "$NS" -o json | jq '[.items[] | (.series.count // 1)] | add // 0')"
  else
    emitted="$(jq '[.[].emitted] | add' "$CLUSTER_DIR/emitter.json")"
    api_count="$(jq '[.[].api_count] | add' "$CLUSTER_DIR/emitter.json")"
  fi
  if [ "$approach" = event-series ]; then
    k get events.v1.events.k8s.io -n "$NS" -l app.kubernetes.io/managed-by=event-series -o json >"$CLUSTER_DIR/series.json"
    op_json="$(jq -n --slurpfile s "$CLUSTER_DIR/series.json" \
      --arg started "$(op_metric event_series_series_started_total)" \
      --arg finished "$(op_metric event_series_series_finished_total)" \
      --arg occ "$(op_metric event_series_occurrences_total)" \
      '$s[0] as $s | {series_objects: ($s.items | length),
        series_count_sum: ([$s.items[] | .series.count // 1] | add // 0),
        finished_objects: ([$s.items[] | select(.metadata.labels["eventseries.dev/state"] == "Finished")] | length),
        series_started: ($started | tonumber), series_finished: ($finished | tonumber),
        operator_occurrences: ($occ | tonumber)}')"
  fi
  jq -n --arg approach "$approach" --argjson pods "$PODS" --argjson rate "$RATE" --argjson duration "$DURATION" \
    --argjson emitted "$emitted" --argjson api_count "$api_count" \
    --argjson core "$((core - base_core))" --argjson ev "$((ev - base_ev))" \
    --argjson storm_end "$storm_end" --argjson machine_start "$machine_before" --argjson machine_end "$(machine_json)" \
    --argjson operator "$op_json" \
    --arg durations "finishAfter=$FINISH_AFTER heartbeatInterval=$HEARTBEAT seriesWindow=$WINDOW" \
    --argjson linger "$([ "$approach" = events ] && echo "$LINGER" || echo 0)" \
    '{approach: $approach, pods: $pods, rate: $rate, duration_s: $duration, emitted: $emitted,
      api_count: $api_count, core_writes: $core, events_k8s_io_writes: $ev,
      storm_and_flush_s: $storm_end, linger_s: $linger, operator: $operator, operator_durations: $durations,
      machine_start: $machine_start, machine_end: $machine_end}' >"$json"
  log "$approach: $(jq -c '{emitted, api_count, core_writes, events_k8s_io_writes, operator}' "$json")"
}

[ -x "$BIN/emitter" ] || die "no $BIN/emitter: run bash hack/build-envtest.sh"
[ -x "$OPERATOR" ] || die "no $OPERATOR: cargo build --release"
[ -x "$KUBE_RECORDER" ] || die "no $KUBE_RECORDER: cargo build --release --example kube_recorder"
mkdir -p "$OUT"
approaches=("$@")
[ ${#approaches[@]} -gt 0 ] || approaches=(legacy events kube-rs event-series)
log "storm: $PODS pods x $RATE/s x ${DURATION}s; approaches: ${approaches[*]}; $(machine_json)"
if [ "${SERIAL:-0}" = 1 ]; then
  for a in "${approaches[@]}"; do (one "$a"); done
else
  pids=()
  for a in "${approaches[@]}"; do
    (one "$a") &
    pids+=($!)
  done
  rc=0
  for p in "${pids[@]}"; do wait "$p" || rc=1; done
  [ "$rc" = 0 ] || die "an approach failed"
fi
jq -s '.' "$OUT"/*.json | jq 'map(select(type == "object" and has("approach")))' >"$OUT/../economy.json.tmp" &&
  mv "$OUT/../economy.json.tmp" "$OUT/../economy.json"
keep_dated economy "$OUT/../economy.json"
log "done: $OUT (summary $(dirname "$OUT")/economy.json); plot with: python3 bench/plot.py"
