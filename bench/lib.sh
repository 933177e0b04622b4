# shellcheck shell=bash
# Shared by the end-to-end benchmarks in bench/ (sourced, not run). Expects ROOT (the repository
# root). Every benchmark runs against its own private, real kube-apiserver + etcd started by
# hack/cluster-up.sh in target/envtest-bench-<name>, and stops it (and only what it started) at exit.

# shellcheck source-path=SCRIPTDIR source=../hack/common.sh
. "$ROOT/hack/common.sh"

BIN="$ROOT/target/envtest/bin"
TARGET="${CARGO_TARGET_DIR:-$ROOT/target}"
case "$TARGET" in /*) ;; *) TARGET="$ROOT/$TARGET" ;; esac
# OPERATOR: the operator binary (default: the release build of TARGET), e.g. a copy built with other
# features (bench/allocators.sh).
OPERATOR="${OPERATOR:-$TARGET/release/event-series}"

# BENCH_COMMIT: the commit the benchmark measures, taken when it starts (right after `just`'s
# bench-build), not when it writes its result: a commit made while a long run goes on must not
# relabel it. "-dirty" when the operator's code had uncommitted changes (`tables.py` then calls the
# result not current).
BENCH_COMMIT="$(git -C "$ROOT" rev-parse HEAD)"
[ -z "$(git -C "$ROOT" status --porcelain -- src core Cargo.toml Cargo.lock core/Cargo.toml)" ] ||
  BENCH_COMMIT="$BENCH_COMMIT-dirty"

log() { printf '%s bench: %s\n' "$(date +%T)" "$*" >&2; }
die() {
  log "$*"
  exit 1
}

# machine_json: the machine and its load right now, and what the measured binary was built with
# (its own --version: the commit it was built from, rustc and the profile; tables.py calls a result
# whose binary's commit is not the result's stale), as one JSON object.
machine_json() {
  local load model rustc binary profile
  load="$(cut -d' ' -f1-3 /proc/loadavg)"
  model="$(lscpu | sed -n 's/^Model name: *//p' | head -1)"
  rustc="$(rustc --version 2>/dev/null || echo unknown)"
  binary="$("$OPERATOR" --version 2>/dev/null || echo none)"
  profile="$(sed -n 's/.*, \([a-z]*\))$/\1/p' <<<"$binary")"
  printf '{"date":"%s","nproc":%s,"cpu":"%s","mem_gib":%s,"loadavg":"%s","kernel":"%s","rustc":"%s","profile":"%s","binary":"%s"}' \
    "$(date -u +%FT%TZ)" "$(nproc)" "$model" "$(free -g | awk '/^Mem:/ { print $2 }')" "$load" "$(uname -r)" \
    "$rustc" "${profile:-unknown}" "$binary"
}

# cluster_start NAME [KEY=VALUE...]: a fresh apiserver in target/envtest-bench-NAME (extra env for
# hack/cluster-up.sh, e.g. APISERVER_EXTRA_ARGS=...). Sets CLUSTER_DIR, KUBECONFIG_FILE, API_URL.
cluster_start() {
  local name="$1"
  shift
  CLUSTER_DIR="$ROOT/target/envtest-bench-$name"
  ENVTEST_DIR="$CLUSTER_DIR" bash "$ROOT/hack/cluster-down.sh" >/dev/null
  env ENVTEST_DIR="$CLUSTER_DIR" "$@" bash "$ROOT/hack/cluster-up.sh" >&2
  KUBECONFIG_FILE="$CLUSTER_DIR/kubeconfig"
  # shellcheck disable=SC1091
  API_URL="$(. "$CLUSTER_DIR/cluster.env" && echo "$APISERVER_URL")"
}

# cluster_stop: the operator started by operator_start first, since it belongs to this cluster:
# left running, it would retry against a dead API server beside whatever the script does next.
cluster_stop() {
  stop_pid "${OP_PID:-}"
  OP_PID=''
  [ -n "${CLUSTER_DIR:-}" ] && ENVTEST_DIR="$CLUSTER_DIR" bash "$ROOT/hack/cluster-down.sh" >/dev/null 2>&1 || true
}

k() { "$BIN/kubectl" --kubeconfig "$KUBECONFIG_FILE" "$@"; }

# api_get PATH [CURL ARGS...]: GET on the apiserver as admin.
api_get() {
  local path="$1"
  shift
  curl -fsS --max-time 20 --cacert "$CLUSTER_DIR/certs/ca.crt" --cert "$CLUSTER_DIR/certs/admin.crt" \
    --key "$CLUSTER_DIR/certs/admin.key" "$@" "$API_URL$path"
}

# api_writes: "<core> <events.k8s.io>": the apiserver's own count of write requests (every verb but
# GET, LIST, WATCH; every response code) on the resource "events" of each group, from its /metrics
# (apiserver_request_total).
api_writes() {
  api_get /metrics | awk '
    /^apiserver_request_total\{/ && /resource="events"/ && /subresource=""/ && !/verb="(GET|LIST|WATCH|WATCHLIST|CONNECT)"/ {
      g = $0; sub(/.*group="/, "", g); sub(/".*/, "", g)
      if (g == "") core += $NF; else if (g == "events.k8s.io") ev += $NF
    }
    END { printf "%d %d\n", core, ev }'
}

# operator_start LOGFILE ARGS...: runs the operator with the admin kubeconfig, metrics over plain HTTP;
# sets OP_PID, OP_URL (metrics) and OP_HEALTH (probes).
operator_start() {
  local logfile="$1" port health
  shift
  read -r port health <<<"$(free_ports 2)"
  OP_URL="http://127.0.0.1:$port"
  OP_HEALTH="http://127.0.0.1:$health"
  KUBECONFIG="$KUBECONFIG_FILE" NO_COLOR=1 "$OPERATOR" run --metrics-addr "127.0.0.1:$port" \
    --metrics-secure=false --health-addr "127.0.0.1:$health" "$@" \
    </dev/null >"$logfile" 2>&1 &
  OP_PID=$!
}

operator_ready() { [ "$(curl -s -o /dev/null -w '%{http_code}' --max-time 2 "$OP_HEALTH/readyz")" = 200 ]; }

# op_metric NAME: the value of one metric line of the operator (first match, exact name+labels).
op_metric() {
  { curl -fsS --max-time 5 "$OP_URL/metrics" || true; } | awk -v m="$1" '$1 == m && !found { v = $2; found = 1 } END { print found ? v : 0 }'
}

# now_ms: this machine's clock in ms since the epoch (the audit log's clock, for a node or apiserver here).
now_ms() { echo $(($(date +%s%N) / 1000000)); }

# rss_kib PID, cpu_ticks PID (utime+stime in clock ticks).
rss_kib() { awk '/^VmRSS:/ { print $2 }' "/proc/$1/status"; }
hwm_kib() { awk '/^VmHWM:/ { print $2 }' "/proc/$1/status"; }
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }

# stop_pid PID: TERM, wait.
stop_pid() {
  [ -n "${1:-}" ] || return 0
  kill -TERM "$1" 2>/dev/null || true
  wait "$1" 2>/dev/null || true
}

# op_metric_sum FAMILY: the sum of every series of one metric family of the operator, as an integer.
op_metric_sum() {
  { curl -fsS --max-time 5 "$OP_URL/metrics" || true; } |
    awk -v m="$1" 'index($1, m "{") == 1 || $1 == m { n += $2 } END { printf "%d\n", n }'
}

# keep_dated KIND FILE: also keeps FILE (a benchmark's JSON summary, which it overwrites each run) as
# bench/results/dated/KIND/<date>.json, wrapped with the commit measured and the machine now, so that
# `python3 bench/tables.py --current` can tell whether the newest run measured today's code.
keep_dated() {
  local dir="$ROOT/bench/results/dated/$1"
  mkdir -p "$dir"
  jq --arg commit "$BENCH_COMMIT" --argjson machine "$(machine_json)" --arg kind "$1" \
    '{commit: $commit, machine: $machine, kind: $kind, result: .}' "$2" >"$dir/$(date -u +%Y%m%dT%H%M%SZ).json"
}

# need_loader: sets LOADER (the bench-loader example) and stops unless it and the operator are built.
need_loader() {
  LOADER="$TARGET/release/examples/bench-loader"
  [ -x "$LOADER" ] || die "no $LOADER: cargo build --release --example bench-loader"
  [ -x "$OPERATOR" ] || die "no $OPERATOR: cargo build --release"
}

# wait_for_creates N LOGFILE: until the operator at OP_URL (process OP_PID) has created N series
# objects (201 answers), for at most an hour.
wait_for_creates() {
  local t0=$SECONDS
  while [ "$(op_metric 'event_series_api_requests_total{verb="create",code="201"}' | cut -d. -f1)" -lt "$1" ]; do
    [ $((SECONDS - t0)) -lt 3600 ] || die "the operator did not create $1 series in an hour (log $2)"
    kill -0 "$OP_PID" || die "the operator exited (log $2)"
    sleep 5
  done
}

# wait_for_leader: until the installed operator's Lease (event-series-system/event-series) has a
# holder, for at most two minutes. `rollout status` returns once the replicas are Ready (warm), but a
# fresh install has no Lease yet, and a replica creates one only after seeing it missing for a lease
# duration (15 s): a loop started before then is timed from the install, not by the operator.
wait_for_leader() {
  local t0=$SECONDS
  until [ -n "$(k -n event-series-system get lease event-series -o jsonpath='{.spec.holderIdentity}' 2>/dev/null || true)" ]; do
    [ $((SECONDS - t0)) -lt 120 ] || die "no replica took the Lease within 120 s"
    sleep 1
  done
}

# silent_alertmanager ADDR: a real Alertmanager on ADDR (a free port) that notifies nobody, its
# state in CLUSTER_DIR: what the benchmarks count alerts in. Sets AM_PID (for the caller's
# cleanup), AM_PORT and AM_URL.
silent_alertmanager() {
  local port
  bash "$ROOT/hack/tools.sh" alertmanager
  read -r port <<<"$(free_ports 1)"
  # shellcheck disable=SC2034
  AM_PORT=$port
  mkdir -p "$CLUSTER_DIR/alertmanager"
  printf 'route:\n  receiver: none\nreceivers:\n- name: none\n' >"$CLUSTER_DIR/alertmanager.yml"
  "$ROOT/target/tools/bin/alertmanager" --config.file="$CLUSTER_DIR/alertmanager.yml" \
    --storage.path="$CLUSTER_DIR/alertmanager" --web.listen-address="$1:$port" \
    --cluster.listen-address= </dev/null >"$CLUSTER_DIR/alertmanager.log" 2>&1 &
  # shellcheck disable=SC2034
  AM_PID=$!
  AM_URL="http://$1:$port"
  for _ in $(seq 100); do curl -fsS --max-time 1 "$AM_URL/-/ready" >/dev/null 2>&1 && break; sleep 0.2; done
  curl -fsS --max-time 1 "$AM_URL/-/ready" >/dev/null 2>&1 || die "Alertmanager did not start ($CLUSTER_DIR/alertmanager.log)"
}
