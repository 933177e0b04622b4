#!/usr/bin/env bash
# Builds the tools the manifest tests need, from their Go modules, into target/tools/bin:
#   helm      (helm.sh/helm/v3)                     helm lint, helm template of charts/event-series
#   helm4     (helm.sh/helm/v4)                     the same checks and the install test with Helm 4
#   promtool  (github.com/prometheus/prometheus)    promtool check rules of config/prometheus
#   alertmanager (github.com/prometheus/alertmanager) the loop alerts' end-to-end tests and the demo
#   prometheus (github.com/prometheus/prometheus)  a real Prometheus Pod on the node for tests/scrape (only when named)
#   helm-unittest (github.com/helm-unittest/helm-unittest) the chart's template unit tests (charts/event-series/tests)
#   kwok      (sigs.k8s.io/kwok)                     simulated nodes and pods for bench/scale.sh (only when named)
#   cargo-cyclonedx (crates.io)                      the release's SBOM, hack/release.sh (only when named)
# Only the command a test runs is built, without symbol tables; promtool without the optional
# service discoveries (Prometheus' remove_all_sd build tag: the cloud SDKs are most of its build,
# and rule checks use none of them), prometheus with Kubernetes' only (enable_kubernetes_sd), the one
# a ServiceMonitor's scrape configuration uses.
#
# Each build is kept outside the clone, in $EVENT_SERIES_CACHE/tools (default
# ${XDG_CACHE_HOME:-~/.cache}/event-series/tools), under a key made of the module, its version, the
# build flags and the Go version: a fresh clone on this machine links the tools from there in
# milliseconds, and a tool is built again only when one of those changes. Entries unused for 30
# days are removed. An empty EVENT_SERIES_CACHE (or XDG_CACHE_HOME) gives a cold build.
# Usage: hack/tools.sh [name...]   (default: helm, helm4, helm-unittest, promtool and alertmanager)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BIN="$ROOT/target/tools/bin"
CACHE="${EVENT_SERIES_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/event-series}/tools"
declare -A MODULE=(
  [helm]="helm.sh/helm/v3/cmd/helm@v3.22.0"
  [helm4]="helm.sh/helm/v4/cmd/helm@v4.3.1"
  [helm-unittest]="github.com/helm-unittest/helm-unittest/cmd/helm-unittest@v1.1.2"
  [promtool]="github.com/prometheus/prometheus/cmd/promtool@v0.316.0"
  # The same release as promtool (one module version to download).
  [prometheus]="github.com/prometheus/prometheus/cmd/prometheus@v0.316.0"
  [kwok]="sigs.k8s.io/kwok/cmd/kwok@v0.8.0"
  # v0.32 and later embed a web UI their module zips do not hold (go install fails on ui/app/dist).
  [alertmanager]="github.com/prometheus/alertmanager/cmd/alertmanager@v0.31.1"
)
# Build tags per tool (none by default).
declare -A TAGS=([promtool]="remove_all_sd" [prometheus]="remove_all_sd,enable_kubernetes_sd")
# -s -w: no symbol table, no DWARF (less to link); the tests only run the tools.
LDFLAGS="-s -w"

mkdir -p "$BIN" "$CACHE"

# install_from ENTRY NAME: BIN/NAME from the cache entry (a hard link where the file systems allow).
install_from() {
  rm -f "$BIN/$2"
  ln "$1/$2" "$BIN/$2" 2>/dev/null || cp "$1/$2" "$BIN/$2"
  touch "$1"   # used: kept by the pruning below
}

# build_go NAME MODULE TAGS DEST: the Go command MODULE (path@version) as DEST/NAME.
build_go() {
  local name="$1" module="$2" tags="$3" dest="$4" path mod dir src
  command -v go >/dev/null 2>&1 || export PATH="$PATH:/usr/local/go/bin"
  command -v go >/dev/null 2>&1 || { echo "tools: go not found (need Go >= 1.26)" >&2; exit 1; }
  # The local Go, no toolchain download; CGO off: static binaries that need no C toolchain.
  local flags=(-trimpath "-ldflags=$LDFLAGS")
  [ -z "$tags" ] || flags+=("-tags=$tags")
  if [ "$name" = helm-unittest ]; then
    # `go install pkg@version` refuses a module whose go.mod has replace directives (this one
    # has): build it as the main module, in a copy of its module tree.
    path="${module%@*}"; mod="${path%/cmd/*}"
    dir="$(GOTOOLCHAIN=local go mod download -json "$mod@${module#*@}" | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')"
    src="$dest/src"
    cp -r "$dir" "$src"
    chmod -R u+w "$src"
    (cd "$src" && GOTOOLCHAIN=local CGO_ENABLED=0 go build "${flags[@]}" -o "$dest/$name" "./${path#"$mod"/}")
    rm -rf "$src"
  else
    # Installed under its own name: the module's binary name (helm4's is "helm") may be another tool's.
    GOBIN="$dest/gobin" GOTOOLCHAIN=local CGO_ENABLED=0 go install "${flags[@]}" "$module"
    mv "$dest/gobin/$(basename "${module%@*}")" "$dest/$name"
    rmdir "$dest/gobin"
  fi
}

# build_crate NAME CRATE DEST: a Rust tool, cargo install at a pinned version, as DEST/NAME.
build_crate() {
  cargo install --locked --quiet --root "$3/root" "$2"
  mv "$3/root/bin/$1" "$3/$1"
  rm -rf "$3/root"
}

# Entries nobody used for 30 days (old versions) go.
find "$CACHE" -mindepth 2 -maxdepth 2 -type d -mtime +30 -exec rm -rf {} + 2>/dev/null || true

go_version=""
names=("$@")
[ ${#names[@]} -gt 0 ] || names=(helm helm4 helm-unittest promtool alertmanager)
for name in "${names[@]}"; do
  if [ "$name" = cargo-cyclonedx ]; then
    module="cargo-cyclonedx@0.5.9"
    recipe="$module $(rustc --version 2>/dev/null || echo rustc)"
  else
    module="${MODULE[$name]:-}"
    [ -n "$module" ] || { echo "tools: unknown tool $name" >&2; exit 1; }
    if [ -z "$go_version" ]; then
      command -v go >/dev/null 2>&1 || export PATH="$PATH:/usr/local/go/bin"
      go_version="$(GOTOOLCHAIN=local go env GOVERSION 2>/dev/null || echo go)"
    fi
    recipe="$module tags=${TAGS[$name]:-} ldflags=$LDFLAGS $go_version"
  fi
  # BIN/.NAME.recipe: what BIN/NAME was built from; BIN/.NAME.version: its module and version
  # (bench/scale.sh records kwok's).
  if [ -x "$BIN/$name" ] && [ "$(cat "$BIN/.$name.recipe" 2>/dev/null)" = "$recipe" ]; then
    continue
  fi
  key="${module##*@}-$(printf '%s' "$recipe" | sha256sum | cut -c1-16)"
  entry="$CACHE/$name/$key"
  if [ ! -x "$entry/$name" ]; then
    mkdir -p "$CACHE/$name"
    # One build per entry on this machine: a second run waits, then finds it.
    exec 8>"$CACHE/$name/.lock"
    flock 8
    if [ ! -x "$entry/$name" ]; then
      echo "tools: building $name ($recipe) into $entry" >&2
      started=$SECONDS
      tmp="$(mktemp -d "$entry.tmp.XXXXXX")" && chmod 755 "$tmp"
      trap 'rm -rf "$tmp"' EXIT
      if [ "$name" = cargo-cyclonedx ]; then
        build_crate "$name" "$module" "$tmp"
      else
        build_go "$name" "$module" "${TAGS[$name]:-}" "$tmp"
      fi
      printf '%s\n' "$recipe" >"$tmp/recipe"
      rm -rf "$entry"
      mv -T "$tmp" "$entry"
      trap - EXIT
      echo "tools: $name built in $((SECONDS - started)) s" >&2
    fi
    exec 8>&-
  fi
  install_from "$entry" "$name"
  printf '%s\n' "$module" >"$BIN/.$name.version"
  printf '%s\n' "$recipe" >"$BIN/.$name.recipe"
done
