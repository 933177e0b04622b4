# shellcheck shell=bash
# Shared by hack/demo.sh and hack/demo-node.sh (sourced, not run): output helpers, the operator's
# build, one look at a namespace's events and the loop both demos end with. Expects ROOT, and k
# (kubectl as admin), ADMIN (its kubeconfig) and OPERATOR (the binary) where the looks are used.

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

# demo_operator: builds the release operator and sets OPERATOR to it (CARGO_TARGET_DIR honoured,
# relative to the repository root as cargo reads it).
demo_operator() {
  local target_dir="${CARGO_TARGET_DIR:-target}"
  cargo build --release --quiet --bin event-series
  case "$target_dir" in /*) ;; *) target_dir="$ROOT/$target_dir" ;; esac
  OPERATOR="$target_dir/release/event-series"
  [ -x "$OPERATOR" ] || die "no operator binary at $OPERATOR"
}

# demo_total NS: occurrences counted in NS's series objects, all together.
demo_total() {
  k get events -n "$1" -l app.kubernetes.io/managed-by=event-series \
    -o jsonpath='{range .items[*]}{.series.count}{"\n"}{end}' 2>/dev/null | awk '{ s += $1 } END { print s + 0 }'
}

# demo_watch NS: the loop both demos end with, from storm_start on. Each round it calls the demo's
# own demo_round ELAPSED (which sets storm_done=1 once the storm is over), then looks at NS and,
# when a name, a count or a state changed, prints demo_header and the demo's own demo_show NS. It
# says so once every loop is Finished, and stops after DEMO_SECONDS (if set; else at Ctrl-C).
demo_watch() {
  local ns="$1" last_shown='' finished_note=0 elapsed final
  storm_done=0
  while :; do
    elapsed=$((SECONDS - storm_start))
    demo_round "$elapsed"
    demo_look "$ns"
    final=0
    if [ -n "$DEMO_SECONDS" ] && [ "$elapsed" -ge "$DEMO_SECONDS" ]; then final=1; fi
    if [ "$shown" != "$last_shown" ] || [ "$final" = 1 ]; then
      last_shown="$shown"
      demo_header "$elapsed" "$storm_done"
      demo_show "$ns"
    fi
    if [ "$storm_done" = 1 ] && [ "$ongoing" = 0 ] && [ "$finished" -gt 0 ] && [ "$finished_note" = 0 ]; then
      finished_note=1
      printf '\n%sEvery loop is Finished: %s series, one object each, %s occurrences in all.%s\n' \
        "$G" "$finished" "$(demo_total "$ns")" "$N"
      if [ -z "$DEMO_SECONDS" ]; then note "Ctrl-C stops the demo."; fi
    fi
    if [ "$final" = 1 ]; then
      note "DEMO_SECONDS=$DEMO_SECONDS reached"
      break
    fi
    sleep "$INTERVAL"
  done
}
