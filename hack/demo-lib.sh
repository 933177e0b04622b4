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

# demo_series NS: the series of NS as event-series get prints them, and the loop alerts' notifications.
demo_series() {
  # shellcheck disable=SC2016 # the backquotes are printed as they are
  printf '%sthe same series as series (event-series get -n %s, also `kubectl series`):%s\n' "$D" "$1" "$N"
  KUBECONFIG="$ADMIN" "$OPERATOR" get -n "$1" 2>&1 || true
  demo_notifications
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
  alert:
    minCount: 5
    types: [Warning]
POLICY
  note "eventseriespolicy.eventseries.dev/demo applied (Warning loops of 5 or more are alerts)"
}

# demo_alertmanager ADDR DIR: a real Alertmanager (hack/tools.sh builds it) on ADDR, and the webhook
# receiver it notifies (hack/webhook.py, printing to DIR/notifications.log). Sets AM_URL, NOTIFICATIONS
# and demo_pids (for the demo's cleanup to stop).
demo_alertmanager() {
  local addr="$1" dir="$2" am_port hook_port
  bash "$ROOT/hack/tools.sh" alertmanager
  read -r am_port hook_port <<<"$(free_ports 2)"
  NOTIFICATIONS="$dir/notifications.log"
  : >"$NOTIFICATIONS"
  python3 "$ROOT/hack/webhook.py" "$addr" "$hook_port" >>"$NOTIFICATIONS" 2>&1 &
  demo_pids+=("$!")
  mkdir -p "$dir/alertmanager"
  cat >"$dir/alertmanager.yml" <<AM
route:
  receiver: webhook
  group_by: [namespace, reason, name]
  group_wait: 5s
  group_interval: 10s
  repeat_interval: 4h
receivers:
- name: webhook
  webhook_configs:
  - url: http://$addr:$hook_port/
    send_resolved: true
AM
  "$ROOT/target/tools/bin/alertmanager" --config.file="$dir/alertmanager.yml" \
    --storage.path="$dir/alertmanager" --web.listen-address="$addr:$am_port" \
    --cluster.listen-address= </dev/null >"$dir/alertmanager.log" 2>&1 &
  demo_pids+=("$!")
  AM_URL="http://$addr:$am_port"
  for _ in $(seq 100); do
    curl -fsS --max-time 1 "$AM_URL/-/ready" >/dev/null 2>&1 && break
    sleep 0.2
  done
  curl -fsS --max-time 1 "$AM_URL/-/ready" >/dev/null 2>&1 || die "Alertmanager did not start (${dir#"$ROOT"/}/alertmanager.log)"
  note "Alertmanager at $AM_URL notifies a webhook that prints to ${NOTIFICATIONS#"$ROOT"/}"
}

# demo_notifications: what the webhook has received so far.
demo_notifications() {
  [ -n "${NOTIFICATIONS:-}" ] || return 0
  printf '%snotifications Alertmanager sent to the webhook (one when a loop starts, one when it ends):%s\n' "$D" "$N"
  if [ -s "$NOTIFICATIONS" ]; then sed 's/^/    /' "$NOTIFICATIONS"; else note "(none yet)"; fi
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
    # shellcheck disable=SC2154 # storm_start is set by the demo that sources this file
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
