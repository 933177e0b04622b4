#!/usr/bin/env bash
# Starts a one-node Kubernetes cluster on this machine: the control plane of hack/cluster-up.sh
# (etcd, kube-apiserver) plus kube-scheduler, kube-controller-manager, kube-proxy and a kubelet
# with containerd and CNI, all from the same Kubernetes release (tests/envtest), and the node
# images (pause, event-series) imported into the node's containerd.
#
# Needs Linux, root, and the tools of NODE_PREREQS in hack/common.sh (containerd, runc, iptables,
# conntrack, iproute2, buildah, the CNI plugins; .ci/run installs them).
# Everything the node uses is on this machine:
#   - the bridge $NODE_BRIDGE with $NODE_IP/24 (pods get 10.244.0.2-254 on it, no masquerade);
#   - the apiserver binds and advertises $NODE_IP only; pods reach it as the "kubernetes"
#     Service (10.0.0.1:443) through kube-proxy's iptables rules;
#   - the kubelet serves on $NODE_IP only, with x509 (the harness's CA) and webhook authorization.
#
# Environment: as hack/cluster-up.sh (ENVTEST_DIR, default target/envtest), plus
#   NODE_UP_TIMEOUT   seconds to wait for the node to be Ready (default 120)
#   NODE_IMAGES       0: do not build and import the images (default 1; see hack/image.sh)
#   NODE_CLUSTER_DNS  an address in the Service range (10.0.0.0/24) for the kubelet's clusterDNS
#                     (default none: the kubelet falls back to the node's resolv.conf and says so in
#                     a MissingClusterDNS Warning per Pod); nothing answers there, it only makes Pods
#                     start as on a cluster with DNS (hack/conformance.sh: upstream tests expect it)
#
# State lives in $ENVTEST_DIR/node (containerd root and state, kubelet root, pod logs, CNI
# data, the sysctls before the node changed them). hack/cluster-down.sh removes all of it:
# processes, containers, mounts, network namespaces, the bridge, iptables chains, cgroups, and
# restores the sysctls. Only one node cluster can run on a machine (it owns $NODE_BRIDGE).
set -euo pipefail
[ -z "${ENVTEST_MINOR:-}" ] || { echo "cluster-up-node: the node is built for the newest release only; unset ENVTEST_MINOR" >&2; exit 2; }

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source-path=SCRIPTDIR source=envtest-lib.sh
. "$ROOT/hack/envtest-lib.sh"

fail() {
  echo "cluster-up-node: $1" >&2
  if [ -n "${2:-}" ] && [ -f "$2" ]; then
    echo "---- last lines of $2 ----" >&2
    tail -n 30 "$2" >&2
    echo "----" >&2
  fi
  # leave nothing behind but the logs
  [ -e "${DIR:?}/node/up" ] && bash "$ROOT/hack/cluster-down.sh" >&2
  exit 1
}

# --- can this machine run a node? ---
unfit="$(node_unfit)"
[ -z "$unfit" ] || fail "$unfit"

"$ROOT/hack/build-envtest.sh" node

N="$DIR/node"
mkdir -p "$N"
# A node left from an earlier run (or a crash) is cleared first: it shares the bridge and the
# iptables chains, and its containers would outlive a new containerd.
owner="$(cat "$NODE_RUN/owner" 2>/dev/null || true)"
if [ -n "$owner" ] && [ "$owner" != "$DIR" ] && [ -e "$owner/node/up" ]; then
  fail "a node already runs on this machine, from $owner (one at a time: ENVTEST_DIR=$owner hack/cluster-down.sh)"
fi
if [ -e "$N/up" ] || ip link show "$NODE_BRIDGE" >/dev/null 2>&1; then
  echo "cluster-up-node: clearing an earlier node" >&2
  bash "$ROOT/hack/cluster-down.sh"
  ip link del "$NODE_BRIDGE" 2>/dev/null || true
fi
mkdir -p "$N" "$NODE_RUN"
: >"$N/up"
echo "$DIR" >"$NODE_RUN/owner"

# --- sysctls: record what they were before anything here changes them (restored at teardown) ---
for k in "${NODE_SYSCTLS[@]}"; do
  f="/proc/sys/${k//.//}"
  [ -r "$f" ] && echo "$k=$(cat "$f")"
done >"$N/sysctl.before"

# --- the bridge pods live on; the apiserver binds its gateway address ---
ip link add "$NODE_BRIDGE" type bridge
ip addr add "$NODE_IP/24" dev "$NODE_BRIDGE"
ip link set "$NODE_BRIDGE" up
sysctl -qw net.ipv4.ip_forward=1
# kube-proxy's DNAT for traffic that crosses the bridge between two pods.
if [ -w /proc/sys/net/bridge/bridge-nf-call-iptables ]; then
  sysctl -qw net.bridge.bridge-nf-call-iptables=1
fi

ENVTEST_NODE=1 bash "$ROOT/hack/cluster-up.sh"
# shellcheck disable=SC1091
. "$DIR/cluster.env"
CERTS="$DIR/certs"

# --- identities: one client certificate per component, the kubelet's serving certificate ---
client_ext="basicConstraints=critical,CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=clientAuth"
[ -s "$CERTS/kube-proxy.crt" ] || envtest_sign "$CERTS" kube-proxy "/CN=system:kube-proxy" "$client_ext"
[ -s "$CERTS/kubelet.crt" ] || envtest_sign "$CERTS" kubelet "/O=system:nodes/CN=system:node:$NODE_NAME" "$client_ext"
[ -s "$CERTS/kubelet-serving.crt" ] || envtest_sign "$CERTS" kubelet-serving "/CN=$NODE_NAME" "basicConstraints=critical,CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth
subjectAltName=IP:$NODE_IP,DNS:$NODE_NAME"

# Each component's kubeconfig, with its own client certificate.
for c in kube-proxy kubelet; do
  write_kubeconfig "$N/$c.kubeconfig" "$APISERVER_URL" "$CERTS/ca.crt" "$c" cert "$CERTS/$c.crt" "$CERTS/$c.key"
done

# --- containerd with CNI ---
mkdir -p "$N/cni/conf" "$N/containerd" "$N/pod-logs"
cat >"$N/cni/conf/10-event-series.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "event-series-node",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$NODE_BRIDGE",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "dataDir": "$N/cni/ipam",
        "ranges": [[{"subnet": "$NODE_CIDR", "gateway": "$NODE_IP"}]],
        "routes": [{"dst": "0.0.0.0/0"}]
      }
    }
  ]
}
EOF
cat >"$N/containerd.toml" <<EOF
version = 2
root = "$N/containerd/root"
state = "$N/containerd/state"
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs"]
[grpc]
  address = "$NODE_SOCK"
[ttrpc]
  address = "$NODE_SOCK.ttrpc"
[plugins."io.containerd.internal.v1.opt"]
  path = "$N/containerd/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE_IMAGE"
  # no CAP_SYS_RESOURCE here: containers keep the kubelet's oom_score_adj instead of failing.
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "$N/runc"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "$CNI_BIN"
    conf_dir = "$N/cni/conf"
EOF
envtest_start containerd "$DIR/containerd.log" "$(command -v containerd)" --config="$N/containerd.toml"
for _ in $(seq 100); do
  ctr --address "$NODE_SOCK" version >/dev/null 2>&1 && break
  if envtest_exited containerd; then fail "containerd exited" "$DIR/containerd.log"; fi
  sleep 0.2
done
ctr --address "$NODE_SOCK" version >/dev/null 2>&1 || fail "containerd did not answer on $NODE_SOCK" "$DIR/containerd.log"

# --- the images: pause (the sandbox) and event-series, imported without any registry ---
if [ "${NODE_IMAGES:-1}" = 1 ]; then
  bash "$ROOT/hack/image.sh"
  for img in "$ROOT/target/image/pause.oci.tar" "$ROOT/target/image/event-series.oci.tar"; do
    ctr --address "$NODE_SOCK" -n k8s.io images import "$img" >/dev/null \
      || fail "ctr images import $img"
  done
fi

# --- control-plane controllers ---
envtest_controllers_start "$NODE_CIDR"

# --- kube-proxy: the "kubernetes" Service for pods ---
cat >"$N/kube-proxy.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection:
  kubeconfig: $N/kube-proxy.kubeconfig
mode: iptables
hostnameOverride: $NODE_NAME
bindAddress: $NODE_IP
clusterCIDR: $NODE_CIDR
healthzBindAddress: ""
metricsBindAddress: ""
# leave the machine's conntrack table size and timeouts as they are
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
iptables:
  localhostNodePorts: false
# NodePorts on the node's bridge address only, never on the machine's other addresses
nodePortAddresses: ["$NODE_IP/32"]
EOF
envtest_start kube-proxy "$DIR/kube-proxy.log" "$BIN/kube-proxy" --config="$N/kube-proxy.yaml"

# --- the kubelet ---
cat >"$N/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $NODE_IP
port: $KUBELET_PORT
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 0
tlsCertFile: $CERTS/kubelet-serving.crt
tlsPrivateKeyFile: $CERTS/kubelet-serving.key
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $CERTS/ca.crt}
authorization:
  mode: Webhook
containerRuntimeEndpoint: unix://$NODE_SOCK
cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
# no CAP_SYS_RESOURCE on these machines (see containerd's restrict_oom_score_adj)
oomScoreAdj: 0
podLogsDir: $N/pod-logs
clusterDomain: cluster.local
${NODE_CLUSTER_DNS:+clusterDNS: [$NODE_CLUSTER_DNS]}
resolvConf: /etc/resolv.conf
evictionHard:
  memory.available: 100Mi
  nodefs.available: 1%
  imagefs.available: 1%
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
# a crash loop restarts every 10 s at most, so tests see BackOff within a minute
crashLoopBackOff:
  maxContainerRestartPeriod: 10s
serializeImagePulls: false
EOF
envtest_start kubelet "$DIR/kubelet.log" "$BIN/kubelet" \
  --config="$N/kubelet.yaml" \
  --kubeconfig="$N/kubelet.kubeconfig" \
  --root-dir="$N/kubelet" \
  --hostname-override="$NODE_NAME" \
  --node-ip="$NODE_IP"

# --- wait for a Ready node and the default ServiceAccount ---
K=("$BIN/kubectl" --kubeconfig "$DIR/kubeconfig")
deadline=$((SECONDS + ${NODE_UP_TIMEOUT:-120}))
until [ "$("${K[@]}" get node "$NODE_NAME" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)" = True ]; do
  for c in containerd scheduler controller-manager kube-proxy kubelet; do
    if envtest_exited "$c"; then fail "$c exited" "$DIR/$c.log"; fi
  done
  [ "$SECONDS" -lt "$deadline" ] || fail "node $NODE_NAME not Ready after ${NODE_UP_TIMEOUT:-120}s" "$DIR/kubelet.log"
  sleep 0.5
done
until "${K[@]}" -n default get serviceaccount default >/dev/null 2>&1; do
  [ "$SECONDS" -lt "$deadline" ] || fail "no default ServiceAccount after ${NODE_UP_TIMEOUT:-120}s" "$DIR/controller-manager.log"
  sleep 0.5
done
echo "cluster-up-node: node $NODE_NAME Ready at $NODE_IP; kubeconfig: $DIR/kubeconfig; kubectl: $BIN/kubectl"
