#!/usr/bin/env bash
# `just bench-node`: real crash loops on a real node, for NODE_MINUTES (default 35) of real time, with
# the operator installed as Pods (kubectl apply -k config/default). Two namespaces, one crash-looping
# Pod each, started together: `bench` under the defaults (heartbeat 30m, finishAfter 6m, firstRefresh
# 1m: early refreshes at 1, 2, 4, 8 and 16 minutes), `bench-norefresh` under a policy that differs
# only by firstRefresh "0" (no early refreshes). Every 10 s, for each Ongoing series object, how old
# its view is: the kubelet's latest occurrence (its raw objects' lastTimestamp) minus the object's
# series.lastObservedTime, and the occurrences it does not show yet (bench/node_figures.py); the
# largest of each per namespace. Then deletes the Pods and waits until every series is Finished.
# Writes: in each namespace, the kubelet's core/v1 event writes beside event-series' events.k8s.io
# writes, attributed by user agent from the apiserver's audit log; for the whole cluster, the
# apiserver's own /metrics (apiserver_request_total, every write verb and code; other writers there:
# the scheduler, kube-proxy, event-series' series of the node and its own Pods). Raw occurrences come
# from the kubelet's own objects. End to end, from the audit log's timestamps: the kubelet's write of an
# occurrence to the series write that first shows it (create, refresh), and each finish's lateness
# past finishAfter, "quiet" once the Pods were deleted (bench/scale_figures.py). Needs what hack/cluster-up-node.sh needs (Linux, root,
# containerd...). Results: bench/results/node/<date>.json and one line on stdout.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$ROOT/bench/lib.sh"

MINUTES="${NODE_MINUTES:-35}"
CLUSTER_DIR="$ROOT/target/envtest-bench-node"
trap 'ENVTEST_DIR="$CLUSTER_DIR" bash hack/cluster-down.sh >/dev/null 2>&1 || true' EXIT
ENVTEST_DIR="$CLUSTER_DIR" bash hack/cluster-down.sh >/dev/null
# The audit log with core/v1 Event writes too, to tell the kubelet's writes in the namespace apart.
AUDIT_CORE_EVENTS=1 ENVTEST_DIR="$CLUSTER_DIR" bash hack/cluster-up-node.sh >&2
KUBECONFIG_FILE="$CLUSTER_DIR/kubeconfig"
# shellcheck disable=SC1091
API_URL="$(. "$CLUSTER_DIR/cluster.env" && echo "$APISERVER_URL")"

NAMESPACES=(bench bench-norefresh)
export KUBECTL="$BIN/kubectl" KUBECONFIG="$KUBECONFIG_FILE"
k apply -k config/default >/dev/null
k -n event-series-system rollout status deployment/event-series --timeout=180s >&2
wait_for_leader
k create namespace bench >/dev/null
k create namespace bench-norefresh >/dev/null
k label namespace bench-norefresh bench.eventseries.dev/refresh=off >/dev/null
k apply -f - >/dev/null <<'POLICY'
apiVersion: eventseries.dev/v1alpha1
kind: EventSeriesPolicy
metadata: {name: no-early-refresh}
spec:
  namespaceSelector: {matchLabels: {bench.eventseries.dev/refresh: "off"}}
  firstRefresh: "0"
POLICY
image="$(k -n event-series-system get deployment event-series -o jsonpath='{.spec.template.spec.containers[0].image}')"
machine="$(machine_json)"
read -r core0 ev0 <<<"$(api_writes)"
log "crash loops for $MINUTES min in ${NAMESPACES[*]} (writes so far: core $core0, events.k8s.io $ev0)"
for ns in "${NAMESPACES[@]}"; do
  k -n "$ns" run crash --image="$image" --image-pull-policy=IfNotPresent --restart=Always \
    --overrides='{"spec":{"dnsPolicy":"Default","automountServiceAccountToken":false}}' -- --no-such-flag >/dev/null
done
declare -A stale_s stale_n restarts
for ns in "${NAMESPACES[@]}"; do stale_s[$ns]=0 stale_n[$ns]=0; done
start=$SECONDS
next_log=60
while [ $((SECONDS - start)) -lt $((MINUTES * 60)) ]; do
  sleep 10
  for ns in "${NAMESPACES[@]}"; do
    while read -r _ secs occ; do
      [ -n "$occ" ] || continue
      [ "$secs" -gt "${stale_s[$ns]}" ] && stale_s[$ns]=$secs
      [ "$occ" -gt "${stale_n[$ns]}" ] && stale_n[$ns]=$occ
    done < <(python3 bench/node_figures.py staleness "$ns" || true)
  done
  if [ $((SECONDS - start)) -ge "$next_log" ]; then
    next_log=$((next_log + 60))
    read -r core ev <<<"$(api_writes)"
    log "$(((SECONDS - start) / 60)) min: core writes $((core - core0)), events.k8s.io writes $((ev - ev0)); largest staleness so far: bench ${stale_s[bench]} s / ${stale_n[bench]} occurrences, bench-norefresh ${stale_s[bench-norefresh]} s / ${stale_n[bench-norefresh]}"
  fi
done
read -r core1 ev1 <<<"$(api_writes)"
stopped_at="$(date +%s.%N)"
for ns in "${NAMESPACES[@]}"; do
  restarts[$ns]="$(k -n "$ns" get pod crash -o jsonpath='{.status.containerStatuses[0].restartCount}')"
  k -n "$ns" delete pod crash --wait=false >/dev/null
done
log "pods deleted; waiting until no series is Ongoing (finishAfter 6m)"
# The series of reasons the kubelet's spam filter silenced early are Finished already: wait for all.
ongoing=1
for _ in $(seq 90); do
  ongoing=0
  for ns in "${NAMESPACES[@]}"; do
    n="$(k -n "$ns" get events.v1.events.k8s.io -o name \
      -l app.kubernetes.io/managed-by=event-series,eventseries.dev/state=Ongoing | wc -l)"
    ongoing=$((ongoing + n))
  done
  [ "$ongoing" -eq 0 ] && break
  sleep 10
done
[ "$ongoing" -eq 0 ] || die "$ongoing series still Ongoing 15 min after the pods went"
read -r core2 ev2 <<<"$(api_writes)"
figures() {
  python3 bench/node_figures.py summary "$1" "$CLUSTER_DIR/audit.log" "${restarts[$1]}" "${stale_s[$1]}" "${stale_n[$1]}" "$stopped_at"
}
mkdir -p bench/results/node
out="bench/results/node/$(date -u +%Y%m%dT%H%M%SZ).json"
cat >"$out" <<RESULT
{"commit": "$BENCH_COMMIT", "minutes": $MINUTES, "machine": $machine, "image": "$image",
 "policies": {"bench": "defaults (firstRefresh 1m)", "bench-norefresh": "firstRefresh 0"},
 "staleness_sampled_every_s": 10,
 "namespaces": {"bench": $(figures bench), "bench-norefresh": $(figures bench-norefresh)},
 "core_writes_during_loop": $((core1 - core0)), "events_k8s_io_writes_during_loop": $((ev1 - ev0)),
 "core_writes_total": $((core2 - core0)), "events_k8s_io_writes_total": $((ev2 - ev0))}
RESULT
summary="$(python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
print("; ".join("%s: kubelet %d writes for %d occurrences, event-series %d writes, largest staleness %d s / %d occurrences"
                % (ns, v["kubelet_writes"], v["raw_occurrences"], v["event_series_writes"], v["largest_staleness_s"],
                   v["largest_occurrences_not_shown"]) for ns, v in d["namespaces"].items()))' "$out")"
echo "node: $MINUTES min crash loops; $summary ($out)"
