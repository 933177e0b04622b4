#!/usr/bin/env bash
# Builds the runtime images without a Docker engine (buildah, vfs storage, chroot isolation),
# as OCI archives in target/image:
#   event-series.oci.tar  ghcr.io/event-series/event-series:v<crate version> (the tag config/default
#                         uses): the release binary linked static, FROM scratch, uid 65532
#   pause.oci.tar         the test node's sandbox image ($PAUSE_IMAGE), from tests/envtest/cmd/pause
# An archive is rebuilt only when its binary changed. Needs buildah (Debian: apt-get install buildah).
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
version="$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n1)"
TAG="ghcr.io/event-series/event-series:v$version"

# Static glibc (ring and everything else link fine); RUSTFLAGS apply to the target only, not to
# build scripts and proc macros, because --target is given.
RUSTFLAGS="-C target-feature=+crt-static" \
  cargo build --release --locked --bin event-series --target x86_64-unknown-linux-gnu
bash hack/build-envtest.sh pause

B=(buildah --root "$OUT/storage" --runroot "$OUT/run" --storage-driver vfs)

# image NAME TAG BINARY: $OUT/NAME.oci.tar with BINARY as /event-series or /pause.
image() {
  local name="$1" tag="$2" bin="$3" ctx
  if [ -s "$OUT/$name.oci.tar" ] && [ "$OUT/$name.oci.tar" -nt "$bin" ] && [ "$OUT/$name.oci.tar" -nt hack/image.Containerfile ]; then
    echo "image: $OUT/$name.oci.tar is up to date ($tag)"
    return
  fi
  ctx="$(mktemp -d "$OUT/context.XXXXXX")"
  if [ "$name" = pause ]; then
    install -m 0755 -s "$bin" "$ctx/pause"
    printf 'FROM scratch\nCOPY pause /pause\nUSER 65535:65535\nENTRYPOINT ["/pause"]\n' >"$ctx/Containerfile"
  else
    install -m 0755 -s "$bin" "$ctx/event-series"   # without its symbol table
    cp hack/image.Containerfile "$ctx/Containerfile"
  fi
  "${B[@]}" bud --quiet --isolation chroot --timestamp 0 -f "$ctx/Containerfile" -t "$tag" "$ctx" >/dev/null
  rm -f "$OUT/$name.oci.tar"
  "${B[@]}" push --quiet "$tag" "oci-archive:$OUT/$name.oci.tar:$tag"
  "${B[@]}" rmi --force "$tag" >/dev/null 2>&1 || true
  rm -rf "$ctx"
  echo "image: $OUT/$name.oci.tar ($tag, $(du -h "$OUT/$name.oci.tar" | cut -f1))"
}
target="${CARGO_TARGET_DIR:-$ROOT/target}"
case "$target" in /*) ;; *) target="$ROOT/$target" ;; esac
image event-series "$TAG" "$target/x86_64-unknown-linux-gnu/release/event-series"
image pause "$PAUSE_IMAGE" "$BIN/pause"
