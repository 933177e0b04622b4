#!/usr/bin/env bash
# `just bench-scale`: event-series at scale on a simulated cluster. Each run gets a fresh control plane
# (etcd, kube-apiserver, the real kube-scheduler and kube-controller-manager) in target/envtest-bench-scale,
# kwok (sigs.k8s.io/kwok, built by hack/tools.sh) managing simulated Nodes and their Pods with the Stages of
# bench/scale/stages.yaml, and, in the runs with the operator, event-series installed the way
# `kubectl apply -k config/default` installs it (CRD, RBAC, admission policy, FlowSchema; the Deployment
# scaled to 0, since kwok's Pods run nothing) and run on this machine as that ServiceAccount with the
# Deployment's flags, metrics over plain HTTP on loopback for the harness. bench/scale.py makes the load
# and measures.
#
# STEPS: "PODS:NAMESPACES" (default "1000:10 5000:100 20000:1000"), with the operator. Each step loads
#        for LOAD_MINUTES (default 4; the figures are over that window), then stops the load and
#        drains: its finishes come in a quiet cluster, beside those that came due under load.
# BILL:  "PODS:NAMESPACES" (default 5000:100): PAIRS (default 5) pairs of runs without and with the
#        operator, alternating, for the API server's bill with its spread. BILL="" skips it. Each
#        bill run measures BILL_MINUTES from the start of the load (default LOAD_MINUTES +
#        finishAfter + 1: the load stops inside the window, so that every series' create, early
#        refreshes and finish are in it).
# WATCH_CACHE=on adds --watch-cache-sizes=events#1000 to every apiserver of the run (default: the
# apiserver's default, which keeps no watch cache for events).
# FIRST_REFRESH sets the policy's firstRefresh (default: unset, the policy's default 1m; 0 turns the
#        early refreshes off): what the early refreshes cost in the bill, side by side with a run at
#        the default. A run with it set goes to scale-first-refresh-<value>/, not beside the defaults.
# The steps' apiservers also write every core/v1 Event write to their audit log (AUDIT_CORE_EVENTS):
# the end-to-end latencies and finish lateness are timed by it, and a key whose count differs can be
# explained occurrence by occurrence. The bill's do not, so that the bill is not charged for them.
# Result: bench/results/scale/<date>/<label>.json per run, and a summary.json (scale-watch-cache/ for a
# run with WATCH_CACHE=on).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$ROOT/bench/lib.sh"

STEPS="${STEPS-1000:10 5000:100 20000:1000}"
BILL="${BILL-5000:100}"
PAIRS="${PAIRS:-5}"
LOAD_MINUTES="${LOAD_MINUTES:-4}"
# The runs' policy, in seconds: shorter than the defaults (6m), for shorter drains. firstRefresh and
# heartbeatInterval keep their defaults (1m, 30m): early refreshes at 1, 2 and 4 minutes fall inside
# a run, a heartbeat does not.
FINISH_AFTER_S=180
SERIES_WINDOW_S=180
BILL_MINUTES="${BILL_MINUTES:-$(awk -v l="$LOAD_MINUTES" -v f="$FINISH_AFTER_S" 'BEGIN { print l + f / 60 + 1 }')}"
case "$PAIRS" in '' | *[!0-9]* | 0) die "PAIRS must be a whole number of at least 1, not '$PAIRS'" ;; esac
FIRST_REFRESH="${FIRST_REFRESH:-}"
case "$FIRST_REFRESH" in '' | 0 | [1-9]*[smh]) ;; *) die "FIRST_REFRESH must be 0 or a duration such as 90s, not '$FIRST_REFRESH'" ;; esac
# A YAML string: the CRD takes durations as strings, and a bare 0 would be an integer. Built here, since
# a heredoc's ${:+} would strip the quotes.
POLICY_FIRST_REFRESH=''
if [ -n "$FIRST_REFRESH" ]; then POLICY_FIRST_REFRESH=", firstRefresh: '$FIRST_REFRESH'"; fi
policy_yaml() {
  cat <<EOF
apiVersion: eventseries.dev/v1alpha1
kind: EventSeriesPolicy
metadata: {name: default}
spec: {finishAfter: ${FINISH_AFTER_S}s, seriesWindow: ${SERIES_WINDOW_S}s$POLICY_FIRST_REFRESH}
EOF
}
OUT="$ROOT/bench/results/scale"
# An `if`, not `[ ] && echo` in a substitution: under `set -e` a false test ending an assignment exits.
if [ "${WATCH_CACHE:-default}" = on ]; then OUT="$OUT-watch-cache"; fi
OUT="$OUT${FIRST_REFRESH:+-first-refresh-$FIRST_REFRESH}/$(date -u +%Y%m%dT%H%M%SZ)"
# SCALE_DRY_RUN=1 prints where a run would write and the policy it would apply, and starts nothing:
# what bench/test_scale_figures.py checks of this script's settings without a cluster.
if [ "${SCALE_DRY_RUN:-}" = 1 ]; then
  printf 'out: %s\n' "$OUT"
  policy_yaml
  exit 0
fi
KWOK="$ROOT/target/tools/bin/kwok"
[ -x "$KWOK" ] || die "no $KWOK: bash hack/tools.sh kwok"
[ -x "$BIN/kube-scheduler" ] || die "no $BIN/kube-scheduler: bash hack/build-envtest.sh node"
[ -x "$OPERATOR" ] || die "no $OPERATOR: cargo build --release"
mkdir -p "$OUT"
OP_PID=''
trap 'stop_pid "$OP_PID"; cluster_stop' EXIT

apiserver_args=(--max-requests-inflight=800 --max-mutating-requests-inflight=400)
[ "${WATCH_CACHE:-default}" = on ] && apiserver_args+=("--watch-cache-sizes=events#1000")

# run LABEL PODS NAMESPACES WITH(0|1) AUDIT(0|1) [WINDOW_MINUTES]
run() {
  local label="$1" pods="$2" namespaces="$3" with="$4" audit="$5" window="${6:-$LOAD_MINUTES}"
  log "run $label: $pods pods in $namespaces namespaces, operator $with"
  cluster_start scale "APISERVER_EXTRA_ARGS=${apiserver_args[*]}" "AUDIT_CORE_EVENTS=$audit"
  (ENVTEST_DIR="$CLUSTER_DIR" && . "$ROOT/hack/envtest-lib.sh" && envtest_controllers_start 10.244.0.0/16)
  cp "$KUBECONFIG_FILE" "$CLUSTER_DIR/kwok.kubeconfig"
  (ENVTEST_DIR="$CLUSTER_DIR" && . "$ROOT/hack/envtest-lib.sh" \
    && envtest_start kwok "$CLUSTER_DIR/kwok.log" "$KWOK" --kubeconfig="$CLUSTER_DIR/kwok.kubeconfig" \
      --config="$ROOT/bench/scale/stages.yaml" --manage-all-nodes=false \
      --manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake \
      --server-address=127.0.0.1:0 --node-lease-duration-seconds=40)
  OP_PID=''
  if [ "$with" = 1 ]; then
    k apply --server-side -k "$ROOT/config/default" >/dev/null
    k -n event-series-system scale deployment event-series --replicas=0 >/dev/null
    k wait --for condition=established crd/eventseriespolicies.eventseries.dev --timeout=60s >/dev/null
    policy_yaml | k apply -f - >/dev/null
    local token sa_kubeconfig="$CLUSTER_DIR/kubeconfig-event-series"
    token="$(k create token event-series -n event-series-system --duration=24h)"
    write_kubeconfig "$sa_kubeconfig" "$API_URL" "$CLUSTER_DIR/certs/ca.crt" event-series token "$token" \
      namespace event-series-system
    KUBECONFIG_FILE="$sa_kubeconfig" operator_start "$CLUSTER_DIR/operator.log" --leader-elect \
      --lease-namespace event-series-system --instance bench-scale --log-format=json
    for _ in $(seq 300); do operator_ready && break; sleep 0.2; done
    operator_ready || die "the operator is not ready (log $CLUSTER_DIR/operator.log)"
  fi
  # cluster.env is the run's own (not in the clone). BIN is lib.sh's: the subshells above that
  # source envtest-lib.sh set their own, which is meant to stay in them.
  # shellcheck disable=SC1091,SC2031
  KUBECTL="$BIN/kubectl" KUBECONFIG="$KUBECONFIG_FILE" CLUSTER_DIR="$CLUSTER_DIR" OP_PID="$OP_PID" \
    OP_URL="${OP_URL:-}" ETCD_URL="$(. "$CLUSTER_DIR/cluster.env" && echo "$ETCD_URL")" \
    LOAD_MINUTES="$LOAD_MINUTES" WINDOW_MINUTES="$window" FINISH_AFTER_S="$FINISH_AFTER_S" \
    SERIES_WINDOW_S="$SERIES_WINDOW_S" \
    python3 "$ROOT/bench/scale.py" run "$OUT/$label.json" "$pods" "$namespaces" "$with" "$label"
  stop_pid "$OP_PID"
  OP_PID=''
  cluster_stop
}

cat >"$OUT/run.json" <<EOF
{"commit": "$BENCH_COMMIT", "dirty": $(case "$BENCH_COMMIT" in *-dirty) echo true ;; *) echo false ;; esac),
 "machine": $(machine_json), "steps": "$STEPS", "bill": "$BILL", "watch_cache": "${WATCH_CACHE:-default}",
 "apiserver_args": "${apiserver_args[*]}", "kwok": "$(cat "$ROOT/target/tools/bin/.kwok.version")",
 "operator_flags": "--leader-elect --log-format=json (config/default) --metrics-secure=false (loopback)",
 "policy": "finishAfter ${FINISH_AFTER_S}s, seriesWindow ${SERIES_WINDOW_S}s${FIRST_REFRESH:+, firstRefresh $FIRST_REFRESH}",
 "first_refresh": "${FIRST_REFRESH:-default}",
 "finish_after_s": $FINISH_AFTER_S, "series_window_s": $SERIES_WINDOW_S,
 "load_minutes": $LOAD_MINUTES, "pairs": $PAIRS, "bill_minutes": $BILL_MINUTES}
EOF
for step in $STEPS; do
  run "step-${step%%:*}" "${step%%:*}" "${step##*:}" 1 1
done
if [ -n "$BILL" ]; then
  # Alternating, so that a drift of the machine over the hour falls on both sides alike.
  for i in $(seq "$PAIRS"); do
    run "bill-without-$i" "${BILL%%:*}" "${BILL##*:}" 0 0 "$BILL_MINUTES"
    run "bill-with-$i" "${BILL%%:*}" "${BILL##*:}" 1 0 "$BILL_MINUTES"
  done
fi
python3 "$ROOT/bench/scale_summary.py" "$OUT"
