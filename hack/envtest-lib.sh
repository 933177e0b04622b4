# shellcheck shell=bash
# Shared by hack/cluster-up.sh and hack/cluster-down.sh (sourced, not run).
# Expects ROOT (the repository root). Defines BIN, DIR and helpers.

BIN="$ROOT/target/envtest/bin"
DIR="${ENVTEST_DIR:-target/envtest}"
case "$DIR" in
  /*) ;;
  *) DIR="$ROOT/$DIR" ;;
esac
DIR="${DIR%/}"

# Each server of this cluster is recognized by its program and by an argument
# that names this cluster's dir.
declare -A ENVTEST_PROG=([etcd]="$BIN/etcd" [apiserver]="$BIN/kube-apiserver")
declare -A ENVTEST_MARK=([etcd]="--data-dir=$DIR/etcd-data" [apiserver]="--cert-dir=$DIR/certs")

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
  local port
  port="$(sed -n 's/^APISERVER_PORT=//p' "$DIR/cluster.env" 2>/dev/null)"
  [ -n "$port" ] || return 1
  [ "$(curl -sS --max-time 3 --cacert "$DIR/certs/ca.crt" --cert "$DIR/certs/admin.crt" \
    --key "$DIR/certs/admin.key" "https://127.0.0.1:$port/readyz" 2>/dev/null)" = ok ]
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
