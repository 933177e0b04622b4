#!/usr/bin/env bash
# Builds the runtime image of the previous release (the newest in hack/releases.tsv before the
# crate's version) from its own commit: a git worktree in target/previous/v<version>, its own
# hack/image.sh, its own cargo target dir (a checkout shares no build outputs with another: cargo
# judges a workspace crate fresh by file times, so a shared dir could hand back the other's binary).
# Prints the version, the worktree (its config/default is the release's install) and the image
# archive, tab-separated.
#
# Built once per commit: the archive is kept outside the clone, in
# ${EVENT_SERIES_CACHE:-${XDG_CACHE_HOME:-~/.cache}/event-series}/previous/<commit>, so that a fresh
# clone on this machine only checks the worktree out. A build starts from a copy of this clone's
# release dependencies where hack/image.sh built them (the node tests do, before the upgrade tests),
# with the release's own workspace crates removed from it (`cargo clean -p`): cargo rebuilds
# whatever else differs, and the release's dependencies are mostly this build's.
#
# Usage: hack/previous-image.sh
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
current="$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n1)"
TRIPLE=x86_64-unknown-linux-gnu

# The newest release older than the crate's version, by semver precedence (a pre-release such as
# 0.2.0-dev comes after 0.1.x and before 0.2.0).
read -r version commit < <(python3 - "$current" <<'PY' || true
import re, sys
def key(v):
    core, _, pre = v.partition("-")
    return tuple(int(x) for x in core.split(".")), (0, pre) if pre else (1, "")
current = key(sys.argv[1])
rows = [l.split("\t") for l in open("hack/releases.tsv") if l.strip() and not l.startswith("#")]
older = sorted((key(r[0]), r[0], r[1]) for r in rows if len(r) >= 2 and key(r[0]) < current)
if older:
    print(older[-1][1], older[-1][2])
PY
)
[ -n "${version:-}" ] || { echo "previous-image: no release before $current in hack/releases.tsv" >&2; exit 1; }

tree="$ROOT/target/previous/v$version"
cache="${EVENT_SERIES_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/event-series}/previous"
archive="$cache/$commit/event-series.oci.tar"

git rev-parse --git-dir >/dev/null 2>&1 || { echo "previous-image: not a git checkout (the previous release is built from its commit)" >&2; exit 1; }
mkdir -p "$ROOT/target/previous" "$cache"
# Two clones on one machine build one commit once.
exec 9>"$cache/.lock"
flock 9

if [ -s "$archive" ] && [ "$(git -C "$tree" rev-parse HEAD 2>/dev/null)" = "$commit" ]; then
  touch "$cache/$commit"
  printf '%s\t%s\t%s\n' "$version" "$tree" "$archive"
  exit 0
fi

if ! git cat-file -e "$commit^{commit}" 2>/dev/null; then
  # A shallow clone: fetch the release's commit from where this one came from.
  git fetch --quiet origin "$commit" >&2 || git fetch --quiet --unshallow origin >&2 || true
  git cat-file -e "$commit^{commit}" 2>/dev/null || {
    echo "previous-image: commit $commit of release $version is not in this clone (git fetch origin $commit)" >&2
    exit 1
  }
fi
# A tree left half-built, or a worktree whose directory went with `cargo clean`: start again.
git worktree remove --force "$tree" >/dev/null 2>&1 || rm -rf "$tree"
git worktree prune
git worktree add --quiet --force --detach "$tree" "$commit" >&2
if [ -s "$archive" ]; then
  touch "$cache/$commit"
  printf '%s\t%s\t%s\n' "$version" "$tree" "$archive"
  exit 0
fi

echo "previous-image: building v$version from $commit in $tree" >&2
started=$SECONDS
# The seed: this clone's release outputs (host units in release/, the image's in $TRIPLE/release/).
for d in release "$TRIPLE/release"; do
  for sub in deps build .fingerprint; do
    [ -d "$ROOT/target/$d/$sub" ] || continue
    mkdir -p "$tree/target/$d"
    cp -a --reflink=auto "$ROOT/target/$d/$sub" "$tree/target/$d/"
  done
done
if [ -d "$tree/target/$TRIPLE/release/deps" ]; then
  mapfile -t members < <(cd "$tree" && cargo metadata --format-version 1 --no-deps --locked \
    | python3 -c 'import json,sys; print("\n".join(p["name"] for p in json.load(sys.stdin)["packages"]))')
  for p in "${members[@]}"; do
    (cd "$tree" && cargo clean --quiet --release --target "$TRIPLE" -p "$p" && cargo clean --quiet --release -p "$p")
  done
  echo "previous-image: seeded with this clone's release dependencies, its workspace crates (${members[*]}) removed" >&2
fi
# Its own Go binaries (pause) come from the same module cache; its cargo outputs stay in its tree.
(cd "$tree" && CARGO_TARGET_DIR="$tree/target" bash hack/image.sh >&2)
tmp="$(mktemp -d "$cache/$commit.tmp.XXXXXX")" && chmod 755 "$tmp"
cp "$tree/target/image/event-series.oci.tar" "$tmp/"
rm -rf "${cache:?}/$commit"
mv -T "$tmp" "$cache/$commit"
# The build outputs are not needed any more (the node needs the disk).
rm -rf "$tree/target"
echo "previous-image: v$version built in $((SECONDS - started)) s" >&2
printf '%s\t%s\t%s\n' "$version" "$tree" "$archive"
