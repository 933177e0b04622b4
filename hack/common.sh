# shellcheck shell=bash
# The pieces every script of hack/ and bench/ shares (sourced, not run): free ports, a kubeconfig, and
# what a machine needs to run a real node. No state, no side effects when sourced.

# free_ports N: N distinct free TCP ports on 127.0.0.1, held all at once while choosing. They come
# from 12000-19999: below the kernel's ephemeral range (where any outgoing connection may take a port
# before our server binds it), above the node's fixed ports (10248-10259), and apart from the
# 20000-32000 the Rust test harness picks from (test-support/src/process.rs). A port picked here can
# still be taken before a server binds it: callers retry a start that fails at once.
free_ports() {
  if command -v python3 >/dev/null 2>&1; then
    python3 - "$1" <<'PY'
import random, socket, sys
socks, want = [], int(sys.argv[1])
candidates = random.sample(range(12000, 20000), 8000)
for port in candidates:
    if len(socks) == want:
        break
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", port))
    except OSError:
        s.close()
        continue
    socks.append(s)
if len(socks) < want:
    sys.exit("free_ports: fewer than {} free ports in 12000-19999".format(want))
print(" ".join(str(s.getsockname()[1]) for s in socks))
PY
  else
    local found=() p
    while [ ${#found[@]} -lt "$1" ]; do
      p=$((12000 + RANDOM % 8000))
      if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null && [[ " ${found[*]} " != *" $p "* ]]; then
        found+=("$p")
      fi
    done
    echo "${found[*]}"
  fi
}

# write_kubeconfig FILE SERVER CA USER CREDENTIAL... [namespace NS]: a kubeconfig for one user that
# embeds every file it names, so that it can be copied anywhere (mode 600). CREDENTIAL is
# `cert CRT KEY` (a client certificate) or `token TOKEN`.
write_kubeconfig() {
  local file="$1" server="$2" ca="$3" user="$4" kind="$5" credential namespace=''
  shift 5
  case "$kind" in
    cert)
      credential="    client-certificate-data: $(base64 -w0 <"$1")
    client-key-data: $(base64 -w0 <"$2")"
      shift 2
      ;;
    token)
      credential="    token: $1"
      shift
      ;;
    *)
      echo "write_kubeconfig: unknown credential $kind" >&2
      return 2
      ;;
  esac
  if [ "${1:-}" = namespace ]; then namespace="
    namespace: $2"; fi
  (
    umask 077
    cat >"$file.tmp" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: envtest
  cluster:
    server: $server
    certificate-authority-data: $(base64 -w0 <"$ca")
users:
- name: $user
  user:
$credential
contexts:
- name: envtest
  context:
    cluster: envtest
    user: $user$namespace
current-context: envtest
EOF
  )
  mv "$file.tmp" "$file"
}

# What a real node needs (hack/cluster-up-node.sh, the node demo, the node tests, .ci/run), one entry
# a line: a command (or an absolute path) and the Debian package that brings it.
NODE_PREREQS=(
  containerd:containerd
  containerd-shim-runc-v2:containerd
  runc:runc
  iptables:iptables
  ip6tables:iptables
  conntrack:conntrack
  ip:iproute2
  buildah:buildah
  /usr/lib/cni/bridge:containernetworking-plugins
  /usr/lib/cni/host-local:containernetworking-plugins
  /usr/lib/cni/loopback:containernetworking-plugins
)

# What the arm64 build and its test need (hack/build-static.sh, tests/release.rs; .ci/run and
# hack/test.sh read it): Debian's cross gcc with arm64's static glibc, and qemu's user-mode emulator.
# shellcheck disable=SC2034 # used by the scripts that source this file
RELEASE_PREREQS=(
  aarch64-linux-gnu-gcc:gcc-aarch64-linux-gnu
  aarch64-linux-gnu-strip:binutils-aarch64-linux-gnu
  /usr/aarch64-linux-gnu/lib/libc.a:libc6-dev-arm64-cross
  qemu-aarch64-static:qemu-user-static
)

# missing_of ENTRY...: prints the entries (command or path, as in NODE_PREREQS) this machine lacks,
# one a line.
missing_of() {
  local entry tool
  for entry in "$@"; do
    tool="${entry%%:*}"
    if [ "${tool:0:1}" = / ]; then
      [ -e "$tool" ] || echo "$tool"
    else
      command -v "$tool" >/dev/null 2>&1 || echo "$tool"
    fi
  done
}

# packages_of ENTRY...: the Debian packages that bring what missing_of prints (each once).
packages_of() {
  local missing entry
  missing=" $(missing_of "$@" | tr '\n' ' ') "
  for entry in "$@"; do
    [[ "$missing" == *" ${entry%%:*} "* ]] && echo "${entry#*:}"
  done | sort -u
}

# node_missing, node_packages: the same for NODE_PREREQS.
node_missing() { missing_of "${NODE_PREREQS[@]}"; }
node_packages() { packages_of "${NODE_PREREQS[@]}"; }

# node_unfit: why this machine cannot run a node (one line), or nothing when it can.
node_unfit() {
  local missing
  if [ "$(uname -s)" != Linux ]; then echo "a node needs Linux"; return; fi
  if [ "$(id -u)" != 0 ]; then
    echo "a node needs root (containerd, the kubelet and CNI change mounts, network and cgroups)"
    return
  fi
  missing="$(node_missing | tr '\n' ' ')"
  if [ -n "$missing" ]; then
    echo "missing: ${missing% } (Debian: apt-get install $(node_packages | xargs))"
    return
  fi
  if ! [ -d /sys/fs/cgroup/cpu ] && ! [ -f /sys/fs/cgroup/cgroup.controllers ]; then
    echo "no cgroup hierarchy under /sys/fs/cgroup"
    return
  fi
  # The kubelet's root and the images live under the checkout: with little space left there the
  # kubelet evicts every Pod (nodefs.available), and the tests fail far from the cause.
  local free_kib
  free_kib="$(df -Pk "$ROOT" 2>/dev/null | awk 'NR == 2 { print $4 }')"
  if [ -n "$free_kib" ] && [ "$free_kib" -lt $((5 * 1024 * 1024)) ]; then
    echo "only $((free_kib / 1024)) MiB free on the filesystem of $ROOT: a node needs 5 GiB (below that the kubelet evicts every Pod for ephemeral storage)"
  fi
}
