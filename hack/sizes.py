#!/usr/bin/env python3
"""Sizes of the Rust files: lines before their `#[cfg(test)]` module. A reader should find one
concern per file; `--check` fails beyond MAX_FILE_LINES (`just lint` runs it on src/ and core/).
The length of functions is clippy's `too_many_lines` (clippy.toml), which parses the real thing.

Usage: hack/sizes.py [--check] [--top N] DIR...
"""

import os
import sys

MAX_FILE_LINES = 500


def code_lines(path):
    """Lines of `path` before its test module (all of them when it has none)."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    for n, line in enumerate(lines):
        if line.strip().startswith("#[cfg(test)]"):
            return n
    return len(lines)


def main(argv):
    check = "--check" in argv
    top = 8
    if "--top" in argv:
        top = int(argv[argv.index("--top") + 1])
    roots = [a for i, a in enumerate(argv) if not a.startswith("--") and argv[i - 1] != "--top"]
    files = []
    for root in roots:
        for d, _, names in os.walk(root):
            files += [(code_lines(os.path.join(d, n)), os.path.join(d, n)) for n in sorted(names) if n.endswith(".rs")]
    files.sort(reverse=True)
    print(f"largest files (lines before the tests; at most {MAX_FILE_LINES}):")
    for lines, path in files[:top]:
        print(f"  {lines:5}  {path}")
    over = [f"{p} has {n} lines" for n, p in files if n > MAX_FILE_LINES]
    if check and over:
        for o in over:
            print(f"sizes: {o}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
