#!/usr/bin/env bash
# Writes the module file of one older Kubernetes minor for the test matrix (`just test-matrix`):
# tests/envtest/minors/<major.minor>/go.mod and go.sum, used by hack/build-envtest.sh with
# `go build -modfile` on the same sources in tests/envtest/cmd. The staging modules are pinned to
# the release (read from k8s.io/kubernetes' own go.mod, since the set changes between minors), and
# etcd to the version the apiserver's module graph pins. Run it once per release; the files are
# committed.
#
# Usage: hack/envtest-minor.sh v1.34.4
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
kver="${1:?usage: hack/envtest-minor.sh vX.Y.Z}"
case "$kver" in v1.*.*) ;; *) echo "envtest-minor: want a release like v1.34.4, got $kver" >&2; exit 2 ;; esac
minor="${kver#v}"; minor="${minor%.*}"
staging="v0.${kver#v1.}"
command -v go >/dev/null 2>&1 || export PATH="$PATH:/usr/local/go/bin"

upstream="$(go mod download -json "k8s.io/kubernetes@$kver" | python3 -c 'import json,sys; print(json.load(sys.stdin)["GoMod"])')"
etcd="$(awk '$1 == "go.etcd.io/etcd/server/v3" { print $2; exit }' "$upstream")"
[ -n "$etcd" ] || { echo "envtest-minor: no etcd server version in $upstream" >&2; exit 1; }
mapfile -t mods < <(awk '$2 == "=>" && $3 ~ /^\.\/staging\// { print $1 }' "$upstream" | sort -u)

out="$ROOT/tests/envtest/minors/$minor"
mkdir -p "$out"
{
  printf 'module event-series/envtest\n\ngo 1.26.0\n\ngodebug default=go1.26\n\n'
  printf 'require (\n\tgo.etcd.io/etcd/server/v3 %s\n\tk8s.io/api %s\n\tk8s.io/apimachinery %s\n' "$etcd" "$staging" "$staging"
  printf '\tk8s.io/client-go %s\n\tk8s.io/component-base %s\n\tk8s.io/kubectl v0.0.0\n\tk8s.io/kubernetes %s\n)\n\n' \
    "$staging" "$staging" "$kver"
  printf 'replace (\n'
  for m in "${mods[@]}"; do printf '\t%s => %s %s\n' "$m" "$m" "$staging"; done
  printf ')\n'
} >"$out/go.mod"
: >"$out/go.sum"
cd "$ROOT/tests/envtest"
# -e: the node's and the emitter's sources are written for the newest release; the matrix builds
# only kube-apiserver, etcd and kubectl from this file, so an import those others miss is no error.
go mod tidy -e -modfile="$out/go.mod"
echo "envtest-minor: $out/go.mod (Kubernetes $kver, etcd $etcd)"
