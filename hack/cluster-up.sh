#!/usr/bin/env bash
# Starts a local, real Kubernetes control plane for tests: etcd (embedded server)
# and kube-apiserver built from the Kubernetes Go modules in tests/envtest.
#
# Environment:
#   ENVTEST_DIR           per-cluster state dir (default target/envtest, relative to
#                         the repository root): certs, etcd data, logs, pids,
#                         kubeconfig, cluster.env. Several clusters may run at once
#                         in different dirs. Binaries are shared in target/envtest/bin.
#   EVENT_TTL             --event-ttl of the apiserver (default 1h)
#   APISERVER_EXTRA_ARGS  appended to the kube-apiserver command line (word-split)
#   ETCD_EXTRA_ARGS       appended to the etcd command line (word-split)
#   CLUSTER_UP_TIMEOUT    seconds to wait for /readyz (default 120)
#   ENVTEST_NODE          1: the control plane of a node cluster (set by hack/cluster-up-node.sh,
#                         which starts the rest): the apiserver binds and advertises
#                         $NODE_IP (on the bridge that script made) instead of 127.0.0.1,
#                         publishes itself as the "kubernetes" Service's endpoint, runs
#                         ServiceAccount and NodeRestriction admission and the Node authorizer,
#                         and reaches kubelets with a client certificate of the harness's CA.
#
# Result: $ENVTEST_DIR/kubeconfig (admin, group system:masters), logs in
# $ENVTEST_DIR/{etcd,apiserver}.log, pids in $ENVTEST_DIR/{etcd,apiserver}.pid,
# ports and URLs in $ENVTEST_DIR/cluster.env. Returns once /readyz is ok.
# A no-op when a healthy cluster already runs in $ENVTEST_DIR.
# Stop it with hack/cluster-down.sh (same ENVTEST_DIR).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source-path=SCRIPTDIR source=envtest-lib.sh
. "$ROOT/hack/envtest-lib.sh"

TIMEOUT="${CLUSTER_UP_TIMEOUT:-120}"

"$ROOT/hack/build-envtest.sh" kube-apiserver etcd kubectl

mkdir -p "$DIR"
envtest_lock

# Already running? Give a running apiserver a few seconds to report ready.
if envtest_alive etcd && envtest_alive apiserver && [ -s "$DIR/kubeconfig" ]; then
  for _ in $(seq 20); do
    if envtest_ready; then
      echo "cluster-up: already running in $DIR (kubeconfig: $DIR/kubeconfig)"
      exit 0
    fi
    sleep 0.5
  done
  echo "cluster-up: a cluster runs in $DIR but is not ready; restarting it" >&2
fi
envtest_stop_all

# --- certificates (kept across restarts of the same dir; they do not depend on ports) ---
CERTS="$DIR/certs"
gen_certs() {
  local tmp="$CERTS.tmp"
  rm -rf "$tmp"
  mkdir -p "$tmp"
  (
    cd "$tmp"
    key() { envtest_key "$1"; }
    sign() { envtest_sign . "$@"; }
    key ca.key
    openssl req -x509 -new -key ca.key -sha256 -days 3650 -subj "/CN=envtest-ca" \
      -addext "basicConstraints=critical,CA:TRUE" \
      -addext "keyUsage=critical,keyCertSign,cRLSign,digitalSignature" \
      -out ca.crt 2>/dev/null
    sign apiserver "/CN=kube-apiserver" "basicConstraints=critical,CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth
subjectAltName=IP:127.0.0.1,IP:10.0.0.1,IP:$NODE_IP,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
    sign admin "/O=system:masters/CN=envtest-admin" "basicConstraints=critical,CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=clientAuth"
    sign kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client" "basicConstraints=critical,CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=clientAuth"
    # ServiceAccount token signing key pair.
    key sa.key
    openssl pkey -in sa.key -pubout -out sa.pub 2>/dev/null
    rm -f ca.srl
  )
  mv "$tmp" "$CERTS"
}
if ! [ -s "$CERTS/ca.crt" ] || ! [ -s "$CERTS/sa.pub" ] || ! [ -s "$CERTS/admin.crt" ] || ! [ -s "$CERTS/apiserver.crt" ] \
  || ! [ -s "$CERTS/kubelet-client.crt" ] || ! openssl x509 -in "$CERTS/apiserver.crt" -noout -ext subjectAltName | grep -q "$NODE_IP"; then
  rm -rf "$CERTS"
  gen_certs
fi

fail() {
  echo "cluster-up: $1" >&2
  if [ -n "${2:-}" ] && [ -f "$2" ]; then
    echo "---- last lines of $2 ----" >&2
    tail -n 40 "$2" >&2
    echo "----" >&2
  fi
  envtest_stop_all
  exit 1
}

# A port picked here can be taken by someone else before the server binds it:
# retry the whole start with new ports when a server dies right away.
for attempt in 1 2 3; do
  read -r ETCD_PORT ETCD_PEER_PORT API_PORT <<<"$(free_ports 3)"
  rm -rf "$DIR/etcd-data"

  # setsid + nohup: the servers outlive this script and its process group.
  # 9>&- : do not leak the dir lock to the servers.
  # shellcheck disable=SC2086
  setsid nohup "$BIN/etcd" \
    --data-dir="$DIR/etcd-data" \
    --listen-client-url="http://127.0.0.1:$ETCD_PORT" \
    --listen-peer-url="http://127.0.0.1:$ETCD_PEER_PORT" \
    --unsafe-no-fsync \
    ${ETCD_EXTRA_ARGS:-} \
    </dev/null >"$DIR/etcd.log" 2>&1 9>&- &
  echo $! >"$DIR/etcd.pid"

  # Up to 60 s: on a loaded machine (several clusters of the suite starting at once) etcd has been
  # seen to take longer than 20 s before it answered at all.
  etcd_ok=0
  for _ in $(seq 300); do
    if curl -fsS --max-time 2 "http://127.0.0.1:$ETCD_PORT/health" 2>/dev/null | grep -q '"health":"true"'; then
      etcd_ok=1
      break
    fi
    if envtest_exited etcd; then break; fi
    sleep 0.2
  done
  if [ "$etcd_ok" != 1 ]; then
    if envtest_exited etcd && grep -qs "address already in use" "$DIR/etcd.log" && [ "$attempt" -lt 3 ]; then
      continue
    fi
    fail "etcd did not become healthy (log: $DIR/etcd.log)" "$DIR/etcd.log"
  fi

  ADDRESS=127.0.0.1
  mode_args=(--endpoint-reconciler-type=none --disable-admission-plugins=ServiceAccount --authorization-mode=RBAC)
  if [ "${ENVTEST_NODE:-}" = 1 ]; then
    ADDRESS="$NODE_IP"
    mode_args=("--authorization-mode=Node,RBAC" --enable-admission-plugins=NodeRestriction
      --kubelet-client-certificate="$CERTS/kubelet-client.crt" --kubelet-client-key="$CERTS/kubelet-client.key"
      --kubelet-certificate-authority="$CERTS/ca.crt" --kubelet-preferred-address-types=InternalIP)
  fi
  # Without ENVTEST_NODE the apiserver runs without controller-manager, scheduler or kubelet:
  # - ServiceAccount admission is off (it would wait for the token controller and
  #   the "default" ServiceAccount of each namespace, which nothing creates);
  #   TokenRequest (kubectl create token) is served by the apiserver itself.
  # - the endpoint reconciler of the "kubernetes" Service refuses a loopback
  #   address, and nothing in-cluster needs it: off.
  # - system:masters (the admin client cert) is always authorized; everyone else
  #   goes through RBAC.
  # The audit log records every write of series objects and Leases (who, when, with which
  # User-Agent), so that tests can check that no replica wrote when it must not have.
  # AUDIT_CORE_EVENTS=1 (bench/node.sh) adds the writes of core/v1 Events, so that a benchmark can
  # tell the kubelet's writes from the other emitters'; the storms of the tests leave it out.
  core_events=''
  if [ "${AUDIT_CORE_EVENTS:-0}" = 1 ]; then
    core_events='      - group: ""
        resources: ["events"]'
  fi
  cat >"$DIR/audit-policy.yaml" <<AUDIT
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
  - level: Metadata
    verbs: ["create", "update", "patch", "delete"]
    resources:
      - group: "events.k8s.io"
        resources: ["events"]
      - group: "coordination.k8s.io"
        resources: ["leases"]
$core_events
  - level: None
AUDIT
  # A fresh log: the rotated files of an earlier cluster in this directory would otherwise be
  # read as this one's (bench/write_gaps.py reads audit*.log).
  rm -f "$DIR"/audit-*.log
  : >"$DIR/audit.log"
  # shellcheck disable=SC2086
  setsid nohup "$BIN/kube-apiserver" \
    --audit-policy-file="$DIR/audit-policy.yaml" \
    --audit-log-path="$DIR/audit.log" \
    --audit-log-mode=blocking \
    --audit-log-maxsize=200 \
    --advertise-address="$ADDRESS" \
    --bind-address="$ADDRESS" \
    --secure-port="$API_PORT" \
    --cert-dir="$CERTS" \
    --tls-cert-file="$CERTS/apiserver.crt" \
    --tls-private-key-file="$CERTS/apiserver.key" \
    --client-ca-file="$CERTS/ca.crt" \
    --etcd-servers="http://127.0.0.1:$ETCD_PORT" \
    --service-account-issuer=https://kubernetes.default.svc.cluster.local \
    --service-account-key-file="$CERTS/sa.pub" \
    --service-account-signing-key-file="$CERTS/sa.key" \
    --api-audiences=https://kubernetes.default.svc.cluster.local \
    --service-cluster-ip-range=10.0.0.0/24 \
    "${mode_args[@]}" \
    --allow-privileged=true \
    --event-ttl="${EVENT_TTL:-1h}" \
    ${APISERVER_EXTRA_ARGS:-} \
    </dev/null >"$DIR/apiserver.log" 2>&1 9>&- &
  echo $! >"$DIR/apiserver.pid"

  # The kubeconfig embeds the certificates, so it can be copied anywhere.
  write_kubeconfig "$DIR/kubeconfig" "https://$ADDRESS:$API_PORT" "$CERTS/ca.crt" envtest-admin \
    cert "$CERTS/admin.crt" "$CERTS/admin.key"
  cat >"$DIR/cluster.env" <<EOF
KUBECONFIG=$DIR/kubeconfig
KUBECTL=$BIN/kubectl
APISERVER_URL=https://$ADDRESS:$API_PORT
APISERVER_PORT=$API_PORT
ETCD_URL=http://127.0.0.1:$ETCD_PORT
ETCD_PORT=$ETCD_PORT
ETCD_PEER_PORT=$ETCD_PEER_PORT
EOF

  deadline=$((SECONDS + TIMEOUT))
  while ! envtest_ready; do
    if envtest_exited apiserver; then
      if grep -qs "address already in use" "$DIR/apiserver.log" && [ "$attempt" -lt 3 ]; then
        envtest_stop_all
        continue 2
      fi
      fail "kube-apiserver exited (log: $DIR/apiserver.log)" "$DIR/apiserver.log"
    fi
    if [ "$SECONDS" -ge "$deadline" ]; then
      curl -sS --max-time 5 --cacert "$CERTS/ca.crt" --cert "$CERTS/admin.crt" --key "$CERTS/admin.key" \
        "https://$ADDRESS:$API_PORT/readyz?verbose" 2>&1 | grep -v '\[+\]' >&2 || true
      fail "kube-apiserver not ready after ${TIMEOUT}s (log: $DIR/apiserver.log)" "$DIR/apiserver.log"
    fi
    sleep 0.25
  done
  echo "cluster-up: ready at https://$ADDRESS:$API_PORT; kubeconfig: $DIR/kubeconfig; kubectl: $BIN/kubectl"
  exit 0
done
fail "could not start after 3 attempts"
