#!/usr/bin/env bash
# Builds the runtime image of the previous release (the newest in hack/releases.tsv before the
# crate's version) from its own commit: a git worktree in target/previous/v<version>, its own
# hack/image.sh, its own cargo target dir (a checkout shares no build outputs with another: cargo
# judges a workspace crate fresh by file times, so a shared dir could hand back the other's binary).
# Prints the version, the worktree (its config/default is the release's install) and the image
# archive, tab-separated. Built once; a second run only prints.
#
# Usage: hack/previous-image.sh
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
current="$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n1)"

# The newest release whose version sorts before the crate's (sort -V puts 0.2.0-dev after 0.1.x).
read -r version commit < <(
  grep -v '^#' hack/releases.tsv | awk -F'\t' 'NF >= 2 { print $1 "\t" $2 }' \
    | while IFS=$'\t' read -r v c; do
        [ "$v" != "$current" ] && [ "$(printf '%s\n%s\n' "$v" "$current" | sort -V | head -n1)" = "$v" ] \
          && printf '%s %s\n' "$v" "$c"
      done | sort -V | tail -n1
)
[ -n "${version:-}" ] || { echo "previous-image: no release before $current in hack/releases.tsv" >&2; exit 1; }

tree="$ROOT/target/previous/v$version"
archive="$tree/target/image/event-series.oci.tar"
if [ -s "$archive" ] && [ "$(cat "$tree/.built" 2>/dev/null)" = "$commit" ]; then
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
if [ -d "$tree" ]; then
  git worktree remove --force "$tree" 2>/dev/null || rm -rf "$tree"
  git worktree prune
fi
mkdir -p "$ROOT/target/previous"
git worktree add --quiet --detach "$tree" "$commit" >&2
echo "previous-image: building v$version from $commit in $tree" >&2
started=$SECONDS
# Its own Go binaries (pause) come from the same module cache; its cargo outputs stay in its tree.
(cd "$tree" && CARGO_TARGET_DIR="$tree/target" bash hack/image.sh >&2)
echo "$commit" >"$tree/.built"
echo "previous-image: v$version built in $((SECONDS - started)) s" >&2
printf '%s\t%s\t%s\n' "$version" "$tree" "$archive"
