#!/usr/bin/env python3
"""Sizes of the Rust code: the largest files (lines before their `#[cfg(test)]` module) and the
longest functions outside tests. A reader should find one concern per file and a function on one
screen; `--check` fails beyond MAX_FILE_LINES or MAX_FN_LINES (`just lint` runs it on src/ and core/).

Usage: hack/sizes.py [--check] [--top N] DIR...
"""

import os
import re
import sys

MAX_FILE_LINES = 500
MAX_FN_LINES = 80

FN = re.compile(r"^\s*(pub(\([^)]*\))?\s+)?(const\s+)?(async\s+)?(unsafe\s+)?fn\s+(\w+)")


def code_only(line, state):
    """The line without comments, string and char literals (so their braces do not count).
    `state` carries an open block comment or string across lines."""
    out = []
    i = 0
    while i < len(line):
        if state["block"]:
            end = line.find("*/", i)
            if end < 0:
                return "".join(out)
            state["block"] = False
            i = end + 2
            continue
        if state["string"]:
            c = line[i]
            if state["raw"] is None and c == "\\":
                i += 2
                continue
            closer = '"' + "#" * (state["raw"] or 0)
            if line.startswith(closer, i):
                state["string"] = False
                i += len(closer)
            else:
                i += 1
            continue
        if line.startswith("//", i):
            break
        if line.startswith("/*", i):
            state["block"] = True
            i += 2
            continue
        raw = re.match(r'r(#*)"', line[i:])
        if raw and (i == 0 or not (line[i - 1].isalnum() or line[i - 1] == "_")):
            state["string"], state["raw"] = True, len(raw.group(1))
            i += raw.end()
            continue
        if line[i] == '"':
            state["string"], state["raw"] = True, None
            i += 1
            continue
        char = re.match(r"'(\\.|[^\\'])'", line[i:])
        if char:
            i += char.end()
            continue
        out.append(line[i])
        i += 1
    return "".join(out)


def scan(path):
    """(lines before the test module, [(length, name, line) of each function outside it])."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    state = {"block": False, "string": False, "raw": None}
    depth, open_fns, fns, code_lines = 0, [], [], len(lines)
    for n, line in enumerate(lines, 1):
        if line.strip().startswith("#[cfg(test)]") and code_lines == len(lines):
            code_lines = n - 1
            break
        code = code_only(line, state)
        m = FN.match(code)
        if m and not code.rstrip().endswith(";"):
            open_fns.append((m.group(6), n, depth))
        depth += code.count("{") - code.count("}")
        while open_fns and depth <= open_fns[-1][2] and ("}" in code or n > open_fns[-1][1]):
            name, start, _ = open_fns.pop()
            fns.append((n - start + 1, name, start))
    return code_lines, fns


def main(argv):
    check = "--check" in argv
    top = 8
    if "--top" in argv:
        top = int(argv[argv.index("--top") + 1])
    roots = [a for i, a in enumerate(argv) if not a.startswith("--") and argv[i - 1] != "--top"]
    files, fns = [], []
    for root in roots:
        for d, _, names in os.walk(root):
            for name in sorted(names):
                if name.endswith(".rs"):
                    path = os.path.join(d, name)
                    lines, found = scan(path)
                    files.append((lines, path))
                    fns += [(length, f"{path}:{line} {fn}") for length, fn, line in found]
    files.sort(reverse=True)
    fns.sort(reverse=True)
    print(f"largest files (lines before the tests; at most {MAX_FILE_LINES}):")
    for lines, path in files[:top]:
        print(f"  {lines:5}  {path}")
    print(f"longest functions outside tests (at most {MAX_FN_LINES} lines):")
    for length, where in fns[:top]:
        print(f"  {length:5}  {where}")
    over = [f"{p} has {n} lines" for n, p in files if n > MAX_FILE_LINES]
    over += [f"{w} has {n} lines" for n, w in fns if n > MAX_FN_LINES]
    if check and over:
        for o in over:
            print(f"sizes: {o}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
