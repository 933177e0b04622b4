# shellcheck shell=bash
# Shared by hack/demo.sh and hack/demo-node.sh (sourced, not run): output helpers and one look at a
# namespace's events. Expects k (kubectl as admin), ADMIN (its kubeconfig) and OPERATOR (the binary)
# where the looks are used.

if [ -t 1 ]; then
  B=$'\e[1m' D=$'\e[2m' G=$'\e[32m' Y=$'\e[33m' R=$'\e[31m' N=$'\e[0m'
else
  B='' D='' G='' Y='' R='' N=''
fi
step() { printf '\n%s==> %s%s\n' "$B" "$*" "$N"; }
note() { printf '%s    %s%s\n' "$D" "$*" "$N"; }
die() {
  printf '%sdemo: %s%s\n' "$R" "$*" "$N" >&2
  exit 1
}

# demo_look NS: sets ongoing and finished (series objects by state) and shown (what changes when a
# name, a count or a state does, not when only ages do).
demo_look() {
  local states
  states="$(k get events -n "$1" -l app.kubernetes.io/managed-by=event-series \
    -o jsonpath='{range .items[*]}{.metadata.labels.eventseries\.dev/state}{"\n"}{end}' 2>/dev/null || true)"
  ongoing="$(grep -c '^Ongoing$' <<<"$states" || true)"
  finished="$(grep -c '^Finished$' <<<"$states" || true)"
  shown="$(k get events -n "$1" -o jsonpath='{range .items[*]}{.metadata.name} {.count} {.series.count} {.metadata.labels}{"\n"}{end}' 2>/dev/null || true)"
}

# demo_header ELAPSED STORM_DONE: the line above each look.
demo_header() {
  local phase
  if [ "$2" = 0 ]; then phase="${Y}storm running${N}"; else phase="${G}storm over${N}"; fi
  printf '\n%s── %3ss ── %s%s · series: %s Ongoing, %s Finished %s──%s\n' \
    "$B" "$1" "$phase" "$B" "$ongoing" "$finished" "$D" "$N"
}

# demo_series NS: the series of NS as event-series get prints them.
demo_series() {
  printf '%sthe same series as series (event-series get -n %s, also `kubectl series`):%s\n' "$D" "$1" "$N"
  KUBECONFIG="$ADMIN" "$OPERATOR" get -n "$1" 2>&1 || true
}

# demo_policy NS FINISH_AFTER SERIES_WINDOW HEARTBEAT: labels NS (created already) and applies the
# EventSeriesPolicy "demo" that selects it, once its CRD is served.
demo_policy() {
  step "A policy for namespace $1: heartbeatInterval $4, finishAfter $2, seriesWindow $3"
  k label namespace "$1" event-series-demo=true >/dev/null
  k wait --for=condition=Established --timeout=60s crd/eventseriespolicies.eventseries.dev >/dev/null
  k apply --server-side -f - >/dev/null <<POLICY
apiVersion: eventseries.dev/v1alpha1
kind: EventSeriesPolicy
metadata:
  name: demo
spec:
  namespaceSelector:
    matchLabels:
      event-series-demo: "true"
  finishAfter: $2
  seriesWindow: $3
  heartbeatInterval: $4
POLICY
  note "eventseriespolicy.eventseries.dev/demo applied"
}
