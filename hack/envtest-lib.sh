# shellcheck shell=bash
# The settings below are for the scripts that source this file (so unused here):
# shellcheck disable=SC2034
# Shared by hack/cluster-up.sh, hack/cluster-up-node.sh and hack/cluster-down.sh (sourced, not run):
# one cluster's directory, its processes, its node. Expects ROOT (the repository root). Defines BIN,
# DIR and helpers; brings in hack/common.sh.

# shellcheck source-path=SCRIPTDIR source=common.sh
. "$ROOT/hack/common.sh"

BIN="$ROOT/target/envtest/bin"
# ENVTEST_MINOR=1.34: the servers and kubectl of that older minor (hack/build-envtest.sh, the test matrix).
[ -z "${ENVTEST_MINOR:-}" ] || BIN="$ROOT/target/envtest/bin-$ENVTEST_MINOR"
# The node cluster's address on this machine: the gateway of the pod bridge that
# hack/cluster-up-node.sh makes (pods reach the apiserver there, through kube-proxy).
NODE_IP=10.244.0.1
NODE_CIDR=10.244.0.0/24
NODE_BRIDGE=esnode0
NODE_NAME=event-series-node
KUBELET_PORT=10250
# A short path: a unix socket's path must fit in 108 bytes, whatever the checkout's depth.
NODE_RUN=/run/event-series-node
NODE_SOCK=$NODE_RUN/containerd.sock
CNI_BIN=/usr/lib/cni
PAUSE_IMAGE=localhost/event-series/pause:v1
# What the kubelet and kube-proxy may change; the node restores them at teardown.
NODE_SYSCTLS=(vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops
  kernel.keys.root_maxkeys kernel.keys.root_maxbytes net.ipv4.ip_forward
  net.ipv4.conf.all.route_localnet net.bridge.bridge-nf-call-iptables net.bridge.bridge-nf-call-ip6tables
  net.netfilter.nf_conntrack_max net.netfilter.nf_conntrack_tcp_timeout_established
  net.netfilter.nf_conntrack_tcp_timeout_close_wait net.netfilter.nf_conntrack_tcp_be_liberal)
DIR="${ENVTEST_DIR:-target/envtest}"
case "$DIR" in
  /*) ;;
  *) DIR="$ROOT/$DIR" ;;
esac
DIR="${DIR%/}"

envtest_key() {
  openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out "$1" 2>/dev/null
}

# envtest_sign CERTS NAME SUBJECT EXTFILE-CONTENT: CERTS/NAME.{key,crt}, signed by CERTS/ca.{crt,key}.
envtest_sign() {
  local d="$1" n="$2"
  envtest_key "$d/$n.key"
  openssl req -new -key "$d/$n.key" -subj "$3" -out "$d/$n.csr" 2>/dev/null
  printf '%s\n' "$4" >"$d/$n.ext"
  openssl x509 -req -in "$d/$n.csr" -CA "$d/ca.crt" -CAkey "$d/ca.key" -CAcreateserial -sha256 -days 3650 \
    -extfile "$d/$n.ext" -out "$d/$n.crt" 2>/dev/null
  rm -f "$d/$n.csr" "$d/$n.ext" "$d/ca.srl"
}

# Each server of this cluster is recognized by its program and by an argument
# that names this cluster's dir.
declare -A ENVTEST_PROG=([etcd]="$BIN/etcd" [apiserver]="$BIN/kube-apiserver"
  [scheduler]="$BIN/kube-scheduler" [controller-manager]="$BIN/kube-controller-manager"
  [kube-proxy]="$BIN/kube-proxy" [kubelet]="$BIN/kubelet" [kwok]="$ROOT/target/tools/bin/kwok"
  [containerd]="$(command -v containerd 2>/dev/null || echo /usr/bin/containerd)")
declare -A ENVTEST_MARK=([etcd]="--data-dir=$DIR/etcd-data" [apiserver]="--cert-dir=$DIR/certs"
  [scheduler]="--kubeconfig=$DIR/node/scheduler.kubeconfig"
  [controller-manager]="--kubeconfig=$DIR/node/controller-manager.kubeconfig"
  [kube-proxy]="--config=$DIR/node/kube-proxy.yaml" [kubelet]="--config=$DIR/node/kubelet.yaml"
  [containerd]="--config=$DIR/node/containerd.toml" [kwok]="--kubeconfig=$DIR/kwok.kubeconfig")

# envtest_is_ours PID NAME: PID is a live (non-zombie) NAME server of this cluster.
# Only builtins until the last check, so that a scan of /proc stays cheap.
envtest_is_ours() {
  local pid="$1" prog="${ENVTEST_PROG[$2]}" mark="${ENVTEST_MARK[$2]}" exe a args=()
  [ -n "$pid" ] && [ -r "/proc/$pid/cmdline" ] || return 1
  mapfile -d '' args <"/proc/$pid/cmdline" 2>/dev/null || return 1
  [ "${#args[@]}" -gt 1 ] && [ "${args[0]}" = "$prog" ] || return 1
  for a in "${args[@]:1}"; do
    if [ "$a" = "$mark" ]; then
      exe="$(readlink "/proc/$pid/exe" 2>/dev/null)" || return 1 # zombies have no exe
      [ "${exe% (deleted)}" = "$prog" ]
      return
    fi
  done
  return 1
}

envtest_pid() {
  cat "$DIR/$1.pid" 2>/dev/null || true
}

envtest_alive() {
  envtest_is_ours "$(envtest_pid "$1")" "$1"
}

# Whether NAME, just started in the background, has exited. Right after `&` its pid is still the
# forking shell, not yet exec'd into the server (and its log not yet opened): envtest_alive does
# not know it, but it has not exited. Exited: no pid, or the pid gone or a zombie.
envtest_exited() {
  local pid
  pid="$(envtest_pid "$1")"
  [ -n "$pid" ] || return 0
  envtest_alive "$1" && return 1
  kill -0 "$pid" 2>/dev/null || return 0
  [ "$(cut -d' ' -f3 "/proc/$pid/stat" 2>/dev/null)" = Z ]
}

# All live processes of NAME in this cluster: the pid file, plus a scan of /proc
# in case the pid file was lost.
envtest_pids() {
  local p seen=""
  p="$(envtest_pid "$1")"
  if envtest_is_ours "$p" "$1"; then seen="$p"; fi
  for d in /proc/[0-9]*; do
    p="${d#/proc/}"
    [ "$p" = "$seen" ] && continue
    if envtest_is_ours "$p" "$1"; then seen="$seen $p"; fi
  done
  echo "$seen"
}

envtest_ready() {
  local url
  url="$(sed -n 's/^APISERVER_URL=//p' "$DIR/cluster.env" 2>/dev/null)"
  [ -n "$url" ] || return 1
  [ "$(curl -sS --max-time 3 --cacert "$DIR/certs/ca.crt" --cert "$DIR/certs/admin.crt" \
    --key "$DIR/certs/admin.key" "$url/readyz" 2>/dev/null)" = ok ]
}

# envtest_stop NAME: TERM, then KILL after ENVTEST_STOP_GRACE seconds (default 5).
envtest_stop() {
  local pids p left=""
  pids="$(envtest_pids "$1")"
  if [ -n "${pids// /}" ]; then
    # shellcheck disable=SC2086
    kill -TERM $pids 2>/dev/null || true
    for _ in $(seq $((${ENVTEST_STOP_GRACE:-5} * 10))); do
      left=""
      for p in $pids; do envtest_is_ours "$p" "$1" && left="$left $p"; done
      [ -z "$left" ] && break
      sleep 0.1
    done
    if [ -n "$left" ]; then
      echo "envtest: $1 ($left) ignored TERM, killing" >&2
      # shellcheck disable=SC2086
      kill -KILL $left 2>/dev/null || true
      for _ in $(seq 50); do
        left=""
        for p in $pids; do envtest_is_ours "$p" "$1" && left="$left $p"; done
        [ -z "$left" ] && break
        sleep 0.1
      done
    fi
  fi
  rm -f "$DIR/$1.pid"
}

envtest_stop_all() {
  # what bench/scale.sh starts beside a plain control plane (no-ops elsewhere)
  envtest_stop kwok
  envtest_stop scheduler
  envtest_stop controller-manager
  envtest_stop apiserver
  envtest_stop etcd
  rm -rf "$DIR/etcd-data" "$DIR/cluster.env"
}

# Serializes cluster-up/cluster-down on one dir. Children must not inherit fd 9.
envtest_lock() {
  mkdir -p "$DIR"
  exec 9>"$DIR/.lock"
  flock 9
}

# envtest_node_down: removes every trace of hack/cluster-up-node.sh's node (see there).
envtest_node_down() {
  local N="$DIR/node" c t m k v ids
  for c in kubelet kube-proxy scheduler controller-manager; do envtest_stop "$c"; done
  if envtest_alive containerd; then
    # every container the kubelet made (pods and their sandboxes), then their shims exit
    # libcni's cache (/var/lib/cni/results, not configurable) names each sandbox's networks by its id
    for c in $(ctr --address "$NODE_SOCK" -n k8s.io containers ls -q 2>/dev/null || true); do
      rm -f /var/lib/cni/results/*-"$c"-*
    done
    ids="$(ctr --address "$NODE_SOCK" -n k8s.io tasks ls -q 2>/dev/null || true)"
    for c in $ids; do ctr --address "$NODE_SOCK" -n k8s.io tasks kill -s SIGKILL "$c" >/dev/null 2>&1 || true; done
    for c in $ids; do
      for _ in $(seq 50); do
        ctr --address "$NODE_SOCK" -n k8s.io tasks delete "$c" >/dev/null 2>&1 && break
        sleep 0.1
      done
    done
  fi
  envtest_stop containerd
  # shims that outlived containerd (it was killed, say)
  for d in /proc/[0-9]*; do
    mapfile -d '' args <"$d/cmdline" 2>/dev/null || continue
    [[ "${args[0]:-}" == *containerd-shim* ]] || continue
    for a in "${args[@]}"; do
      if [ "$a" = "$NODE_SOCK" ]; then kill -KILL "${d#/proc/}" 2>/dev/null || true; fi
    done
  done
  # container processes whose shim is gone: whatever is left in the pods' cgroups
  for t in /sys/fs/cgroup/*/kubepods; do
    [ -d "$t" ] || continue
    xargs -r kill -KILL < <(find "$t" -name cgroup.procs -exec cat {} + 2>/dev/null) 2>/dev/null || true
  done
  # mounts: rootfs overlays, shm, the pods' volumes, network namespaces (deepest first)
  for _ in 1 2 3; do
    m="$(awk -v a="$N/" -v b="$NODE_RUN/" 'index($5, a) == 1 || index($5, b) == 1 { print $5 }' /proc/self/mountinfo | sort -r)"
    [ -n "$m" ] || break
    while read -r t; do umount "$t" 2>/dev/null || umount -l "$t" 2>/dev/null || true; done <<<"$m"
  done
  # iptables: kube-proxy's rules, then any KUBE-/CNI- chain (the kubelet's canaries, the bridge plugin's)
  [ -x "$BIN/kube-proxy" ] && "$BIN/kube-proxy" --cleanup >/dev/null 2>&1 || true
  for ipt in iptables ip6tables; do
    command -v "$ipt" >/dev/null 2>&1 || continue
    for t in filter nat mangle raw; do
      "$ipt" -t "$t" -S 2>/dev/null | grep -E '^-A .*(KUBE-|CNI-)' | while read -r _ rest; do
        # shellcheck disable=SC2086
        "$ipt" -t "$t" -D $rest 2>/dev/null || true
      done || true
      for c in $("$ipt" -t "$t" -S 2>/dev/null | awk '$1 == "-N" && ($2 ~ /^KUBE-/ || $2 ~ /^CNI-/) { print $2 }'); do
        "$ipt" -t "$t" -F "$c" 2>/dev/null || true
      done
      for c in $("$ipt" -t "$t" -S 2>/dev/null | awk '$1 == "-N" && ($2 ~ /^KUBE-/ || $2 ~ /^CNI-/) { print $2 }'); do
        "$ipt" -t "$t" -X "$c" 2>/dev/null || true
      done
    done
  done
  ip link del "$NODE_BRIDGE" 2>/dev/null || true
  # cgroups the kubelet made for pods (deepest first)
  for t in /sys/fs/cgroup/*/kubepods; do
    [ -d "$t" ] && find "$t" -depth -type d -exec rmdir {} + 2>/dev/null || true
  done
  # sysctls back to what they were before the node started
  if [ -f "$N/sysctl.before" ]; then
    while IFS='=' read -r k v; do
      [ -n "$k" ] && echo "$v" >"/proc/sys/${k//.//}" 2>/dev/null || true
    done <"$N/sysctl.before"
  fi
  rm -rf "$N" "$NODE_RUN"
  # directories containerd 1.6 and libcni make at fixed paths, when nothing else uses them
  rmdir /run/containerd/s /run/containerd /var/lib/cni/results /var/lib/cni 2>/dev/null || true
  rm -f "$DIR"/{containerd,scheduler,controller-manager,kube-proxy,kubelet}.pid
}

# envtest_start NAME LOG PROGRAM ARGS...: in the background, outliving the caller, pid in $DIR/NAME.pid.
envtest_start() {
  local name="$1" log="$2"
  shift 2
  setsid nohup "$@" </dev/null >"$log" 2>&1 9>&- &
  echo $! >"$DIR/$name.pid"
}

# envtest_controllers_start CLUSTER_CIDR: kube-scheduler and kube-controller-manager of this release
# for the running apiserver of $DIR, each with its own client certificate (system:kube-scheduler,
# system:kube-controller-manager) and kubeconfig in $DIR/node. Used by cluster-up-node.sh and by
# bench/scale.sh (a control plane whose nodes are simulated).
envtest_controllers_start() {
  local certs="$DIR/certs" url c
  url="$(sed -n 's/^APISERVER_URL=//p' "$DIR/cluster.env")"
  mkdir -p "$DIR/node"
  local client_ext="basicConstraints=critical,CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=clientAuth"
  [ -s "$certs/scheduler.crt" ] || envtest_sign "$certs" scheduler "/CN=system:kube-scheduler" "$client_ext"
  [ -s "$certs/controller-manager.crt" ] || envtest_sign "$certs" controller-manager "/CN=system:kube-controller-manager" "$client_ext"
  for c in scheduler controller-manager; do
    write_kubeconfig "$DIR/node/$c.kubeconfig" "$url" "$certs/ca.crt" "$c" cert "$certs/$c.crt" "$certs/$c.key"
  done
  envtest_start scheduler "$DIR/scheduler.log" "$BIN/kube-scheduler" \
    --kubeconfig="$DIR/node/scheduler.kubeconfig" \
    --bind-address=127.0.0.1 --secure-port=0 \
    --leader-elect=false
  envtest_start controller-manager "$DIR/controller-manager.log" "$BIN/kube-controller-manager" \
    --kubeconfig="$DIR/node/controller-manager.kubeconfig" \
    --bind-address=127.0.0.1 --secure-port=0 \
    --leader-elect=false \
    --use-service-account-credentials=true \
    --service-account-private-key-file="$certs/sa.key" \
    --root-ca-file="$certs/ca.crt" \
    --service-cluster-ip-range=10.0.0.0/24 \
    --cluster-cidr="$1" \
    --cluster-signing-cert-file="$certs/ca.crt" --cluster-signing-key-file="$certs/ca.key"
}
