#!/usr/bin/env bash
# `just bench-node`: one real crash loop on a real node, for NODE_MINUTES (default 35) of real time,
# with the operator installed as Pods (kubectl apply -k config/default, default policy: heartbeat 30m,
# finishAfter 6m). Counts, from the apiserver's own /metrics (apiserver_request_total, every write verb
# and code), the core/v1 event writes (the kubelet's recorder; the scheduler's one Scheduled event is
# the only other writer in this cluster) beside the events.k8s.io writes (event-series' series objects
# only), then deletes the Pod and waits for the Finished write. Raw counts come from the kubelet's own
# objects. Needs what hack/cluster-up-node.sh needs (Linux, root, containerd...). Results:
# bench/results/node/<date>.json and one line on stdout.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$ROOT/bench/lib.sh"

MINUTES="${NODE_MINUTES:-35}"
CLUSTER_DIR="$ROOT/target/envtest-bench-node"
trap 'ENVTEST_DIR="$CLUSTER_DIR" bash hack/cluster-down.sh >/dev/null 2>&1 || true' EXIT
ENVTEST_DIR="$CLUSTER_DIR" bash hack/cluster-down.sh >/dev/null
ENVTEST_DIR="$CLUSTER_DIR" bash hack/cluster-up-node.sh >&2
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
log "pod deleted after $restarts restarts; waiting for the Finished write (finishAfter 6m)"
for _ in $(seq 90); do
  state="$(k -n bench get events -l app.kubernetes.io/managed-by=event-series,eventseries.dev/state=Finished -o name 2>/dev/null | wc -l)"
  [ "$state" -ge 1 ] && break
  sleep 10
done
read -r core2 ev2 <<<"$(api_writes)"
# the kubelet's raw objects: occurrences (count) and objects, BackOff and all reasons
raw="$(k -n bench get events -l '!app.kubernetes.io/managed-by' -o json | python3 -c '
import json, sys
items = json.load(sys.stdin)["items"]
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
 "raw_occurrences": $raw_occ, "raw_objects": $raw_objs, "backoff_occurrences": $backoff_occ, "backoff_objects": $backoff_objs,
 "series": "$series"}
EOF
echo "node: ${MINUTES} min crash loop, $restarts restarts: kubelet (core/v1) writes $((core2 - core0)) for $raw_occ occurrences in $raw_objs objects (BackOff: $backoff_occ in $backoff_objs); event-series (events.k8s.io) writes $((ev2 - ev0)); series $series ($out)"
