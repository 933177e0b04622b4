#!/usr/bin/env bash
# `just bench-rollout`: a `kubectl rollout restart` of the operator's Deployment on the real node,
# at SERIES (default 100,000) series, the way a cluster takes it every week.
#   1. The node cluster (hack/cluster-up-node.sh, in target/envtest-bench-rollout; the image built and
#      imported), run under `flock NODE_LOCK` for the whole run: one node per machine. An
#      Alertmanager (hack/tools.sh) on the node bridge's address, where the Pods reach it. The
#      operator installed with `kubectl apply -k config/default` (2 replicas, maxUnavailable 0, the
#      memory limit as shipped) and its arguments patched for the bench: --qps/--burst 2000 (10^5
#      creates in minutes), heartbeat, finishAfter and seriesWindow 2 h and no early refreshes (the
#      seeded series are not written again during the run), --event-ttl 3h as the API server's,
#      --alertmanager-url, --alert-resend-interval ALERT_RESEND (default 15s: each post valid 60 s).
#   2. The load: SERIES raw Events that each count 2 recent occurrences (`bench-loader seed`) over
#      SEED_NAMESPACES (default 1,000) namespaces bench-N; a policy with spec.alert (minCount 2) on
#      the first ALERT_NAMESPACES (default 50) of them, so that at 10^5 5,000 loops alert (100 a
#      namespace: --max-alerts-per-namespace's default); once every series object exists and the
#      writer is idle, a stream of RATE (5) kubelet-style changes a second on KEYS (50) keys in
#      namespace rollout-stream, whose policy sets a STREAM_HEARTBEAT (5s) heartbeat, so that the
#      leader writes continuously.
#   3. `kubectl rollout restart`, then `kubectl rollout status`. From the API server's audit log
#      (every events.k8s.io and Lease write, timed by the API server, the writing Pod named by its
#      ServiceAccount token): the longest gap between two series writes of the load's namespaces
#      from the restart to 30 s after the last old Pod went (against the 30 s before it), each change
#      of the Lease's holder, and for each the time from the old leader's last request to the new
#      leader's first series write; from the new leader's log, whether it was warm when it took the
#      Lease (every Pod's log is kept in CLUSTER_DIR/logs). From Alertmanager
#      (bench/rollout_alerts.py, every 2 s): the active alerts before and at their fewest, and every
#      alert that lapsed (resolved, then firing again). From /proc and the cgroups: RSS and memory of each Pod before and after; restarts
#      and OOM kills. Then the stream stops and every key's count is compared with the raw objects'
#      (the loader's writes, as the API server holds them); the stream's keys also before and after
#      the rollout, while it runs (a series may lag behind its raw objects then, never lead them).
# OPERATOR_ARGS adds arguments (e.g. debug logs); the audit log is kept when a count is off.
# Result: bench/results/rollout/<date>.json, rewritten after each phase (`completed` false until the
# end), and one line on stdout. Needs what hack/cluster-up-node.sh needs (Linux, root, containerd).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

# The whole run holds the machine's node lock; `flock -o` keeps it out of the processes started here,
# so that none of them holds it after the run.
NODE_LOCK="${NODE_LOCK:-/run/event-series-node.lock}"
if [ "${ROLLOUT_LOCKED:-}" != 1 ]; then
  printf '%s bench: waiting for the node lock %s\n' "$(date +%T)" "$NODE_LOCK" >&2
  exec env ROLLOUT_LOCKED=1 flock -o "$NODE_LOCK" bash "$0" "$@"
fi

# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$ROOT/bench/lib.sh"
# NODE_IP: the node bridge's address, where the Pods reach a server of this machine.
# shellcheck source-path=SCRIPTDIR source=../hack/envtest-lib.sh
. "$ROOT/hack/envtest-lib.sh"

SERIES="${SERIES:-100000}" SEED_NAMESPACES="${SEED_NAMESPACES:-1000}" ALERT_NAMESPACES="${ALERT_NAMESPACES:-50}"
RATE="${RATE:-5}" KEYS="${KEYS:-50}" STREAM_HEARTBEAT="${STREAM_HEARTBEAT:-5s}" ALERT_RESEND="${ALERT_RESEND:-15s}"
ROLLOUT_TIMEOUT="${ROLLOUT_TIMEOUT:-1800}"
# Generous for 10^5 series on 2 busy cores (about a tenth of that is needed): a run that is merely
# slow must not fail.
SETTLE_TIMEOUT="${SETTLE_TIMEOUT:-$((1800 + SERIES / 25))}"
STREAM_NS=rollout-stream SYS=event-series-system ALERTNAME=RolloutBenchLoop
SA=system:serviceaccount:event-series-system:event-series
need_loader
bash hack/tools.sh alertmanager >&2

CLUSTER_DIR="$ROOT/target/envtest-bench-rollout"
KUBECONFIG_FILE="$CLUSTER_DIR/kubeconfig"
LOAD_PID='' AM_PID='' POLL_PID='' WATCH_PID='' LOGS_PID='' OUT=''
cleanup() {
  local p
  for p in "$LOAD_PID" "$POLL_PID" "$WATCH_PID" "$LOGS_PID" "$AM_PID"; do [ -z "$p" ] || kill "$p" 2>/dev/null || true; done
  [ -z "$OUT" ] || [ "$(jq -r .completed "$OUT" 2>/dev/null)" = true ] ||
    log "the run stopped early; what it measured is in $OUT, logs in $CLUSTER_DIR"
  ENVTEST_DIR="$CLUSTER_DIR" bash hack/cluster-down.sh >/dev/null 2>&1 || true
}
trap cleanup EXIT

# save KEY JSON: sets KEY in the result file (written after every phase, so that a run stopped
# later keeps what it measured).
save() {
  jq --arg k "$1" --argjson v "$2" '.[$k] = $v' "$OUT" >"$OUT.tmp"
  mv "$OUT.tmp" "$OUT"
}

kd() { k -n "$SYS" "$@"; }

# --- 1. the node, Alertmanager, the operator ---
t0=$SECONDS
ENVTEST_DIR="$CLUSTER_DIR" bash hack/cluster-down.sh >/dev/null
# Raw events outlive the run (3 h), so that every key's raw count is still there at the end.
EVENT_TTL=3h ENVTEST_DIR="$CLUSTER_DIR" bash hack/cluster-up-node.sh >&2
# shellcheck disable=SC1091
API_URL="$(. "$CLUSTER_DIR/cluster.env" && echo "$APISERVER_URL")"
cluster_s=$((SECONDS - t0))
machine="$(machine_json)"

silent_alertmanager "$NODE_IP"

# SERIES (100,000) series, above the default bound (--max-active-series, where no policy applies), their creates
# all queued at once (--max-pending-writes: past the default 50,000 the newest are shed until their
# next write).
# OPERATOR_ARGS: more arguments, word-split (e.g. --log-level=info,event_series::writer=debug).
# shellcheck disable=SC2206
FLAGS=(--qps=2000 --burst=2000 --heartbeat-interval=2h --finish-after=2h --series-window=2h --first-refresh=0
  "--max-active-series=$SERIES" "--max-pending-writes=$SERIES" --event-ttl=3h "--alertmanager-url=$AM_URL" "--alert-resend-interval=$ALERT_RESEND" ${OPERATOR_ARGS:-})
k apply -k config/default >/dev/null
dep_args="$(kd get deployment event-series -o jsonpath='{.spec.template.spec.containers[0].args}')"
# The Deployment's arguments, each of FLAGS replacing one of the same name.
dep_args="$(jq -c --argjson add "$(printf '%s\n' "${FLAGS[@]}" | jq -R . | jq -s -c .)" \
  '($add | map(split("=")[0])) as $names | [.[] | select((split("=")[0]) as $f | ($names | index($f)) == null)] + $add' \
  <<<"$dep_args")"
kd patch deployment event-series --type=json \
  -p "[{\"op\":\"replace\",\"path\":\"/spec/template/spec/containers/0/args\",\"value\":$dep_args}]" >/dev/null
# Egress to Alertmanager's port, as config/alertmanager adds it (this node's bridge enforces no
# NetworkPolicy, a cluster's network plugin would).
kd patch networkpolicy event-series --type=json \
  -p "[{\"op\":\"add\",\"path\":\"/spec/egress/-\",\"value\":{\"ports\":[{\"port\":$AM_PORT,\"protocol\":\"TCP\"}]}}]" >/dev/null
kd rollout status deployment/event-series --timeout=300s >&2
image="$(kd get deployment event-series -o jsonpath='{.spec.template.spec.containers[0].image}')"
limit="$(kd get deployment event-series -o jsonpath='{.spec.template.spec.containers[0].resources.limits.memory}')"

# A reader of the replicas' /metrics (HTTPS, token checked), as Prometheus would be.
kd create serviceaccount rollout-metrics >/dev/null
k create clusterrolebinding rollout-metrics --clusterrole event-series-metrics-reader \
  --serviceaccount "$SYS:rollout-metrics" >/dev/null
TOKEN="$(kd create token rollout-metrics --duration=12h)"

alert_values="$(seq 0 $((ALERT_NAMESPACES - 1)) | sed 's/^/bench-/' | paste -sd, -)"
k apply -f - >/dev/null <<EOF
apiVersion: eventseries.dev/v1alpha1
kind: EventSeriesPolicy
metadata: {name: rollout-stream}
spec:
  namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: $STREAM_NS}}
  heartbeatInterval: $STREAM_HEARTBEAT
  firstRefresh: "0"
  finishAfter: 2h
  seriesWindow: 2h
---
apiVersion: eventseries.dev/v1alpha1
kind: EventSeriesPolicy
metadata: {name: rollout-alerts}
spec:
  namespaceSelector:
    matchExpressions: [{key: kubernetes.io/metadata.name, operator: In, values: [$alert_values]}]
  heartbeatInterval: 2h
  firstRefresh: "0"
  finishAfter: 2h
  seriesWindow: 2h
  alert: {minCount: 2, alertname: $ALERTNAME}
EOF
# Seed i goes to namespace bench-(i mod SEED_NAMESPACES): the loops the alert policy selects.
q=$((SERIES / SEED_NAMESPACES)) r=$((SERIES % SEED_NAMESPACES))
alerts_expected=$((ALERT_NAMESPACES * q + (r < ALERT_NAMESPACES ? r : ALERT_NAMESPACES)))

mkdir -p bench/results/rollout
OUT="bench/results/rollout/$(date -u +%Y%m%dT%H%M%SZ).json"
jq -n --arg commit "$BENCH_COMMIT" --argjson machine "$machine" --arg image "$image" --arg limit "$limit" \
  --arg flags "${FLAGS[*]}" --argjson series "$SERIES" \
  --argjson seed_ns "$SEED_NAMESPACES" --argjson alert_ns "$ALERT_NAMESPACES" --argjson alerts "$alerts_expected" \
  --argjson rate "$RATE" --argjson keys "$KEYS" --arg hb "$STREAM_HEARTBEAT" --arg resend "$ALERT_RESEND" \
  --argjson cluster_s "$cluster_s" \
  '{commit: $commit, machine: $machine, completed: false, image: $image, memory_limit: $limit,
    flags_added: $flags,
    load: {series: $series, seed_namespaces: $seed_ns, alert_namespaces: $alert_ns, alerts_expected: $alerts,
           alert_resend_interval: $resend,
           stream: {rate_per_s: $rate, keys: $keys, heartbeat: $hb}},
    setup_s: {cluster: $cluster_s}}' >"$OUT"
log "result: $OUT"

# --- helpers on the replicas ---
leader() { kd get lease event-series -o jsonpath='{.spec.holderIdentity}' 2>/dev/null || true; }
pods() { kd get pods -l app.kubernetes.io/name=event-series -o jsonpath='{range .items[*]}{.metadata.name}{"\n"}{end}'; }

# pod_metric POD NAME: one metric line's value from the Pod's /metrics ("" when unreachable).
pod_metric() {
  local ip
  ip="$(kd get pod "$1" -o jsonpath='{.status.podIP}' 2>/dev/null || true)"
  [ -n "$ip" ] || return 0
  { curl -fsSk --max-time 5 -H "Authorization: Bearer $TOKEN" "https://$ip:8443/metrics" 2>/dev/null || true; } |
    awk -v m="$2" '$1 == m && !f { v = $2; f = 1 } END { if (f) print v }'
}

# pod_pid POD: the pid of the Pod's operator process on this machine (its environment names it).
pod_pid() {
  local d
  for d in /proc/[0-9]*; do
    [ "$(cat "$d/comm" 2>/dev/null)" = event-series ] || continue
    if tr '\0' '\n' <"$d/environ" 2>/dev/null | grep -qx "POD_NAME=$1"; then
      echo "${d#/proc/}"
      return
    fi
  done
}

# memory POD: the Pod's process RSS and peak (VmHWM), its container cgroup's memory now and at
# its peak (what the limit applies to), and its restarts, as JSON.
memory() {
  local pid cg kib=null peak=null rss=null hwm=null restarts
  pid="$(pod_pid "$1")"
  restarts="$(kd get pod "$1" -o jsonpath='{.status.containerStatuses[0].restartCount}' 2>/dev/null || true)"
  if [ -n "$pid" ]; then
    rss="$(rss_kib "$pid")" hwm="$(hwm_kib "$pid")"
    # cgroup v1 (a memory hierarchy of its own) or v2.
    cg="/sys/fs/cgroup/memory$(sed -n 's/^[0-9]*:memory://p' "/proc/$pid/cgroup")"
    if [ -r "$cg/memory.usage_in_bytes" ]; then
      kib=$(($(cat "$cg/memory.usage_in_bytes") / 1024)) peak=$(($(cat "$cg/memory.max_usage_in_bytes") / 1024))
    else
      cg="/sys/fs/cgroup$(sed -n 's/^0:://p' "/proc/$pid/cgroup")"
      [ -r "$cg/memory.current" ] && kib=$(($(cat "$cg/memory.current") / 1024))
      [ -r "$cg/memory.peak" ] && peak=$(($(cat "$cg/memory.peak") / 1024))
    fi
  fi
  jq -n --arg pod "$1" --arg leader "$(leader)" --argjson rss "${rss:-null}" --argjson hwm "${hwm:-null}" \
    --argjson kib "$kib" --argjson peak "$peak" --argjson restarts "${restarts:-null}" \
    '{pod: $pod, leader: ($pod == $leader), rss_kib: $rss, hwm_kib: $hwm, cgroup_kib: $kib, cgroup_peak_kib: $peak,
      restarts: $restarts}'
}
all_memory() { pods | while read -r p; do memory "$p"; done | jq -s -c .; }

# follow_logs: each operator Pod's log, from its start to its end, in CLUSTER_DIR/logs/ (a deleted
# Pod's log goes with it).
follow_logs() {
  trap 'kill $(jobs -p) 2>/dev/null; exit 0' TERM
  mkdir -p "$CLUSTER_DIR/logs"
  while :; do
    for p in $(kd get pods -l app.kubernetes.io/name=event-series --field-selector=status.phase=Running \
      -o jsonpath='{range .items[*]}{.metadata.name}{"\n"}{end}' 2>/dev/null || true); do
      [ -e "$CLUSTER_DIR/logs/$p.log" ] || kd logs -f "$p" >"$CLUSTER_DIR/logs/$p.log" 2>&1 &
    done
    sleep 2
  done
}

# until_idle WHAT: until the leader has had no write pending for 10 s in a row.
until_idle() {
  local t0=$SECONDS quiet=0 l
  while [ "$quiet" -lt 5 ]; do
    [ $((SECONDS - t0)) -lt "$SETTLE_TIMEOUT" ] || die "the writer was not idle within $SETTLE_TIMEOUT s ($1)"
    l="$(leader)"
    if [ -n "$l" ] && [ "$(pod_metric "$l" event_series_writes_pending)" = 0 ]; then
      quiet=$((quiet + 1))
    else
      quiet=0
    fi
    sleep 2
  done
}

series_objects() {
  k get events.v1.events.k8s.io -A -l app.kubernetes.io/managed-by=event-series --no-headers \
    -o custom-columns=NS:.metadata.namespace | grep -c '^bench-' || true
}

am_active() {
  curl -fsS --max-time 20 "$AM_URL/api/v2/alerts?filter=alertname%3D%22$ALERTNAME%22" | jq length
}

# compare [NS]: every key of the load's namespaces (or of NS), its raw objects' occurrences against
# its series': per group (seeded, stream) the keys, those exact (one series object, the raw count),
# those off, those whose series count more than the raw objects (an occurrence counted twice: the
# series can lag behind the raw objects while the stream runs, never lead), and the first 20 off.
compare() {
  local scope=(-A)
  [ -z "${1:-}" ] || scope=(-n "$1")
  {
    k get events "${scope[@]}" --no-headers -l 'app.kubernetes.io/managed-by!=event-series' \
      -o custom-columns=NS:.metadata.namespace,NAME:.involvedObject.name,REASON:.reason,COUNT:.count | sed 's/^/raw /'
    k get events.v1.events.k8s.io "${scope[@]}" --no-headers -l app.kubernetes.io/managed-by=event-series \
      -o custom-columns=NS:.metadata.namespace,NAME:.regarding.name,REASON:.reason,COUNT:.series.count | sed 's/^/series /'
  } | awk -v stream="$STREAM_NS" '
    $2 !~ /^bench-/ && $2 != stream { next }
    { key = $2 " " $3 " " $4; g = ($2 == stream) ? "stream" : "seeded"; group[key] = g }
    $1 == "raw" { raw[key] += $5 }
    $1 == "series" { ser[key] += $5; objs[key]++ }
    END {
      for (key in group) {
        g = group[key]
        if (raw[key] < 2 && !(key in ser)) continue   # a single occurrence: no series
        keys[g]++; rs[g] += raw[key]; ss[g] += ser[key]
        if (ser[key] > raw[key]) over[g]++
        if (raw[key] == ser[key] && objs[key] == 1) { exact[g]++; continue }
        off[g]++
        if (shown++ < 20)
          list = list (list == "" ? "" : ",") sprintf("{\"key\":\"%s\",\"raw\":%d,\"series\":%d,\"objects\":%d}",
            key, raw[key], ser[key], objs[key])
      }
      printf "{"
      for (i = 1; i <= 2; i++) {
        g = i == 1 ? "seeded" : "stream"
        printf "%s\"%s\":{\"keys\":%d,\"exact\":%d,\"off\":%d,\"counted_more_than_raw\":%d,\"raw_occurrences\":%d,\"series_count_sum\":%d}",
          i == 1 ? "" : ",", g, keys[g], exact[g], off[g], over[g], rs[g], ss[g]
      }
      printf ",\"off_keys\":[%s]}\n", list
    }'
}

# --- 2. the load ---
follow_logs &
LOGS_PID=$!
t0=$SECONDS
seed="$(KUBECONFIG="$KUBECONFIG_FILE" "$LOADER" --concurrency 48 seed --count "$SERIES" --namespaces "$SEED_NAMESPACES")"
seed_s=$((SECONDS - t0))
save seed "$seed"
[ "$(jq '.done + .already_existed' <<<"$seed")" = "$SERIES" ] || die "the loader stored $(jq -c . <<<"$seed") of $SERIES"
log "stored $SERIES raw events that are series in $seed_s s"
t0=$SECONDS
while :; do
  until_idle "creating the series"
  have="$(series_objects)"
  [ "$have" -ge "$SERIES" ] && break
  log "$have series objects of $SERIES so far"
  [ $((SECONDS - t0)) -lt "$SETTLE_TIMEOUT" ] || die "only $have series objects of $SERIES after $SETTLE_TIMEOUT s"
done
creates_s=$((SECONDS - t0))
log "every series object exists ($have), the writer idle, $creates_s s after the seed"
# Key i changes about (KEYS n + i) / RATE s after the stream's start (n = 0, 1, ...): an off key's
# changes fall in one slot of each round.
save stream_started_ms "$(now_ms)"
KUBECONFIG="$KUBECONFIG_FILE" "$LOADER" --concurrency 4 rate --legacy --rate "$RATE" --duration 86400 \
  --keys "$KEYS" --namespace "$STREAM_NS" >/dev/null 2>"$CLUSTER_DIR/stream.log" &
LOAD_PID=$!
t1=$SECONDS
until [ "$(am_active || echo 0)" -ge "$alerts_expected" ]; do
  [ $((SECONDS - t1)) -lt 600 ] || die "$(am_active || echo 0) alerts active of $alerts_expected after 10 min"
  sleep 5
done
sleep 30
# While the stream runs a series may lag behind its raw objects, never lead them.
save stream_before_rollout "$(compare "$STREAM_NS" | jq -c .stream)"
save setup_s "$(jq -n --argjson c "$cluster_s" --argjson s "$seed_s" --argjson w "$creates_s" \
  '{cluster: $c, seed: $s, creates_after_seed: $w}')"

# --- 3. the rollout ---
python3 bench/rollout_alerts.py "$AM_URL" "$ALERTNAME" 2 >"$CLUSTER_DIR/alerts.jsonl" 2>"$CLUSTER_DIR/alerts.err" &
POLL_PID=$!
k -n "$SYS" get pods -w --output-watch-events -o json >"$CLUSTER_DIR/pods.watch" 2>/dev/null &
WATCH_PID=$!
before="$(all_memory)"
leader_before="$(leader)"
relists_before="$(pod_metric "$leader_before" event_series_watch_relists_total)"
sleep 30
restart_ms="$(now_ms)"
log "kubectl rollout restart (leader $leader_before; replicas $(jq -c 'map({pod, rss_kib})' <<<"$before"))"
kd rollout restart deployment/event-series >/dev/null
kd rollout status deployment/event-series --timeout="${ROLLOUT_TIMEOUT}s" >&2
status_ms="$(now_ms)"
# `rollout status` returns once the new Pods are available; the last old one may still be stopping.
t1=$SECONDS
until [ "$(kd get pods -l app.kubernetes.io/name=event-series -o json | jq '(.items | length) as $all
    | [.items[] | select(.metadata.deletionTimestamp == null
       and any(.status.conditions[]?; .type == "Ready" and .status == "True"))] | length
    | if . == 2 and $all == 2 then 1 else 0 end')" = 1 ]; do
  [ $((SECONDS - t1)) -lt 300 ] || die "the old Pods did not go within 5 min of the rollout"
  sleep 1
done
gone_ms="$(now_ms)"
log "rolled out: status after $(((status_ms - restart_ms) / 1000)) s, old Pods gone after $(((gone_ms - restart_ms) / 1000)) s"
sleep 30
end_ms="$(now_ms)"
kill "$POLL_PID" "$WATCH_PID" 2>/dev/null || true
wait "$POLL_PID" "$WATCH_PID" 2>/dev/null || true
POLL_PID='' WATCH_PID=''
after="$(all_memory)"
leader_after="$(leader)"
relists_after="$(pod_metric "$leader_after" event_series_watch_relists_total)"
save rollout "$(jq -n --argjson status $((status_ms - restart_ms)) --argjson gone $((gone_ms - restart_ms)) \
  --arg lb "$leader_before" --arg la "$leader_after" --argjson before "$before" --argjson after "$after" \
  --arg rb "${relists_before:-}" --arg ra "${relists_after:-}" \
  '{status_ms: $status, old_pods_gone_ms: $gone, leader_before: $lb, leader_after: $la,
    replicas_before: $before, replicas_after: $after,
    watch_relists: {old_leader_before: $rb, new_leader_after: $ra}}')"

# audit_rows: "<ms> <lease|series> <pod>" of every 2xx write of the operator's Pods, from the API
# server's audit log (every file: the holder before the window may be in one rotated before it):
# the Lease, and the events.k8s.io Events of the load's namespaces (the series under test; the
# operator's other writes, and the scheduler's and controller-manager's events.k8s.io writes, are
# left out).
audit_rows() {
  find "$CLUSTER_DIR" -maxdepth 1 -name 'audit*.log' -print0 |
    xargs -0 grep -hF '"stage":"ResponseComplete"' | grep -F "\"username\":\"$SA\"" |
    jq -r --arg stream "$STREAM_NS" '
      select((.verb == "create" or .verb == "update" or .verb == "patch") and .responseStatus.code < 300)
      | (if .objectRef.resource == "leases" and .objectRef.name == "event-series" then "lease"
         elif .objectRef.apiGroup == "events.k8s.io" and .objectRef.resource == "events"
              and ((.objectRef.namespace | startswith("bench-")) or .objectRef.namespace == $stream) then "series"
         else empty end) as $kind
      | (.stageTimestamp | capture("^(?<s>[^.Z]+)(\\.(?<f>[0-9]+))?Z$")) as $t
      | "\((($t.s + "Z") | fromdateiso8601) * 1000 + (("0." + ($t.f // "0")) | tonumber) * 1000 | floor) \($kind) \(.user.extra["authentication.kubernetes.io/pod-name"][0] // "?")"' |
    sort -n
}
audit_rows >"$CLUSTER_DIR/audit-rows.txt"

# longest_gap FROM TO (stdin: rows): the longest time without a series write in [FROM, TO] (its
# ends count as writes), where it began (ms after FROM), and the writes in it.
longest_gap() {
  awk -v from="$1" -v to="$2" '
    BEGIN { prev = from }
    $2 == "series" && $1 >= from && $1 <= to { if ($1 - prev > g) { g = $1 - prev; at = prev - from }; prev = $1; n++ }
    END { if (to - prev > g) { g = to - prev; at = prev - from }; printf "{\"ms\":%d,\"began_ms\":%d,\"writes\":%d}\n", g, at, n }'
}

# handovers FROM (stdin: rows): each change of the Pod writing the Lease after FROM, as JSON lines:
# the old and new holder, the old one's last request, the new one's first Lease write and first
# series write (ms after FROM).
handovers() {
  awk -v from="$1" '
    $1 < from { if ($2 == "lease") holder = $3; last[$3] = $1; next }
    $2 == "lease" && holder != "" && $3 != holder && !($3 in took) {
      n++; old[n] = holder; new[n] = $3; old_last[n] = last[holder]; took[$3] = $1; lease[n] = $1
    }
    $2 == "lease" { holder = $3 }
    $2 == "series" && ($3 in took) && !($3 in first) { first[$3] = $1 }
    { last[$3] = $1 }
    END {
      for (i = 1; i <= n; i++)
        printf "{\"from\":\"%s\",\"to\":\"%s\",\"old_last_request_ms\":%d,\"lease_taken_ms\":%d,\"first_series_write_ms\":%s}\n",
          old[i], new[i], old_last[i] - from, lease[i] - from, (new[i] in first) ? first[new[i]] - from : "null"
    }'
}
steady="$(longest_gap $((restart_ms - 30000)) "$restart_ms" <"$CLUSTER_DIR/audit-rows.txt")"
across="$(longest_gap "$restart_ms" "$end_ms" <"$CLUSTER_DIR/audit-rows.txt")"
changes="$(handovers "$restart_ms" <"$CLUSTER_DIR/audit-rows.txt" | jq -s -c 'map(. + {exit_to_first_write_ms:
  (if .first_series_write_ms == null then null else .first_series_write_ms - .old_last_request_ms end)})')"
# The Pods' own story from the watch: created, Ready, asked to stop (the deletion's time is its
# deletionTimestamp less the grace period), stopped (and how); to the second.
pod_story="$(jq -s -c --argjson from "$restart_ms" '
  def ms: if . == null then null else (fromdateiso8601 * 1000 - $from) end;
  group_by(.object.metadata.name) | map(. as $events | last.object as $p
    | ($p.status.containerStatuses[0] // {}) as $c
    | {pod: $p.metadata.name, created_ms: ($p.metadata.creationTimestamp | ms),
       ready_ms: ([$events[].object.status.conditions[]? | select(.type == "Ready" and .status == "True")
                   | .lastTransitionTime] | min | ms),
       deleted_ms: ([$events[].object.metadata | select(.deletionTimestamp != null)
                     | (.deletionTimestamp | fromdateiso8601) - .deletionGracePeriodSeconds][0]
                    | if . == null then null else . * 1000 - $from end),
       exited_ms: (($c.state.terminated // $c.lastState.terminated // {}).finishedAt | ms),
       exit: (($c.state.terminated // $c.lastState.terminated // {}) | {exitCode, reason}),
       restarts: $c.restartCount})' "$CLUSTER_DIR/pods.watch")"
alerts="$(jq -s -c --argjson from "$restart_ms" --argjson to "$end_ms" '
  map(select(.active != null)) as $p
  | ($p | map(select(.t < $from)) | last | .active) as $before
  | ($p | map(select(.t >= $from and .t <= $to))) as $w
  | {before: $before, fewest: ($w | map(.active) | min), after: ($w | last | .active), polls: ($w | length),
     lapsed: ([$w[].lapsed[]] | length), lapsed_alerts: ([$w[].lapsed[]] | unique | length),
     back: ([$w[].back[]] | length), poll_errors: 0}' "$CLUSTER_DIR/alerts.jsonl")"
alerts="$(jq -c --argjson e "$(grep -c '"error"' "$CLUSTER_DIR/alerts.jsonl" || true)" '.poll_errors = $e' <<<"$alerts")"
save rollout "$(jq --argjson steady "$steady" --argjson across "$across" --argjson changes "$changes" \
  --argjson pods "$pod_story" --argjson alerts "$alerts" \
  '. + {write_gap_ms: {across_rollout: $across, steady_before: $steady}, leader_changes: ($changes | length),
        handovers: ($changes | map(.to as $to | ($pods | map(select(.pod == $to)) | first // {}) as $p
          | . + {to_created_ms: $p.created_ms, to_ready_ms: $p.ready_ms})),
        pods: $pods, alerts: $alerts}' <<<"$(jq -c .rollout "$OUT")")"
# Whether each new leader was warm when it took the Lease, from its own log: a replica that took it
# before its restore was done led cold, and its first write waited for the restore.
warm="$(jq -c '.rollout.handovers[].to' "$OUT" | while read -r to; do
  jq -rs '(map(select(.fields.message == "lease acquired")) | first | .timestamp) as $lease
    | (map(select(.fields.message == "recovered; watching")) | first | .timestamp) as $warm
    | $warm != null and $lease != null and $warm < $lease' "$CLUSTER_DIR/logs/$(jq -r . <<<"$to").log" 2>/dev/null || echo null
done | jq -s -c .)"
save rollout "$(jq -c --argjson warm "$warm" '.rollout | .handovers |= [foreach .[] as $h (-1; . + 1; $h + {warm_at_lease: $warm[.]})]' "$OUT")"
log "rollout: longest write gap $(jq .ms <<<"$across") ms (steady before: $(jq .ms <<<"$steady") ms);" \
  "$(jq length <<<"$changes") leader change(s): $(jq -c 'map({to, exit_to_first_write_ms})' <<<"$changes");" \
  "alerts $(jq -c '{before, fewest, lapsed}' <<<"$alerts")"

save stream_after_rollout "$(compare "$STREAM_NS" | jq -c .stream)"

# --- 4. every count, once the stream has stopped and its last heartbeats are written ---
kill "$LOAD_PID" 2>/dev/null || true
wait "$LOAD_PID" 2>/dev/null || true
LOAD_PID=''
t0=$SECONDS
until_idle "after the stream"
sleep 10
counts="$(compare)"
until [ "$(jq '[.seeded.off, .stream.off] | add' <<<"$counts")" = 0 ] || [ $((SECONDS - t0)) -ge 120 ]; do
  sleep 10
  counts="$(compare)"
done
save counts "$(jq -c --argjson s $((SECONDS - t0)) '. + {checked_after_stream_s: $s}' <<<"$counts")"
save completed true
# The audit log (hundreds of MB at 10^5 series) goes once it is summed up, unless a count is off.
[ "$(jq '[.seeded.off, .stream.off] | add' <<<"$counts")" != 0 ] || rm -f "$CLUSTER_DIR"/audit*.log
echo "rollout: $SERIES series; $(jq -c '{status_ms: .rollout.status_ms, gap_ms: .rollout.write_gap_ms.across_rollout.ms,
  leader_changes: .rollout.leader_changes, exit_to_first_write_ms: [.rollout.handovers[].exit_to_first_write_ms],
  alerts: .rollout.alerts | {before, fewest, lapsed}, counts_off: (.counts.seeded.off + .counts.stream.off)}' "$OUT") ($OUT)"
