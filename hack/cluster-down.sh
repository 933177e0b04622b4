#!/usr/bin/env bash
# Stops the cluster that hack/cluster-up.sh started in ${ENVTEST_DIR:-target/envtest}:
# kube-apiserver, then etcd, by pid (TERM, then KILL after ENVTEST_STOP_GRACE
# seconds, default 5), and removes the etcd data. Keeps certs, logs and the
# kubeconfig for inspection. Idempotent: nothing running is not an error.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source-path=SCRIPTDIR source=envtest-lib.sh
. "$ROOT/hack/envtest-lib.sh"

[ -d "$DIR" ] || exit 0
port="$(sed -n 's/^APISERVER_PORT=//p' "$DIR/cluster.env" 2>/dev/null || true)"
envtest_lock
envtest_stop_all
if [ -n "$port" ]; then
  echo "cluster-down: stopped the cluster in $DIR (was https://127.0.0.1:$port)"
else
  echo "cluster-down: nothing running in $DIR"
fi
