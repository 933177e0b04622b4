#!/usr/bin/env bash
# `just demo` on a real node (hack/demo.sh runs this where the machine allows it: Linux, root, the
# node's tools present):
#
#   1. builds the Kubernetes binaries and the operator's image (hack/image.sh: static binary, FROM
#      scratch, no Docker);
#   2. starts a one-node cluster in target/envtest-demo-node (hack/cluster-up-node.sh): apiserver,
#      etcd, scheduler, controller-manager, kube-proxy, a kubelet with containerd; the image is
#      imported into the node's containerd;
#   3. installs the operator exactly as the README says: kubectl apply -k config/default (2 replicas,
#      one leader), and a policy with short durations for the namespace "demo";
#   4. the storm: 3 Pods whose container exits 1 at once, so the kubelet's BackOff events are real;
#      after STORM_SECONDS the Pods are deleted and the loops end;
#   5. every few seconds prints the operator's Pods, `kubectl get events`, `event-series get` and the
#      notifications a real Alertmanager sent for the loops (hack/webhook.py receives them).
#
# Ctrl-C (or the end) removes the cluster and every trace of the node. Logs stay in target/envtest-demo-node.
# Environment: DEMO_SECONDS, DEMO_INTERVAL as hack/demo.sh; STORM_SECONDS (default 120).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
export ENVTEST_DIR="$ROOT/target/envtest-demo-node"
DIR="$ENVTEST_DIR"
BIN="$ROOT/target/envtest/bin"
NS=demo
STORM_SECONDS="${STORM_SECONDS:-120}"
INTERVAL="${DEMO_INTERVAL:-5}"
DEMO_SECONDS="${DEMO_SECONDS:-}"

# shellcheck source-path=SCRIPTDIR source=common.sh
. "$ROOT/hack/common.sh"
# shellcheck source-path=SCRIPTDIR source=demo-lib.sh
. "$ROOT/hack/demo-lib.sh"

cluster_started=0 demo_pids=()
cleanup() {
  local rc=$?
  trap '' INT TERM
  for pid in "${demo_pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  if [ "$cluster_started" = 1 ]; then
    bash "$ROOT/hack/cluster-down.sh" >/dev/null 2>&1 || true
    echo
    note "removed the cluster and the node; logs in ${DIR#"$ROOT"/}/"
  fi
  exit "$rc"
}
trap cleanup EXIT
storm_start=''
trap 'if [ -n "$storm_start" ]; then exit 0; else exit 130; fi' INT
trap 'exit 143' TERM

step "Building the Kubernetes binaries (node included) and the operator's image (about 15 min the first time)"
bash hack/build-envtest.sh node
bash hack/image.sh
demo_operator

step "Starting a one-node cluster in ${DIR#"$ROOT"/} (apiserver, etcd, scheduler, controller-manager, kube-proxy, kubelet + containerd)"
cluster_started=1
bash hack/cluster-up-node.sh
ADMIN="$DIR/kubeconfig"
k() { "$BIN/kubectl" --kubeconfig "$ADMIN" "$@"; }
k get nodes -o wide

step "Installing the operator: kubectl apply -k config/default"
k apply -k config/default | sed 's/^/    /'
k -n event-series-system rollout status deployment/event-series --timeout=180s
k -n event-series-system get pods -o wide
note "leader: $(k -n event-series-system get lease event-series -o jsonpath='{.spec.holderIdentity}' 2>/dev/null || echo none yet)"

# The node's bridge address (hack/envtest-lib.sh), which the operator's Pods reach.
step "Alertmanager on the node's bridge address, and the operator's Pods sending loop alerts to it"
demo_alertmanager 10.244.0.1 "$DIR"
k -n event-series-system patch deployment event-series --type=json -p \
  "[{\"op\":\"add\",\"path\":\"/spec/template/spec/containers/0/args/-\",\"value\":\"--alertmanager-url=$AM_URL\"}]" | sed 's/^/    /'
k -n event-series-system rollout status deployment/event-series --timeout=180s

k create namespace "$NS" >/dev/null
demo_policy "$NS" 45s 5m 1m

step "The storm: 3 crash-looping Pods in $NS for ${STORM_SECONDS}s (the container exits 1 at once; the kubelet backs off 10 s at most here)"
image="$(k -n event-series-system get deployment event-series -o jsonpath='{.spec.template.spec.containers[0].image}')"
for i in 1 2 3; do
  k -n "$NS" run "crash-$i" --image="$image" --image-pull-policy=IfNotPresent --restart=Always \
    --overrides='{"spec":{"dnsPolicy":"Default","automountServiceAccountToken":false}}' -- --no-such-flag >/dev/null
done
storm_start=$SECONDS
cat <<EOF

${B}What to look at${N}: rows without STATE are the kubelet's own events, patched on every occurrence;
rows with STATE are event-series' series, one per loop (BackOff, and the Pulled/Created/Started of
every restart), written by the operator's Pods. The kubelet's recorder lets about 25 events per Pod
through in a burst, then one per 5 minutes (its spam filter): about a minute in, the loops fall
silent in the API although the Pods still crash, and 45 s later each series is marked Finished with
the count the API saw. After ${STORM_SECONDS}s the Pods are deleted.
Meanwhile, in another terminal:
  export KUBECONFIG=${ADMIN}
  ${BIN#"$ROOT"/}/kubectl get events -A -l eventseries.dev/state=Ongoing
  ${OPERATOR#"$ROOT"/} get -A --watch
EOF

demo_round() {
  if [ "$storm_done" = 0 ] && [ "$1" -ge "$STORM_SECONDS" ]; then
    storm_done=1
    k -n "$NS" delete pod crash-1 crash-2 crash-3 --wait=false >/dev/null
    note "storm over after ${1}s: the crash-looping Pods are deleted"
  fi
}
demo_show() {
  k -n event-series-system get pods 2>&1 || true
  k get events -n "$1" --field-selector reason=BackOff -L eventseries.dev/state \
    --sort-by=.metadata.creationTimestamp 2>&1 || true
  demo_series "$1"
}
demo_watch "$NS"
