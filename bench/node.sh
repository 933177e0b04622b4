#!/usr/bin/env bash
# `just bench-node`: one real crash loop on a real node, for NODE_MINUTES (default 35) of real time,
# with the operator installed as Pods (kubectl apply -k config/default, default policy: heartbeat 30m,
# finishAfter 6m). Then deletes the Pod and waits until every series of its namespace is Finished.
# Writes: in the namespace of the loop, the kubelet's core/v1 event writes beside event-series'
# events.k8s.io writes, attributed by user agent from the apiserver's audit log; for the whole
# cluster, the apiserver's own /metrics (apiserver_request_total, every write verb and code; other
# writers there: the scheduler, kube-proxy, event-series' series of the node and its own Pods). Raw
# occurrences come from the kubelet's own objects. Needs what hack/cluster-up-node.sh needs (Linux,
# root, containerd...). Results: bench/results/node/<date>.json and one line on stdout.
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

k apply -k config/default >/dev/null
k -n event-series-system rollout status deployment/event-series --timeout=180s >&2
k create namespace bench >/dev/null
image="$(k -n event-series-system get deployment event-series -o jsonpath='{.spec.template.spec.containers[0].image}')"
machine="$(machine_json)"
read -r core0 ev0 <<<"$(api_writes)"
log "crash loop for $MINUTES min (writes so far: core $core0, events.k8s.io $ev0)"
k -n bench run crash --image="$image" --image-pull-policy=IfNotPresent --restart=Always \
  --overrides='{"spec":{"dnsPolicy":"Default","automountServiceAccountToken":false}}' -- --no-such-flag >/dev/null
start=$SECONDS
while [ $((SECONDS - start)) -lt $((MINUTES * 60)) ]; do
  sleep 60
  read -r core ev <<<"$(api_writes)"
  log "$(((SECONDS - start) / 60)) min: core writes $((core - core0)), events.k8s.io writes $((ev - ev0))"
done
restarts="$(k -n bench get pod crash -o jsonpath='{.status.containerStatuses[0].restartCount}')"
read -r core1 ev1 <<<"$(api_writes)"
k -n bench delete pod crash --wait=true >/dev/null
log "pod deleted after $restarts restarts; waiting until no series of the namespace is Ongoing (finishAfter 6m)"
# The series of reasons the kubelet's spam filter silenced early are Finished already: wait for all.
ongoing=1
for _ in $(seq 90); do
  ongoing="$(k -n bench get events.v1.events.k8s.io -o name \
    -l app.kubernetes.io/managed-by=event-series,eventseries.dev/state=Ongoing | wc -l)"
  [ "$ongoing" -eq 0 ] && break
  sleep 10
done
[ "$ongoing" -eq 0 ] || die "$ongoing series still Ongoing 15 min after the pod went"
read -r core2 ev2 <<<"$(api_writes)"
# Who wrote what in the namespace bench, from the apiserver's audit log (apiserver_request_total has
# neither namespace nor user agent): the kubelet's core/v1 writes and event-series' series writes.
read -r kubelet_writes operator_writes <<<"$(python3 -c '
import json, sys
kubelet = operator = 0
for line in open(sys.argv[1]):
    e = json.loads(line)
    ref = e.get("objectRef") or {}
    if e.get("stage") != "ResponseComplete" or ref.get("resource") != "events":
        continue
    if ref.get("namespace") != "bench" or e["verb"] in ("get", "list", "watch"):
        continue
    agent = e.get("userAgent", "")
    if agent.startswith("kubelet/") and ref.get("apiGroup", "") == "":
        kubelet += 1
    elif agent.startswith("event-series/") and ref.get("apiGroup") == "events.k8s.io":
        operator += 1
print(kubelet, operator)' "$CLUSTER_DIR/audit.log")"
# the kubelet's raw objects: occurrences (count) and objects, BackOff and all reasons
raw="$(k -n bench get events -l '!app.kubernetes.io/managed-by' -o json | python3 -c '
import json, sys
items = [e for e in json.load(sys.stdin)["items"] if (e.get("source") or {}).get("component") == "kubelet"]
backoff = [e for e in items if e.get("reason") == "BackOff"]
occ = lambda es: sum(max(e.get("count") or 1, 1) for e in es)
print(occ(items), len(items), occ(backoff), len(backoff))')"
read -r raw_occ raw_objs backoff_occ backoff_objs <<<"$raw"
series="$(k -n bench get events.v1.events.k8s.io -l app.kubernetes.io/managed-by=event-series -o json | python3 -c '
import json, sys
items = json.load(sys.stdin)["items"]
print(" ".join("%s:%s:%s" % (e["reason"], (e.get("series") or {}).get("count", 1), e["metadata"]["labels"]["eventseries.dev/state"]) for e in items))')"
mkdir -p bench/results/node
out="bench/results/node/$(date -u +%Y%m%dT%H%M%SZ).json"
cat >"$out" <<EOF
{"minutes": $MINUTES, "restarts": $restarts, "machine": $machine,
 "core_writes_during_loop": $((core1 - core0)), "events_k8s_io_writes_during_loop": $((ev1 - ev0)),
 "core_writes_total": $((core2 - core0)), "events_k8s_io_writes_total": $((ev2 - ev0)),
 "kubelet_writes_in_bench": $kubelet_writes, "event_series_writes_in_bench": $operator_writes,
 "raw_occurrences": $raw_occ, "raw_objects": $raw_objs, "backoff_occurrences": $backoff_occ, "backoff_objects": $backoff_objs,
 "series": "$series"}
EOF
echo "node: ${MINUTES} min crash loop, $restarts restarts; in the namespace: the kubelet wrote $kubelet_writes times (core/v1) for $raw_occ occurrences in $raw_objs objects (BackOff: $backoff_occ in $backoff_objs), event-series $operator_writes times (events.k8s.io); series $series; whole cluster (apiserver /metrics): core writes $((core2 - core0)), events.k8s.io writes $((ev2 - ev0)) ($out)"
