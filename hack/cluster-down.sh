#!/usr/bin/env bash
# Stops the cluster that hack/cluster-up.sh (or cluster-up-node.sh) started in ${ENVTEST_DIR:-target/envtest}:
# first the node, if any (every trace of it, see envtest_node_down in envtest-lib.sh), then
# kube-apiserver, then etcd, by pid (TERM, then KILL after ENVTEST_STOP_GRACE
# seconds, default 5), and removes the etcd data. Keeps certs, logs and the
# kubeconfig for inspection. Idempotent: nothing running is not an error.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source-path=SCRIPTDIR source=envtest-lib.sh
. "$ROOT/hack/envtest-lib.sh"

[ -d "$DIR" ] || exit 0
url="$(sed -n 's/^APISERVER_URL=//p' "$DIR/cluster.env" 2>/dev/null || true)"
envtest_lock
if [ -e "$DIR/node/up" ]; then
  envtest_node_down
  echo "cluster-down: removed the node (containers, mounts, bridge $NODE_BRIDGE, iptables chains, cgroups; sysctls restored)"
fi
envtest_stop_all
if [ -n "$url" ]; then
  echo "cluster-down: stopped the cluster in $DIR (was $url)"
else
  echo "cluster-down: nothing running in $DIR"
fi
