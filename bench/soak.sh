#!/usr/bin/env bash
# `just bench-soak`: the operator installed as Pods (kubectl apply -k config/default: two replicas,
# leader election, default policy) on a real one-node cluster for SOAK_MINUTES (default 120) of real
# time, under churn: every SOAK_CYCLE_EVERY minutes a new namespace gets crash-looping Pods (kubelet
# events), an unschedulable Pod (the scheduler's events.k8s.io series) and a Deployment its
# ResourceQuota refuses (the replicaset controller's FailedCreate); after SOAK_CYCLE_LIFE minutes its
# workloads go, its series must all finish, and every key is compared with the emitters' raw counts.
# Meanwhile the leader Pod is deleted every SOAK_LEADER_EVERY minutes and the apiserver is restarted
# (same binary, same flags) at the minutes of SOAK_APISERVER_AT. Every minute: RSS, open descriptors,
# threads and tokio tasks of each replica. bench/soak.py runs the schedule and writes the results to
# bench/results/soak/<date>/ (samples.jsonl, keys.jsonl, actions.jsonl, summary.json).
# Needs what hack/cluster-up-node.sh needs (Linux, root, containerd...).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$ROOT/bench/lib.sh"

CLUSTER_DIR="$ROOT/target/envtest-soak"
trap 'ENVTEST_DIR="$CLUSTER_DIR" bash hack/cluster-down.sh >/dev/null 2>&1 || true' EXIT
ENVTEST_DIR="$CLUSTER_DIR" bash hack/cluster-down.sh >/dev/null
# Core/v1 Event writes in the audit log too (who wrote what per namespace); raw events live for the
# whole run, so that a key's raw count is still there when its namespace is checked.
AUDIT_CORE_EVENTS=1 EVENT_TTL=6h ENVTEST_DIR="$CLUSTER_DIR" bash hack/cluster-up-node.sh >&2
KUBECONFIG_FILE="$CLUSTER_DIR/kubeconfig"

k apply -k config/default >/dev/null
k -n event-series-system rollout status deployment/event-series --timeout=180s >&2
wait_for_leader
# A reader of the replicas' /metrics, as Prometheus would be.
k -n event-series-system create serviceaccount soak-metrics >/dev/null
k create clusterrolebinding soak-metrics --clusterrole event-series-metrics-reader \
  --serviceaccount event-series-system:soak-metrics >/dev/null

out="bench/results/soak/$(date -u +%Y%m%dT%H%M%SZ)"
mkdir -p "$out"
machine_json >"$out/machine.json"
echo "$BENCH_COMMIT" >"$out/commit"
git status --porcelain --untracked-files=no | grep -q . && echo dirty >>"$out/commit"
log "soak: results in $out"
KUBECTL="$BIN/kubectl" KUBECONFIG="$KUBECONFIG_FILE" CLUSTER_DIR="$CLUSTER_DIR" \
  python3 bench/soak.py run "$out"
