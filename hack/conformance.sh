#!/usr/bin/env bash
# `just conformance`: Kubernetes' own end-to-end tests of Events, run against a cluster with
# event-series installed and selecting every namespace, so that the operator's series objects sit
# beside the events those tests write, list, patch and delete.
#
#   1. e2e.test (`go test -c k8s.io/kubernetes/test/e2e`) and agnhost (the image the sig-node and
#      sig-cli tests run), from the k8s.io/kubernetes module at the harness's release
#      (tests/conformance/go.mod, the staging modules pinned as in tests/envtest); kept outside the
#      clone in $EVENT_SERIES_CACHE/conformance under a key of the module files, the build flags and
#      the Go version, like hack/tools.sh (`--build-only` stops there);
#   2. a node cluster in target/envtest-conformance (hack/cluster-up-node.sh: the operator's image
#      loaded), agnhost's image loaded under the name the tests ask for (the node has no registry);
#   3. `kubectl apply -k config/default` and one EventSeriesPolicy for every namespace, alerts off,
#      short heartbeats and finishes (so that the operator writes while the tests run);
#   4. the tests FOCUS selects, listed first with --ginkgo.dry-run, then run (--provider=skeleton:
#      a cluster the framework knows nothing about); a table of what ran and passed;
#   5. what the operator did meanwhile: the series objects it created in the tests' namespaces (from
#      the audit log, which records every events.k8s.io write), its API requests by code, and the
#      lines of its logs at warn or error.
# Exits non-zero when a test failed or the operator wrote nothing in the tests' namespaces. Needs
# what a node needs (hack/common.sh, NODE_PREREQS); one node per machine (hack/cluster-up-node.sh).
#
# Environment:
#   FOCUS     the ginkgo focus (default: every test of Event objects in v1.37's suite: sig-instrumentation's
#             "Events" and "Events API" (core/v1 and events.k8s.io/v1; api-machinery's moved there),
#             sig-node's "Events" (the kubelet's and scheduler's), sig-cli's `kubectl events`)
#   E2E_ARGS  more arguments for e2e.test
#   KEEP=1    leave the cluster up (ENVTEST_DIR=target/envtest-conformance hack/cluster-down.sh)
# Usage: hack/conformance.sh [--build-only]
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
MOD="$ROOT/tests/conformance"
OUT="$ROOT/target/conformance"
CACHE="${EVENT_SERIES_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/event-series}/conformance"
FOCUS="${FOCUS:-\[sig-instrumentation\] Events|\[sig-node\] Events|\[sig-cli\] Kubectl client Kubectl events}"
export ENVTEST_DIR="$ROOT/target/envtest-conformance"
command -v go >/dev/null 2>&1 || export PATH="$PATH:/usr/local/go/bin"
command -v go >/dev/null 2>&1 || { echo "conformance: go not found (need Go >= 1.26)" >&2; exit 1; }

# --- 1. the binaries ---
mkdir -p "$OUT/bin" "$CACHE"
kver="$(cd "$MOD" && GOTOOLCHAIN=local go list -m -f '{{.Version}}' k8s.io/kubernetes)"
major="${kver#v}"; major="${major%%.*}"
minor="${kver#v*.}"; minor="${minor%%.*}"
# The release stamped as the harness's binaries have it (e2e.test --version); static (CGO off), the
# module files as committed (-mod=readonly). These flags, the module files and the Go version are
# the cache key.
ldflags="-s -w"
for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags+=" -X $p.gitVersion=$kver -X $p.gitMajor=$major -X $p.gitMinor=$minor -X $p.gitTreeState=clean"
done
build=(-mod=readonly -trimpath -ldflags "$ldflags")
key="$( { GOTOOLCHAIN=local go env GOVERSION; echo "CGO_ENABLED=0 ${build[*]}"; cat "$MOD/go.mod" "$MOD/go.sum"; } \
  | sha256sum | cut -c1-16)"
entry="$CACHE/$key"
if [ ! -x "$entry/e2e.test" ] || [ ! -x "$entry/agnhost" ]; then
  exec 8>"$CACHE/.lock"
  flock 8
  if [ ! -x "$entry/e2e.test" ] || [ ! -x "$entry/agnhost" ]; then
    echo "conformance: building e2e.test and agnhost (k8s.io/kubernetes $kver) into $entry" >&2
    started=$SECONDS
    tmp="$(mktemp -d "$entry.tmp.XXXXXX")" && chmod 755 "$tmp"
    trap 'rm -rf "$tmp"' EXIT
    (cd "$MOD" && CGO_ENABLED=0 GOTOOLCHAIN=local go test -c "${build[@]}" -o "$tmp/e2e.test" k8s.io/kubernetes/test/e2e)
    (cd "$MOD" && CGO_ENABLED=0 GOTOOLCHAIN=local go build "${build[@]}" -o "$tmp/agnhost" k8s.io/kubernetes/test/images/agnhost)
    rm -rf "$entry"
    mv -T "$tmp" "$entry"
    trap - EXIT
    echo "conformance: built in $((SECONDS - started)) s" >&2
  fi
  exec 8>&-
  # Entries nobody used for 30 days (older releases) go.
  find "$CACHE" -mindepth 1 -maxdepth 1 -type d -mtime +30 -exec rm -rf {} + 2>/dev/null || true
fi
touch "$entry"
for b in e2e.test agnhost; do
  rm -f "$OUT/bin/$b"
  ln "$entry/$b" "$OUT/bin/$b" 2>/dev/null || cp "$entry/$b" "$OUT/bin/$b"
done
E2E="$OUT/bin/e2e.test"
[ "${1:-}" != --build-only ] || exit 0

# --- 2. the cluster ---
# shellcheck source-path=SCRIPTDIR source=envtest-lib.sh
. "$ROOT/hack/envtest-lib.sh"
unfit="$(node_unfit)"
[ -z "$unfit" ] || { echo "conformance: this machine cannot run a node: $unfit" >&2; exit 1; }
cleanup() {
  local rc=$?
  if [ "${KEEP:-0}" = 1 ]; then
    echo "conformance: the cluster stays up (KUBECONFIG=$ENVTEST_DIR/kubeconfig); ENVTEST_DIR=$ENVTEST_DIR hack/cluster-down.sh"
  else
    bash "$ROOT/hack/cluster-down.sh" >&2 || true
  fi
  return "$rc"
}
trap cleanup EXIT
started=$SECONDS
# A clusterDNS address, as the upstream tests expect of a cluster (without it every Pod gets a
# MissingClusterDNS Warning, which `kubectl events` tests count as unexpected).
NODE_CLUSTER_DNS=10.0.0.10 bash hack/cluster-up-node.sh
export KUBECONFIG="$ENVTEST_DIR/kubeconfig"
K=("$BIN/kubectl")
# The images the tests run, by the names they ask for: agnhost (built above) is the one the focused
# tests use; --list-images names its registry and tag.
agnhost="$("$E2E" --list-images 2>/dev/null | grep '/e2e-test-images/agnhost:' | sort -V | tail -n 1)"
[ -n "$agnhost" ] || { echo "conformance: e2e.test --list-images names no agnhost image" >&2; exit 1; }
# As upstream's image: root (its servers bind port 80), `pause` when no command is given.
bash hack/image.sh --binary agnhost "$agnhost" "$OUT/bin/agnhost" 0 pause
ctr --address "$NODE_SOCK" -n k8s.io images import "$ROOT/target/image/agnhost.oci.tar" >/dev/null
# Tests that run the pause image ask for registry.k8s.io's: the node's own under that name too.
pause="$("$E2E" --list-images 2>/dev/null | grep -m1 '/pause:' || true)"
[ -z "$pause" ] || ctr --address "$NODE_SOCK" -n k8s.io images tag --force "$PAUSE_IMAGE" "$pause" >/dev/null

# --- 3. the operator, every namespace ---
"${K[@]}" apply -k config/default
"${K[@]}" apply -f - <<'EOF'
apiVersion: eventseries.dev/v1alpha1
kind: EventSeriesPolicy
metadata:
  name: conformance
spec:
  namespaceSelector: {}   # every namespace, the tests' included
  heartbeatInterval: 30s  # so that the operator writes while the tests run
  firstRefresh: 10s
  finishAfter: 45s
  seriesWindow: 5m
  # no alert: no Alertmanager here
EOF
"${K[@]}" -n event-series-system rollout status deployment/event-series --timeout=180s
# Ready is not leading: a new install's first leader takes the Lease a lease duration after it starts,
# and tests that ran before would see no series.
lead=''
for _ in $(seq 60); do
  lead="$("${K[@]}" -n event-series-system get lease event-series -o jsonpath='{.spec.holderIdentity}' 2>/dev/null || true)"
  [ -z "$lead" ] || break
  sleep 1
done
[ -n "$lead" ] || { echo "conformance: no replica took the Lease within 60 s" >&2; exit 1; }
echo "conformance: cluster and operator ready in $((SECONDS - started)) s"

# --- 4. the tests ---
flags=(--kubeconfig="$KUBECONFIG" --provider=skeleton --ginkgo.focus="$FOCUS" --ginkgo.no-color
  --kubectl-path="$BIN/kubectl"
  # one node, no cloud: nothing to wait for beyond it; the node's Pods are the operator's
  --num-nodes=1 --allowed-not-ready-nodes=0 --minStartupPods=0 --system-pods-startup-timeout=1m
  --node-schedulable-timeout=2m --ginkgo.timeout=45m --report-dir="$OUT/report")
# shellcheck disable=SC2206
flags+=(${E2E_ARGS:-})
rm -rf "$OUT/report"
mkdir -p "$OUT/report"
echo "conformance: the tests FOCUS selects (--ginkgo.dry-run):"
"$E2E" "${flags[@]}" --ginkgo.dry-run --ginkgo.v --ginkgo.json-report="$OUT/report/dry-run.json" >"$OUT/dry-run.log" 2>&1 || {
  tail -n 40 "$OUT/dry-run.log" >&2
  echo "conformance: the dry run failed ($OUT/dry-run.log)" >&2
  exit 1
}
# specs LIST [STATE]: one line per spec of a ginkgo JSON report: state, seconds, full name.
specs() {
  python3 - "$@" <<'PY'
import json, sys
for suite in json.load(open(sys.argv[1])):
    for s in suite.get("SpecReports") or []:
        if s.get("LeafNodeType") != "It":
            continue
        name = " ".join(s.get("ContainerHierarchyTexts") or []) + " " + s.get("LeafNodeText", "")
        labels = "".join(f" [{l}]" for ls in s.get("ContainerHierarchyLabels") or [] for l in ls)
        labels += "".join(f" [{l}]" for l in s.get("LeafNodeLabels") or [])
        seconds = s.get("RunTime", 0) / 1e9
        if len(sys.argv) < 3 or s.get("State") == sys.argv[2]:
            print(f"{s.get('State'):8} {seconds:7.1f}s  {name}{labels}")
PY
}
specs "$OUT/report/dry-run.json" passed | sed 's/^passed  *[0-9.]*s  /  /'
run_started=$SECONDS
rc=0
"$E2E" "${flags[@]}" --ginkgo.v --ginkgo.json-report="$OUT/report/run.json" >"$OUT/run.log" 2>&1 || rc=$?
ran=$((SECONDS - run_started))
echo "conformance: the run (${ran} s, log $OUT/run.log):"
specs "$OUT/report/run.json" | grep -v '^skipped' | sed 's/^/  /' || true
passed="$(specs "$OUT/report/run.json" passed | wc -l)"
failed="$(specs "$OUT/report/run.json" | grep -cv '^\(passed\|skipped\)' || true)"
echo "conformance: $passed passed, $failed failed"

# --- 5. what the operator did ---
sa="system:serviceaccount:event-series-system:event-series"
# Per test: its namespace (from the report: the framework destroys it in the test's teardown) and
# the operator's writes of series objects there (from the audit log), each before that teardown
# (while the test ran) or after it.
python3 - "$OUT/report/run.json" "$ENVTEST_DIR/audit.log" "$sa" <<'PY' | tee "$OUT/series.txt"
import collections, json, re, sys
report, log, sa = sys.argv[1:4]
def moment(t):
    """An RFC 3339 UTC time comparable as text: seconds and six fraction digits (Go writes up to nine)."""
    m = re.match(r"(.*T\d\d:\d\d:\d\d)(\.\d+)?Z$", t)
    return m.group(1) + (m.group(2) or ".")[:7].ljust(7, "0") if m else t
tests = {}  # namespace -> (test, time of the teardown step)
for suite in json.load(open(report)):
    for s in suite.get("SpecReports") or []:
        if s.get("LeafNodeType") != "It" or s.get("State") == "skipped":
            continue
        for e in s.get("SpecEvents") or []:
            m = re.match(r'Destroying namespace "([^"]+)"', e.get("Message", ""))
            if m:
                name = " ".join(s.get("ContainerHierarchyTexts") or []) + " " + s.get("LeafNodeText", "")
                tests[m.group(1)] = (name, moment(e["TimelineLocation"]["Time"]))
writes = collections.Counter()
for line in open(log):
    try:
        e = json.loads(line)
    except ValueError:
        continue
    ref = e.get("objectRef") or {}
    ns = ref.get("namespace")
    if e.get("user", {}).get("username") != sa or ref.get("apiGroup") != "events.k8s.io" or ns not in tests:
        continue
    when = "during" if moment(e["requestReceivedTimestamp"]) < tests[ns][1] else "after"
    writes[(ns, e.get("verb"), (e.get("responseStatus") or {}).get("code"), when)] += 1
created = 0
for ns, (name, _) in sorted(tests.items(), key=lambda t: t[1][0]):
    mine = sorted((k, n) for k, n in writes.items() if k[0] == ns)
    said = ", ".join(f"{verb} {code} x{n} {when} the test" for (_, verb, code, when), n in mine) or "none"
    print(f"  {ns:14} {name}\n  {'':14}   series writes: {said}")
    created += sum(n for (_, verb, code, _), n in mine if verb == "create" and code == 201)
print(f"conformance: the operator created {created} series objects in the tests' namespaces")
PY
lead="$("${K[@]}" -n event-series-system get lease event-series -o jsonpath='{.spec.holderIdentity}')"
echo "conformance: the leader $lead: its API requests by verb and code, series started and finished, drops:"
"${K[@]}" -n event-series-system logs "$lead" --tail=-1 >"$OUT/operator.log" 2>&1 || true
# /metrics wants a token with the metrics-reader role: a ServiceAccount of this script's.
"${K[@]}" -n event-series-system create serviceaccount conformance-scraper >/dev/null
"${K[@]}" create clusterrolebinding conformance-scraper --clusterrole=event-series-metrics-reader \
  --serviceaccount=event-series-system:conformance-scraper >/dev/null
token="$("${K[@]}" -n event-series-system create token conformance-scraper)"
ip="$("${K[@]}" -n event-series-system get pod "$lead" -o jsonpath='{.status.podIP}')"
curl -sSk --max-time 10 -H "Authorization: Bearer $token" "https://$ip:8443/metrics" \
  | grep '^event_series_\(api_requests_total\|series_started_total\|series_finished_total\|dropped_total\)' \
  | sed 's/^/  /' || true
echo "conformance: its last warnings and errors ($OUT/operator.log):"
grep -E '"level":"(WARN|ERROR)"' "$OUT/operator.log" | tail -n 20 | cut -c1-240 | sed 's/^/  /' || true
grep -q 'created [1-9]' "$OUT/series.txt" || { echo "conformance: no series object of the operator in the tests' namespaces" >&2; rc=1; }
[ "$rc" = 0 ] || exit "$rc"
