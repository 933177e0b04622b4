#!/usr/bin/env bash
# Bookmarks: what a forced watch reconnect costs with and without watch bookmarks.
#
# On each of its own fresh apiservers (target/envtest-bench-bm-<cache>-<bookmarks>), with etcd
# compacted every COMPACTION (default 20s, instead of 5m, so that the test is short):
#   1. RAW raw events, each a series at once (bench-loader seed); the operator starts with
#      --watch-timeout WATCH_TIMEOUT (every watch ends and is resumed after that long) and, for
#      bookmarks=off, the hidden --no-watch-bookmarks;
#   2. once every series exists, FILLER writes at FILLER_RATE per second that the operator's watch
#      filters out (events labelled managed-by=event-series): the cluster moves on for longer than
#      the watch cache's 75 s history window while the operator's watch sees nothing;
#   3. SETTLE seconds (several reconnects), then the counts: relists of the operator, objects the
#      apiserver returned to LISTs of core events (the raw events re-sent), watch events it sent.
# cache=off is the apiserver's default: no watch cache for events (DefaultWatchCacheSizes), so it sends
# no bookmarks at all for them; cache=on passes --watch-cache-sizes=events#100.
#
# Usage: bench/bookmarks.sh [cache-bookmarks...]   (default: off-on off-off on-on on-off)
# Environment: RAW (5000) FILLER (24000) FILLER_RATE (120) WATCH_TIMEOUT (20s) COMPACTION (20s) SETTLE (90)
#              OUT (bench/results)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$ROOT/bench/lib.sh"

RAW="${RAW:-5000}" FILLER="${FILLER:-24000}" FILLER_RATE="${FILLER_RATE:-120}" WATCH_TIMEOUT="${WATCH_TIMEOUT:-20s}"
COMPACTION="${COMPACTION:-20s}" SETTLE="${SETTLE:-90}" OUT="${OUT:-$ROOT/bench/results}"
LOADER="$TARGET/release/examples/bench-loader"
[ -x "$LOADER" ] || die "no $LOADER: cargo build --release --example bench-loader"
mkdir -p "$OUT/bookmarks"

# api_sums: "<objects LISTs of core events returned from the watch cache> <from etcd> <watch events
# sent for core events>". With the watch cache on, the etcd figure includes the cache's own relists
# (every event, filler included), so the operator's relists are the figure to compare.
api_sums() {
  api_get /metrics | awk '
    /^apiserver_cache_list_returned_objects_total\{/ && /group=""/ && /resource="events"/ { c += $NF }
    /^apiserver_storage_list_returned_objects_total\{/ && /group=""/ && /resource="events"/ { e += $NF }
    /^apiserver_watch_events_total\{/ && /group=""/ && /resource="events"/ { w += $NF }
    END { printf "%d %d %d\n", c, e, w }'
}

one() {
  local cache="$1" bm="$2"
  OP_PID=''
  trap 'stop_pid "$OP_PID"; cluster_stop' EXIT
  local extra="--etcd-compaction-interval=$COMPACTION"
  [ "$cache" = on ] && extra+=" --watch-cache-sizes=events#100"
  cluster_start "bm-$cache-$bm" "APISERVER_EXTRA_ARGS=$extra"
  KUBECONFIG="$KUBECONFIG_FILE" "$LOADER" --concurrency 16 seed --count "$RAW" >/dev/null
  local flags=(--qps 2000 --burst 2000 --finish-after 2h --series-window 2h --heartbeat-interval 2h
    --watch-timeout "$WATCH_TIMEOUT")
  [ "$bm" = off ] && flags+=(--no-watch-bookmarks)
  operator_start "$CLUSTER_DIR/operator.log" "${flags[@]}"
  local t0=$SECONDS
  until [ "$(op_metric 'event_series_api_requests_total{verb="create",code="201"}')" = "$RAW" ]; do
    [ $((SECONDS - t0)) -lt 900 ] || die "bm-$cache-$bm: series not all created after 900s"
    sleep 2
  done
  sleep 5
  local r0 s0 b0 c0 e0 w0
  r0="$(op_metric event_series_watch_relists_total)"
  s0="$(op_metric event_series_watch_restarts_total)"
  b0="$(op_metric event_series_bookmarks_total)"
  read -r c0 e0 w0 <<<"$(api_sums)"
  local f0=$SECONDS
  KUBECONFIG="$KUBECONFIG_FILE" "$LOADER" --concurrency 16 filler --count "$FILLER" --rate "$FILLER_RATE" >/dev/null
  log "bm-$cache-$bm: $FILLER filler writes in $((SECONDS - f0))s; settling ${SETTLE}s"
  sleep "$SETTLE"
  local r1 s1 b1 c1 e1 w1
  r1="$(op_metric event_series_watch_relists_total)"
  s1="$(op_metric event_series_watch_restarts_total)"
  b1="$(op_metric event_series_bookmarks_total)"
  read -r c1 e1 w1 <<<"$(api_sums)"
  jq -n --arg cache "$cache" --arg bookmarks "$bm" --argjson raw "$RAW" --argjson filler "$FILLER" \
    --arg wt "$WATCH_TIMEOUT" --arg compaction "$COMPACTION" --argjson settle "$SETTLE" \
    --argjson relists "$((${r1%.*} - ${r0%.*}))" --argjson restarts "$((${s1%.*} - ${s0%.*}))" \
    --argjson bookmarks_received "$((${b1%.*} - ${b0%.*}))" --argjson from_cache "$((c1 - c0))" --argjson from_etcd "$((e1 - e0))" \
    --argjson watch_events "$((w1 - w0))" --argjson machine "$(machine_json)" \
    '{watch_cache: $cache, bookmarks: $bookmarks, raw_events: $raw, filler_writes: $filler,
      watch_timeout: $wt, etcd_compaction: $compaction, settle_s: $settle,
      relists: $relists, raw_events_resent: ($relists * $raw), watch_restarts: $restarts,
      bookmarks_received: $bookmarks_received, list_objects_from_watch_cache: $from_cache,
      list_objects_from_etcd: $from_etcd, watch_events_sent: $watch_events, machine: $machine}' \
    >"$OUT/bookmarks/$cache-$bm.json"
  log "bm-$cache-$bm: $(jq -c 'del(.machine)' "$OUT/bookmarks/$cache-$bm.json")"
}

runs=("$@")
[ ${#runs[@]} -gt 0 ] || runs=(off-on off-off on-on on-off)
pids=()
for r in "${runs[@]}"; do
  (one "${r%-*}" "${r#*-}") &
  pids+=($!)
done
rc=0
for p in "${pids[@]}"; do wait "$p" || rc=1; done
jq -s '.' "$OUT"/bookmarks/*.json >"$OUT/bookmarks.json"
keep_dated bookmarks "$OUT/bookmarks.json"
log "done: $OUT/bookmarks.json"
exit "$rc"
