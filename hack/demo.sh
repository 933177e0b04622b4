#!/usr/bin/env bash
# `just demo`: event-series end to end on a local, real kube-apiserver, in one command. Where the
# machine can run a node (Linux, root, the tools of NODE_PREREQS in hack/common.sh) it runs
# hack/demo-node.sh instead: the operator as Pods, a real kubelet crash loop.
# Here, without a node:
#
#   1. builds what is missing: kube-apiserver, etcd, kubectl and the client-go emitter (about 10 minutes
#      the first time, see tests/envtest/README.md) and the operator (cargo build --release);
#   2. starts a fresh apiserver + etcd in target/envtest-demo and installs config/default (CRD, RBAC, admission policy,
#      Deployment, default policy) with kubectl apply --server-side -k, plus a policy with short
#      durations for the namespace "demo";
#   3. runs the operator on this machine as the ServiceAccount event-series (a token of it, so exactly
#      the installed RBAC applies), with leader election on; the apiserver has no nodes, so the
#      Deployment's pods never start and the local operator is the leader;
#   4. starts a crash-loop storm: 3 pods whose BackOff events come from client-go's legacy recorder
#      (tools/record, like the kubelet), for 60 s;
#   5. every few seconds prints the events of "demo": the raw events, patched on every occurrence, and
#      one series per loop, written at start, at each heartbeat and once more when it is Finished.
#
# Ctrl-C (or the end) stops the emitter, the operator and the cluster. Logs stay in target/envtest-demo.
#
# Environment:
#   DEMO_SECONDS   stop by itself this many seconds after the storm starts (default: run until Ctrl-C)
#   DEMO_INTERVAL  seconds between two looks at the events (default 5)
#   CARGO_TARGET_DIR  honoured for the operator build
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

export ENVTEST_DIR="$ROOT/target/envtest-demo"
DIR="$ENVTEST_DIR"
BIN="$ROOT/target/envtest/bin"
NS=demo
STORM_SECONDS=60
INTERVAL="${DEMO_INTERVAL:-5}"
DEMO_SECONDS="${DEMO_SECONDS:-}"
if [ -n "$DEMO_SECONDS" ] && ! [[ "$DEMO_SECONDS" =~ ^[0-9]+$ ]]; then
  echo "demo: DEMO_SECONDS must be a number of seconds, not '$DEMO_SECONDS'" >&2
  exit 2
fi

# shellcheck source-path=SCRIPTDIR source=common.sh
. "$ROOT/hack/common.sh"
# A real node where the machine allows it (hack/demo-node.sh); DEMO_NODE=0 keeps to the bare apiserver.
if [ "${DEMO_NODE:-1}" = 0 ]; then
  node_missing="DEMO_NODE=0"
else
  node_missing="$(node_unfit)"
fi
if [ -z "$node_missing" ]; then
  exec bash "$ROOT/hack/demo-node.sh"
fi
echo "demo: no real node on this machine ($node_missing); the demo runs on a bare apiserver with client-go's recorders as emitters"

# shellcheck source-path=SCRIPTDIR source=demo-lib.sh
. "$ROOT/hack/demo-lib.sh"

# --- teardown: only what this script started, by pid ---
operator_pid='' emitter_pid='' cluster_started=0 demo_pids=()
cleanup() {
  local rc=$?
  trap '' INT TERM
  echo
  for pid in $emitter_pid $operator_pid "${demo_pids[@]}"; do
    kill -TERM "$pid" 2>/dev/null || true
  done
  for pid in $emitter_pid $operator_pid "${demo_pids[@]}"; do
    wait "$pid" 2>/dev/null || true
  done
  if [ "$cluster_started" = 1 ]; then
    bash "$ROOT/hack/cluster-down.sh" >/dev/null 2>&1 || true
    note "stopped the operator, the emitter and the cluster; logs in ${DIR#"$ROOT"/}/"
  fi
  exit "$rc"
}
trap cleanup EXIT
storm_start=''
# Ctrl-C once the storm runs is the normal way to stop: exit 0 then.
trap 'if [ -n "$storm_start" ]; then exit 0; else exit 130; fi' INT
trap 'exit 143' TERM

command -v go >/dev/null 2>&1 || export PATH="$PATH:/usr/local/go/bin"
for tool in go cargo openssl curl flock setsid base64; do
  command -v "$tool" >/dev/null 2>&1 || die "$tool not found (Go >= 1.26, Rust, openssl, curl, util-linux)"
done

# --- 1. build ---
step "Building kube-apiserver, etcd, kubectl and the client-go emitter (about 10 min the first time)"
bash hack/build-envtest.sh
step "Building the operator (cargo build --release; a few minutes the first time)"
demo_operator

# --- 2. cluster and install ---
step "Starting a local kube-apiserver + etcd in ${DIR#"$ROOT"/}"
cluster_started=1
bash hack/cluster-down.sh >/dev/null # a fresh cluster: etcd data is wiped when it starts
bash hack/cluster-up.sh
ADMIN="$DIR/kubeconfig"
k() { "$BIN/kubectl" --kubeconfig "$ADMIN" "$@"; }
# shellcheck disable=SC1091
APISERVER_URL="$(. "$DIR/cluster.env" && echo "$APISERVER_URL")"

step "Installing the operator: kubectl apply -k config/default"
k apply -k config/default | sed 's/^/    /'
note "(this apiserver has no nodes: the Deployment's pods never start; the operator runs here instead)"

k create namespace "$NS" >/dev/null
demo_policy "$NS" 20s 20s 15s

step "Alertmanager, for the loop alerts (built from its Go module the first time)"
demo_alertmanager 127.0.0.1 "$DIR"

# --- 3. the operator, as its ServiceAccount ---
step "Running the operator as ServiceAccount event-series-system/event-series"
token="$(k create token event-series -n event-series-system --duration=24h)"
SA_KUBECONFIG="$DIR/kubeconfig-event-series"
write_kubeconfig "$SA_KUBECONFIG" "$APISERVER_URL" "$DIR/certs/ca.crt" event-series token "$token" \
  namespace event-series-system
read -r metrics_port health_port <<<"$(free_ports 2)"
KUBECONFIG="$SA_KUBECONFIG" NO_COLOR=1 "$OPERATOR" run \
  --leader-elect --lease-namespace event-series-system --instance demo-local \
  --metrics-addr "127.0.0.1:$metrics_port" --metrics-secure=false --health-addr "127.0.0.1:$health_port" \
  --watch-timeout 15s --alertmanager-url "$AM_URL" --alert-resend-interval 15s \
  </dev/null >"$DIR/operator.log" 2>&1 &
operator_pid=$!

operator_alive() { kill -0 "$operator_pid" 2>/dev/null; }
operator_failed() {
  printf '%s---- last lines of %s ----%s\n' "$R" "${DIR#"$ROOT"/}/operator.log" "$N" >&2
  tail -n 30 "$DIR/operator.log" >&2
  die "$1"
}
for _ in $(seq 150); do
  operator_alive || operator_failed "the operator exited"
  curl -fsS --max-time 1 "http://127.0.0.1:$health_port/healthz" >/dev/null 2>&1 && break
  sleep 0.2
done
holder=''
for _ in $(seq 90); do
  operator_alive || operator_failed "the operator exited"
  holder="$(k get lease event-series -n event-series-system -o jsonpath='{.spec.holderIdentity}' 2>/dev/null || true)"
  [ "$holder" = demo-local ] && break
  sleep 0.5
done
[ "$holder" = demo-local ] || operator_failed "the operator did not take the Lease event-series-system/event-series"
note "pid $operator_pid, leader (Lease event-series-system/event-series), metrics http://127.0.0.1:$metrics_port/metrics (plain HTTP here: --metrics-secure=false)"
note "log: ${DIR#"$ROOT"/}/operator.log"
k get eventseriespolicies

# --- 4. the storm ---
# 0.4 occurrences/s per pod: about 24 per pod in 60 s, under the legacy recorder's spam filter
# (a burst of 25 per object, then 1 per 5 minutes), which would otherwise drop the rest.
step "Crash-loop storm: 3 pods in namespace $NS, BackOff every 2.5 s each, for ${STORM_SECONDS}s"
note "(client-go tools/record, the kubelet's recorder; log: ${DIR#"$ROOT"/}/emitter.log)"
"$BIN/emitter" --kubeconfig "$ADMIN" --recorder legacy --scenario crashloop --namespace "$NS" \
  --pods 3 --rate 0.4 --duration "${STORM_SECONDS}s" --output "$DIR/emitter.json" \
  </dev/null >"$DIR/emitter.log" 2>&1 &
emitter_pid=$!
storm_start=$SECONDS

cat <<EOF

${B}What to look at${N}: rows without STATE are the raw events, patched by the recorder on every
occurrence. Rows with STATE are event-series' series, one per loop: created on the second occurrence,
rewritten every heartbeat (15s) with COUNT, and marked Finished 20s after the storm stops (up to 15s
more in a cluster this quiet: a loop is finished only once the watch has proven that none of its
occurrences is still on the way, and here only the end of each 15s watch proves it).
Meanwhile, in another terminal:
  export KUBECONFIG=${ADMIN}
  ${BIN#"$ROOT"/}/kubectl get events -A -l eventseries.dev/state=Ongoing
  ${OPERATOR#"$ROOT"/} get -A --watch
  curl -s http://127.0.0.1:${metrics_port}/metrics | grep ^event_series_series
EOF

# --- 5. watch ---
demo_round() {
  operator_alive || operator_failed "the operator exited"
  if [ "$storm_done" = 0 ] && ! kill -0 "$emitter_pid" 2>/dev/null; then
    wait "$emitter_pid" || note "the emitter failed, see ${DIR#"$ROOT"/}/emitter.log"
    emitter_pid=''
    storm_done=1
    if [ -s "$DIR/emitter.json" ]; then
      total="$(awk -F'[:,]' '/"api_count"/ { s += $2 } END { print s + 0 }' "$DIR/emitter.json")"
      note "storm over after ${1}s: the recorder wrote $total occurrences to the API"
    fi
  fi
}
demo_show() {
  k get events -n "$1" -o wide -L eventseries.dev/state --sort-by=.metadata.creationTimestamp 2>&1 || true
  demo_series "$1"
}
demo_watch "$NS"
