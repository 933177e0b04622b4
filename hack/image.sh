#!/usr/bin/env bash
# Builds the runtime images without a Docker engine (buildah, vfs storage, chroot isolation),
# as OCI archives in IMAGE_DIR (default target/image):
#   event-series.oci.tar  ghcr.io/event-series/event-series:v<crate version> (the tag config/default
#                         uses): the release binary linked static, FROM scratch, uid 65532; for the
#                         platforms of IMAGE_PLATFORMS (default: the host's, e.g. "linux/amd64"): one
#                         platform gives one image (what the node imports), several an OCI image index
#                         of them (`just release`: "linux/amd64 linux/arm64", hack/build-static.sh
#                         cross-compiles the binaries)
#   pause.oci.tar         the test node's sandbox image ($PAUSE_IMAGE), from tests/envtest/cmd/pause
# An archive is rebuilt only when one of its binaries changed, or its platforms.
# Needs buildah (Debian: apt-get install buildah).
#
# `hack/image.sh --binary NAME TAG FILE USER [CMD...]` builds only $IMAGE_DIR/NAME.oci.tar, for the
# host's platform: the static binary FILE as /NAME, FROM scratch, run as USER, entrypoint /NAME,
# default arguments CMD: the images of other programs the node tests run as Pods (Prometheus for
# tests/scrape, agnhost for `just conformance`), whose registries the node cannot reach.
set -euo pipefail
# The product is built the same whatever Kubernetes minor a test runs on (ENVTEST_MINOR, the matrix):
# its helper binaries (pause, kubectl for kustomize) are the newest release's.
unset ENVTEST_MINOR

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source-path=SCRIPTDIR source=envtest-lib.sh
. "$ROOT/hack/envtest-lib.sh"
cd "$ROOT"

command -v buildah >/dev/null 2>&1 || { echo "image: buildah not found (Debian: apt-get install buildah)" >&2; exit 1; }
OUT="${IMAGE_DIR:-$ROOT/target/image}"
case "$OUT" in /*) ;; *) OUT="$ROOT/$OUT" ;; esac
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

host_platform() {
  case "$(uname -m)" in
    x86_64) echo linux/amd64 ;;
    aarch64 | arm64) echo linux/arm64 ;;
    *) echo "image: no image platform for $(uname -m)" >&2; exit 1 ;;
  esac
}
B=(buildah --root "$OUT/storage" --runroot "$OUT/run" --storage-driver vfs)

# fresh NAME STAMP FILE...: whether $OUT/NAME.oci.tar is newer than every FILE and was built for STAMP.
fresh() {
  local archive="$OUT/$1.oci.tar" stamp="$2" f
  shift 2
  [ -s "$archive" ] && [ "$(cat "$OUT/$1.built-for" 2>/dev/null)" = "$stamp" ] || return 1
  for f in "$@" hack/image.Containerfile; do [ "$archive" -nt "$f" ] || return 1; done
}

# context BINARY NAME PLATFORM: a build context with BINARY as /NAME (without its symbol table: the
# cross binutils strip another architecture's) and its Containerfile; prints its path.
context() {
  local ctx strip=strip
  ctx="$(mktemp -d "$OUT/context.XXXXXX")"
  [ "$3" = "$(host_platform)" ] || [ "$3" != linux/arm64 ] || strip=aarch64-linux-gnu-strip
  case "$2" in
    pause)
      install -m 0755 -s --strip-program="$strip" "$1" "$ctx/pause"
      printf 'FROM scratch\nCOPY pause /pause\nUSER 65535:65535\nENTRYPOINT ["/pause"]\n' >"$ctx/Containerfile" ;;
    event-series)
      install -m 0755 -s --strip-program="$strip" "$1" "$ctx/event-series"
      cp hack/image.Containerfile "$ctx/Containerfile" ;;
    *)
      install -m 0755 "$1" "$ctx/$2"
      printf 'FROM scratch\nCOPY %s /%s\nUSER %s\nENTRYPOINT ["/%s"]\n' "$2" "$2" "$user" "$2" >"$ctx/Containerfile"
      [ -z "$cmd" ] || printf 'CMD [%s]\n' "${cmd%, }" >>"$ctx/Containerfile" ;;
  esac
  echo "$ctx"
}

# image NAME TAG PLATFORM=BINARY...: $OUT/NAME.oci.tar, one image, or an index of one per platform.
image() {
  local name="$1" tag="$2" stamp shown ctx p bin list="localhost/$1-index:build" built=()
  shift 2
  stamp="$* $user $cmd" shown="${*%%=*}"
  if fresh "$name" "$stamp" "${@#*=}"; then
    echo "image: $OUT/$name.oci.tar is up to date ($tag, $shown)"
    return
  fi
  rm -f "$OUT/$name.oci.tar"
  if [ $# = 1 ]; then
    ctx="$(context "${1#*=}" "$name" "${1%%=*}")"
    "${B[@]}" bud --quiet --isolation chroot --timestamp 0 --platform "${1%%=*}" -f "$ctx/Containerfile" -t "$tag" "$ctx" >/dev/null
    "${B[@]}" push --quiet "$tag" "oci-archive:$OUT/$name.oci.tar:$tag"
    "${B[@]}" rmi --force "$tag" >/dev/null 2>&1 || true
    rm -rf "$ctx"
  else
    "${B[@]}" manifest rm "$list" >/dev/null 2>&1 || true
    "${B[@]}" manifest create "$list" >/dev/null
    for p in "$@"; do
      bin="${p#*=}" p="${p%%=*}"
      ctx="$(context "$bin" "$name" "$p")"
      # FROM scratch and COPY only: another architecture builds without running anything of it.
      "${B[@]}" bud --quiet --isolation chroot --timestamp 0 --platform "$p" -f "$ctx/Containerfile" \
        -t "localhost/$name-${p//\//-}:build" "$ctx" >/dev/null
      "${B[@]}" manifest add "$list" "containers-storage:localhost/$name-${p//\//-}:build" >/dev/null
      built+=("localhost/$name-${p//\//-}:build")
      rm -rf "$ctx"
    done
    "${B[@]}" manifest push --quiet --all --format oci "$list" "oci-archive:$OUT/$name.oci.tar:$tag"
    "${B[@]}" manifest rm "$list" >/dev/null 2>&1 || true
    "${B[@]}" rmi --force "${built[@]}" >/dev/null 2>&1 || true
  fi
  echo "$stamp" >"$OUT/$name.built-for"
  echo "image: $OUT/$name.oci.tar ($tag, $shown, $(du -h "$OUT/$name.oci.tar" | cut -f1))"
}
if [ ${#binary[@]} -gt 0 ]; then
  image "${binary[0]}" "${binary[1]}" "$(host_platform)=${binary[2]}"
  exit 0
fi

read -r -a platforms <<<"${IMAGE_PLATFORMS:-$(host_platform)}"
declare -A TRIPLE=([linux/amd64]=x86_64-unknown-linux-gnu [linux/arm64]=aarch64-unknown-linux-gnu)
declare -A BINARY=()
for platform in "${platforms[@]}"; do
  [ -n "${TRIPLE[$platform]:-}" ] || { echo "image: unknown platform $platform (linux/amd64, linux/arm64)" >&2; exit 1; }
  BINARY[$platform]="$(bash hack/build-static.sh "${TRIPLE[$platform]}")"
done
bash hack/build-envtest.sh pause

args=()
for platform in "${platforms[@]}"; do args+=("$platform=${BINARY[$platform]}"); done
image event-series "$TAG" "${args[@]}"
image pause "$PAUSE_IMAGE" "$(host_platform)=$BIN/pause"
