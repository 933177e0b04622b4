#!/usr/bin/env bash
# Builds the tools the manifest tests need, from their Go modules, into target/tools/bin:
#   helm      (helm.sh/helm/v3)                     helm lint, helm template of charts/event-series
#   helm4     (helm.sh/helm/v4)                     the same checks and the install test with Helm 4
#   promtool  (github.com/prometheus/prometheus)    promtool check rules of config/prometheus
#   alertmanager (github.com/prometheus/alertmanager) the loop alerts' end-to-end tests and the demo
#   helm-unittest (github.com/helm-unittest/helm-unittest) the chart's template unit tests (charts/event-series/tests)
#   kwok      (sigs.k8s.io/kwok)                     simulated nodes and pods for bench/scale.sh (only when named)
#   cargo-cyclonedx (crates.io)                      the release's SBOM, hack/release.sh (only when named)
# A tool is rebuilt only when its version below changes, so a second run takes milliseconds.
# Usage: hack/tools.sh [name...]   (default: helm, helm4, helm-unittest, promtool and alertmanager)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BIN="$ROOT/target/tools/bin"
declare -A MODULE=(
  [helm]="helm.sh/helm/v3/cmd/helm@v3.22.0"
  [helm4]="helm.sh/helm/v4/cmd/helm@v4.3.1"
  [helm-unittest]="github.com/helm-unittest/helm-unittest/cmd/helm-unittest@v1.1.2"
  [promtool]="github.com/prometheus/prometheus/cmd/promtool@v0.316.0"
  [kwok]="sigs.k8s.io/kwok/cmd/kwok@v0.8.0"
  # v0.32 and later embed a web UI their module zips do not hold (go install fails on ui/app/dist).
  [alertmanager]="github.com/prometheus/alertmanager/cmd/alertmanager@v0.31.1"
)

command -v go >/dev/null 2>&1 || export PATH="$PATH:/usr/local/go/bin"
command -v go >/dev/null 2>&1 || { echo "tools: go not found (need Go >= 1.26)" >&2; exit 1; }
mkdir -p "$BIN"

names=("$@")
[ ${#names[@]} -gt 0 ] || names=(helm helm4 helm-unittest promtool alertmanager)
for name in "${names[@]}"; do
  if [ "$name" = cargo-cyclonedx ]; then
    # A Rust tool: cargo install at a pinned version, into target/tools/bin.
    crate="cargo-cyclonedx@0.5.9"
    stamp="$BIN/.$name.version"
    if [ ! -x "$BIN/$name" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$crate" ]; then
      echo "tools: building $name ($crate)" >&2
      cargo install --locked --quiet --root "$ROOT/target/tools" "$crate"
      echo "$crate" >"$stamp"
    fi
    continue
  fi
  module="${MODULE[$name]:-}"
  [ -n "$module" ] || { echo "tools: unknown tool $name" >&2; exit 1; }
  stamp="$BIN/.$name.version"
  if [ -x "$BIN/$name" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$module" ]; then
    continue
  fi
  echo "tools: building $name ($module)" >&2
  started=$SECONDS
  # The local Go, no toolchain download; CGO off: static binaries that need no C toolchain.
  tmp="$BIN/.$name.d"
  rm -rf "$tmp"
  if [ "$name" = helm-unittest ]; then
    # `go install pkg@version` refuses a module whose go.mod has replace directives (this one
    # has): build it as the main module, in a copy of its module tree.
    path="${module%@*}"; mod="${path%/cmd/*}"
    dir="$(go mod download -json "$mod@${module#*@}" | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')"
    cp -r "$dir" "$tmp"
    chmod -R u+w "$tmp"
    (cd "$tmp" && GOTOOLCHAIN=local CGO_ENABLED=0 go build -trimpath -o "$BIN/$name" "./${path#"$mod"/}")
  else
    # Installed under its own name: the module's binary name (helm4's is "helm") may be another tool's.
    GOBIN="$tmp" GOTOOLCHAIN=local CGO_ENABLED=0 go install "$module"
    mv "$tmp/$(basename "${module%@*}")" "$BIN/$name"
  fi
  rm -rf "$tmp"
  echo "$module" >"$stamp"
  echo "tools: $name built in $((SECONDS - started)) s" >&2
done
