#!/usr/bin/env bash
# Builds the runtime images without a Docker engine (buildah, vfs storage, chroot isolation),
# as OCI archives in target/image:
#   event-series.oci.tar  ghcr.io/event-series/event-series:v<crate version> (the tag config/default
#                         uses): the release binary linked static, FROM scratch, uid 65532
#   pause.oci.tar         the test node's sandbox image ($PAUSE_IMAGE), from tests/envtest/cmd/pause
# An archive is rebuilt only when its binary changed. Needs buildah (Debian: apt-get install buildah).
#
# `hack/image.sh --binary NAME TAG FILE USER [CMD...]` builds only target/image/NAME.oci.tar: the
# static binary FILE as /NAME, FROM scratch, run as USER, entrypoint /NAME, default arguments CMD:
# the images of other programs the node tests run as Pods (Prometheus for tests/scrape, agnhost for
# `just conformance`), whose registries the node cannot reach.
set -euo pipefail
# The product is built the same whatever Kubernetes minor a test runs on (ENVTEST_MINOR, the matrix):
# its helper binaries (pause, kubectl for kustomize) are the newest release's.
unset ENVTEST_MINOR

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source-path=SCRIPTDIR source=envtest-lib.sh
. "$ROOT/hack/envtest-lib.sh"
cd "$ROOT"

command -v buildah >/dev/null 2>&1 || { echo "image: buildah not found (Debian: apt-get install buildah)" >&2; exit 1; }
OUT="$ROOT/target/image"
mkdir -p "$OUT"
binary=() user='' cmd=''
if [ "${1:-}" = --binary ]; then
  [ $# -ge 5 ] && [ -x "$4" ] || { echo "usage: hack/image.sh --binary NAME TAG FILE USER [CMD...] (FILE an executable)" >&2; exit 2; }
  binary=("$2" "$3" "$4")
  user="$5"
  shift 5
  # CMD as the exec form's JSON array (plain words: no quotes or backslashes to escape).
  [ $# = 0 ] || cmd="$(printf '"%s", ' "$@")"
fi
version="$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n1)"
TAG="ghcr.io/event-series/event-series:v$version"

# image NAME TAG BINARY: $OUT/NAME.oci.tar with BINARY as /event-series, /pause or /NAME.
image() {
  local name="$1" tag="$2" bin="$3" ctx
  if [ -s "$OUT/$name.oci.tar" ] && [ "$OUT/$name.oci.tar" -nt "$bin" ] && [ "$OUT/$name.oci.tar" -nt hack/image.Containerfile ] \
    && [ "$(cat "$OUT/$name.recipe" 2>/dev/null)" = "$tag $user $cmd" ]; then
    echo "image: $OUT/$name.oci.tar is up to date ($tag)"
    return
  fi
  ctx="$(mktemp -d "$OUT/context.XXXXXX")"
  case "$name" in
    pause)
      install -m 0755 -s "$bin" "$ctx/pause"
      printf 'FROM scratch\nCOPY pause /pause\nUSER 65535:65535\nENTRYPOINT ["/pause"]\n' >"$ctx/Containerfile" ;;
    event-series)
      install -m 0755 -s "$bin" "$ctx/event-series"   # without its symbol table
      cp hack/image.Containerfile "$ctx/Containerfile" ;;
    *)
      install -m 0755 "$bin" "$ctx/$name"
      printf 'FROM scratch\nCOPY %s /%s\nUSER %s\nENTRYPOINT ["/%s"]\n' "$name" "$name" "$user" "$name" >"$ctx/Containerfile"
      [ -z "$cmd" ] || printf 'CMD [%s]\n' "${cmd%, }" >>"$ctx/Containerfile" ;;
  esac
  "${B[@]}" bud --quiet --isolation chroot --timestamp 0 -f "$ctx/Containerfile" -t "$tag" "$ctx" >/dev/null
  rm -f "$OUT/$name.oci.tar"
  "${B[@]}" push --quiet "$tag" "oci-archive:$OUT/$name.oci.tar:$tag"
  echo "$tag $user $cmd" >"$OUT/$name.recipe"   # what it was built with (the check above)
  "${B[@]}" rmi --force "$tag" >/dev/null 2>&1 || true
  rm -rf "$ctx"
  echo "image: $OUT/$name.oci.tar ($tag, $(du -h "$OUT/$name.oci.tar" | cut -f1))"
}

B=(buildah --root "$OUT/storage" --runroot "$OUT/run" --storage-driver vfs)
if [ ${#binary[@]} -gt 0 ]; then
  image "${binary[@]}"
  exit 0
fi

# Static glibc (ring and everything else link fine); RUSTFLAGS apply to the target only, not to
# build scripts and proc macros, because --target is given.
RUSTFLAGS="-C target-feature=+crt-static" \
  cargo build --release --locked --bin event-series --target x86_64-unknown-linux-gnu
bash hack/build-envtest.sh pause

target="${CARGO_TARGET_DIR:-$ROOT/target}"
case "$target" in /*) ;; *) target="$ROOT/$target" ;; esac
image event-series "$TAG" "$target/x86_64-unknown-linux-gnu/release/event-series"
image pause "$PAUSE_IMAGE" "$BIN/pause"
