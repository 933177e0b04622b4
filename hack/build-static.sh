#!/usr/bin/env bash
# The operator's release binary for one Rust target, printed as a path (hack/image.sh, hack/release.sh,
# the background builds of hack/test.sh):
#   x86_64-unknown-linux-gnu    glibc linked in (crt-static): the amd64 image and plugin
#   aarch64-unknown-linux-gnu   the same for arm64, linked by Debian's cross gcc (gcc-aarch64-linux-gnu,
#                               libc6-dev-arm64-cross: the static glibc for arm64; zig links glibc
#                               dynamically only, "libc of the specified target requires dynamic linking")
#   x86_64-apple-darwin, aarch64-apple-darwin
#                               the kubectl plugin for macOS, linked by zig (cargo-zigbuild; see
#                               RELEASE_DARWIN in hack/release.sh)
# A target other than the host's needs its standard library: `rustup target add`, done here once (the
# same source as rustup's own components). zig and cargo-zigbuild come from the Python package index,
# at the versions pinned below, installed once per machine into a virtualenv outside the clone
# (${EVENT_SERIES_CACHE:-${XDG_CACHE_HOME:-~/.cache}/event-series}/zig-<versions>), like rust-just in
# .ci/run. With --deps, only installs what the target needs (CI does it before the builds).
# Usage: hack/build-static.sh [--deps] TRIPLE
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
ZIGLANG_VERSION=0.17.1
CARGO_ZIGBUILD_VERSION=0.24.1
CACHE="${EVENT_SERIES_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/event-series}"

deps_only=0
[ "${1:-}" = --deps ] && { deps_only=1; shift; }
triple="${1:?usage: hack/build-static.sh [--deps] TRIPLE}"
log() { printf 'build-static: %s\n' "$*" >&2; }

# The target's standard library.
std_lib() {
  local sysroot
  sysroot="$(rustc --print sysroot)"
  [ -d "$sysroot/lib/rustlib/$triple/lib" ] && return
  log "rustup target add $triple"
  rustup target add "$triple" >&2
}

# zig and cargo-zigbuild in their virtualenv (made in place: a virtualenv's scripts name its path;
# .done marks a complete one); prints its bin directory.
zig_venv() {
  local dir="$CACHE/zig-$ZIGLANG_VERSION-cargo-zigbuild-$CARGO_ZIGBUILD_VERSION"
  if [ ! -e "$dir/.done" ]; then
    mkdir -p "$CACHE"
    exec 7>"$CACHE/.zig.lock"
    flock 7
    if [ ! -e "$dir/.done" ]; then
      log "installing ziglang $ZIGLANG_VERSION and cargo-zigbuild $CARGO_ZIGBUILD_VERSION into $dir"
      rm -rf "$dir"
      python3 -m venv "$dir" >&2
      "$dir/bin/python" -m pip install --quiet --disable-pip-version-check \
        "ziglang==$ZIGLANG_VERSION" "cargo-zigbuild==$CARGO_ZIGBUILD_VERSION" >&2
      touch "$dir/.done"
    fi
    exec 7>&-
  fi
  echo "$dir/bin"
}

# Debian's cross gcc for arm64, with its static glibc.
cross_gcc() {
  command -v aarch64-linux-gnu-gcc >/dev/null 2>&1 && [ -e /usr/aarch64-linux-gnu/lib/libc.a ] && return
  log "apt-get install gcc-aarch64-linux-gnu libc6-dev-arm64-cross"
  if [ "$(id -u)" != 0 ] || ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
      gcc-aarch64-linux-gnu libc6-dev-arm64-cross; } >&2; then
    log "the arm64 build needs Debian's gcc-aarch64-linux-gnu and libc6-dev-arm64-cross"
    exit 1
  fi
}

host="$(rustc -vV | sed -n 's/^host: //p')"
case "$triple" in
  "$host") ;;
  aarch64-unknown-linux-gnu) std_lib; cross_gcc ;;
  *-apple-darwin) std_lib; zig_venv >/dev/null ;;
  *) log "no recipe for $triple"; exit 2 ;;
esac
[ "$deps_only" = 1 ] && exit 0

# Run from a test (the node tests' hack/cluster-up-node.sh, tests/release.rs), the environment holds
# what cargo sets for a test process: CARGO_MANIFEST_DIR, OUT_DIR and the like, and our build script's
# EVENT_SERIES_COMMIT. Build scripts watch some of them (ring: CARGO_MANIFEST_DIR), so cargo would
# rebuild ring, all above it and the operator (minutes) instead of taking what the background build
# made: leave them out.
if [ -n "${CARGO_MANIFEST_DIR:-}" ]; then
  unset EVENT_SERIES_COMMIT OUT_DIR
  for v in $(compgen -e | grep -E '^CARGO_(MANIFEST_|PKG_|CRATE_NAME|BIN_|TARGET_TMPDIR|PRIMARY_PACKAGE)' || true); do
    unset "$v"
  done
fi
target="${CARGO_TARGET_DIR:-$ROOT/target}"
case "$target" in /*) ;; *) target="$ROOT/$target" ;; esac
build=(cargo build --release --locked --bin event-series --target "$triple")
case "$triple" in
  *-linux-gnu)
    # Static glibc; RUSTFLAGS apply to the target only, not to build scripts and proc macros,
    # because --target is given.
    export RUSTFLAGS="-C target-feature=+crt-static"
    if [ "$triple" = aarch64-unknown-linux-gnu ] && [ "$triple" != "$host" ]; then
      export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc \
        CC_aarch64_unknown_linux_gnu=aarch64-linux-gnu-gcc AR_aarch64_unknown_linux_gnu=aarch64-linux-gnu-ar
    fi
    ;;
  *-apple-darwin)
    PATH="$(zig_venv):$PATH"
    build=(cargo zigbuild --release --locked --bin event-series --target "$triple")
    ;;
esac
"${build[@]}" >&2
echo "$target/$triple/release/event-series"
