#!/usr/bin/env bash
# Builds the envtest binaries from the Go module in tests/envtest into target/envtest/bin:
# kube-apiserver, etcd, kubectl, emitter (the default), and for the node cluster
# (hack/cluster-up-node.sh) kube-scheduler, kube-controller-manager, kubelet, kube-proxy. A binary is rebuilt only
# when it is missing or older than go.mod, go.sum, its own cmd/<name> sources or
# this script (which holds the build flags), so a second run takes milliseconds.
#
# Where KUBEBUILDER_ASSETS names a directory with kube-apiserver, etcd and kubectl (setup-envtest's
# binaries, for someone who has them already), those are copied instead of built; the rest is built.
#
# ENVTEST_MINOR=1.34 (a folder of tests/envtest/minors, written by hack/envtest-minor.sh) builds
# kube-apiserver, etcd and kubectl of that older minor, from the same sources with `go build -modfile`,
# into target/envtest/bin-1.34 (the test matrix); the emitter and the node's binaries are the newest's.
#
# Every binary built is also kept outside the clone, in $EVENT_SERIES_CACHE/envtest (default
# ${XDG_CACHE_HOME:-~/.cache}/event-series/envtest), under a key made of its module file, go.sum, its
# cmd/<name> sources, this script and the Go version: a fresh clone on this machine takes it from
# there in milliseconds instead of building (and linking) it again. Entries unused for 30 days are
# removed; an empty EVENT_SERIES_CACHE (or XDG_CACHE_HOME) gives a cold build. --force builds regardless.
#
# Usage: hack/build-envtest.sh [--force] [name...]   (default: the first four; "node" adds the node four)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
MOD="$ROOT/tests/envtest"
BIN="$ROOT/target/envtest/bin"
ALL=(kube-apiserver etcd kubectl emitter)
MINOR="${ENVTEST_MINOR:-}"
modfile=()
if [ -n "$MINOR" ]; then
  [ -f "$MOD/minors/$MINOR/go.mod" ] || {
    have=("$MOD"/minors/*/go.mod)
    have=("${have[@]%/go.mod}")
    echo "build-envtest: no module file for Kubernetes $MINOR (have: ${have[*]##*/}); write one with hack/envtest-minor.sh" >&2
    exit 2
  }
  modfile=("-modfile=$MOD/minors/$MINOR/go.mod")
  BIN="$ROOT/target/envtest/bin-$MINOR"
fi
NODE=(kube-scheduler kube-controller-manager kubelet kube-proxy pause)

force=0
names=()
for a in "$@"; do
  case "$a" in
    --force) force=1 ;;
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    node) names+=("${ALL[@]}" "${NODE[@]}") ;;
    *) names+=("$a") ;;
  esac
done
[ ${#names[@]} -gt 0 ] || names=("${ALL[@]}")
if [ -n "$MINOR" ]; then
  # The emitter is a client of the newest release; the node is built for the newest only.
  kept=()
  for n in "${names[@]}"; do
    case "$n" in
      kube-apiserver | etcd | kubectl) kept+=("$n") ;;
      emitter)
        if [ "$force" = 1 ]; then
          ENVTEST_MINOR='' bash "$ROOT/hack/build-envtest.sh" --force emitter
        else
          ENVTEST_MINOR='' bash "$ROOT/hack/build-envtest.sh" emitter
        fi ;;
      *) echo "build-envtest: $n is built for the newest release only (unset ENVTEST_MINOR)" >&2; exit 2 ;;
    esac
  done
  names=("${kept[@]}")
  [ ${#names[@]} -gt 0 ] || exit 0
fi

command -v go >/dev/null 2>&1 || export PATH="$PATH:/usr/local/go/bin"
command -v go >/dev/null 2>&1 || { echo "build-envtest: go not found (need Go >= 1.26)" >&2; exit 1; }

mkdir -p "$BIN"

# stale NAME -> 0 when BIN/NAME must be (re)built.
stale() {
  local out="$BIN/$1" f
  [ "$force" = 1 ] && return 0
  [ -x "$out" ] || return 0
  local mod="$MOD/go.mod"
  [ -n "$MINOR" ] && mod="$MOD/minors/$MINOR/go.mod"
  for f in "$mod" "${mod%.mod}.sum" "$MOD/cmd/$1"/*.go "$ROOT/hack/build-envtest.sh"; do
    [ "$f" -nt "$out" ] && return 0
  done
  return 1
}

# Nothing to do: no lock taken (another run may be building other binaries into BIN meanwhile, the
# node's in the background of hack/test.sh, say).
if [ -z "${KUBEBUILDER_ASSETS:-}" ]; then
  fresh=1
  for n in "${names[@]}"; do
    if stale "$n"; then fresh=0; fi
  done
  [ "$fresh" = 0 ] || exit 0
fi

# Several clusters may start at once: serialize builds and re-check under the lock.
exec 9>"$BIN/.build.lock"
flock 9

# from_assets NAME -> 0 when NAME was taken from KUBEBUILDER_ASSETS (a copy, not a link: the
# cluster scripts recognise their servers by the path of their executable).
from_assets() {
  local src="${KUBEBUILDER_ASSETS:-}/$1"
  case "$1" in kube-apiserver | etcd | kubectl) ;; *) return 1 ;; esac
  [ -z "$MINOR" ] || return 1
  [ -n "${KUBEBUILDER_ASSETS:-}" ] && [ -x "$src" ] || return 1
  if ! cmp -s "$src" "$BIN/$1"; then
    cp "$src" "$BIN/$1.tmp" && mv "$BIN/$1.tmp" "$BIN/$1"
    echo "build-envtest: $1 from KUBEBUILDER_ASSETS ($src)" >&2
  fi
}

CACHE="${EVENT_SERIES_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/event-series}/envtest"
go_version=""
# entry NAME -> the cache entry of NAME as the inputs stand now (a directory holding the binary).
entry() {
  local mod="$MOD/go.mod"
  [ -n "$MINOR" ] && mod="$MOD/minors/$MINOR/go.mod"
  [ -n "$go_version" ] || go_version="$(GOTOOLCHAIN=local go env GOVERSION)"
  echo "$CACHE/$1-$({ echo "$go_version"; cat "$mod" "${mod%.mod}.sum" "$ROOT/hack/build-envtest.sh"
    for f in "$MOD/cmd/$1"/*.go; do echo "${f##*/}"; cat "$f"; done; } | sha256sum | cut -c1-16)"
}

# from_cache NAME -> 0 when BIN/NAME was taken from the cache (a hard link where the file systems
# allow; the file is never written in place: a build removes it first).
from_cache() {
  local e
  [ "$force" = 0 ] || return 1
  e="$(entry "$1")"
  [ -x "$e/$1" ] || return 1
  rm -f "$BIN/$1"
  ln "$e/$1" "$BIN/$1" 2>/dev/null || cp "$e/$1" "$BIN/$1"
  touch "$BIN/$1" "$e"
  echo "build-envtest: $1 from the cache ($e)" >&2
}

# to_cache NAME: keeps the fresh BIN/NAME in the cache (another clone building the same entry at
# the same time: the first one in place stays).
to_cache() {
  local e tmp
  e="$(entry "$1")"
  [ -x "$e/$1" ] && return 0
  mkdir -p "$CACHE"
  tmp="$(mktemp -d "$e.tmp.XXXXXX")" && chmod 755 "$tmp"
  ln "$BIN/$1" "$tmp/$1" 2>/dev/null || cp "$BIN/$1" "$tmp/$1"
  mv -T "$tmp" "$e" 2>/dev/null || rm -rf "$tmp"
}

todo=()
for n in "${names[@]}"; do
  if from_assets "$n"; then continue; fi
  [ -d "$MOD/cmd/$n" ] || { echo "build-envtest: unknown binary $n (have: ${ALL[*]} ${NODE[*]})" >&2; exit 2; }
  if stale "$n" && ! from_cache "$n"; then todo+=("$n"); fi
done
[ ${#todo[@]} -gt 0 ] || exit 0
# Entries nobody used for 30 days (older releases, older flags) go.
find "$CACHE" -mindepth 1 -maxdepth 1 -type d -mtime +30 -exec rm -rf {} + 2>/dev/null || true

cd "$MOD"
# Stamp the Kubernetes version the way the upstream release build does, so that
# /version and `kubectl version` report the release instead of v0.0.0-master.
kver="$(go list "${modfile[@]}" -m -f '{{.Version}}' k8s.io/kubernetes)"
kdate="$(go list "${modfile[@]}" -m -f '{{.Time}}' k8s.io/kubernetes | cut -c1-19 | tr ' ' T)Z"
major="${kver#v}"; major="${major%%.*}"
minor="${kver#v*.}"; minor="${minor%%.*}"
ldflags="-s -w"
for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags+=" -X $p.gitVersion=$kver -X $p.gitMajor=$major -X $p.gitMinor=$minor"
  ldflags+=" -X $p.gitTreeState=clean -X $p.buildDate=$kdate -X $p.gitCommit="
done

pkgs=()
for n in "${todo[@]}"; do pkgs+=("./cmd/$n"); done
echo "build-envtest: building ${todo[*]} (Kubernetes $kver) into $BIN" >&2
start=$SECONDS
# -mod=readonly: go.mod/go.sum are committed; missing modules come from GOPROXY.
# CGO_ENABLED=0 as in the upstream release build: static binaries, no C toolchain.
# The outputs may be hard links into the cache: never written in place.
for n in "${todo[@]}"; do rm -f "$BIN/$n"; done
CGO_ENABLED=0 go build "${modfile[@]}" -mod=readonly -trimpath -buildvcs=false -ldflags "$ldflags" -o "$BIN/" "${pkgs[@]}"
# go build leaves an up-to-date output untouched only in some cases; make the
# staleness check above reliable.
for n in "${todo[@]}"; do touch "$BIN/$n"; to_cache "$n"; done
echo "build-envtest: done in $((SECONDS - start))s" >&2
