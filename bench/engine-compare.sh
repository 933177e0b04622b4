#!/usr/bin/env bash
# The engine's criterion benchmarks (benches/engine.rs) of two commits side by side, in the same
# minutes: each commit is checked out in a worktree of its own under target/, and the runs alternate
# (base, head, base, head, ... ENGINE_COMPARE_ROUNDS times, default 2) so that a change of load hits
# both. Results: bench/results/engine-compare/<date>.json with both commits, the machine and its
# load before each run, the flags, and each benchmark's median per run; a table on stdout.
#
# Usage: bench/engine-compare.sh BASE [HEAD]   (HEAD defaults to the working tree's HEAD commit)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$ROOT/bench/lib.sh"

base="$(git rev-parse --short "${1:?usage: bench/engine-compare.sh BASE [HEAD]}")"
head="$(git rev-parse --short "${2:-HEAD}")"
rounds="${ENGINE_COMPARE_ROUNDS:-2}"
work="$ROOT/target/engine-compare"
out="$ROOT/bench/results/engine-compare"
mkdir -p "$work" "$out"
runs="$work/runs.jsonl"
: >"$runs"

for c in "$base" "$head"; do
  if [ ! -d "$work/$c" ]; then
    git worktree add --detach "$work/$c" "$c" >/dev/null
  fi
  # Build first, so that no run measures a compile.
  (cd "$work/$c" && CARGO_TARGET_DIR="$work/target-$c" cargo bench --bench engine --no-run -q)
done

for round in $(seq "$rounds"); do
  for c in "$base" "$head"; do
    log "round $round: $c"
    machine="$(machine_json)"
    (cd "$work/$c" && CARGO_TARGET_DIR="$work/target-$c" cargo bench --bench engine -q) >"$work/out.txt" 2>&1
    # Criterion's "name  time: [low median high]" lines (the name may wrap onto the line before).
    python3 - "$c" "$round" "$machine" "$work/out.txt" <<'PY' >>"$runs"
import json, re, sys
commit, rnd, machine = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3])
text = open(sys.argv[4]).read()
medians, name = {}, None
unit = {"ns": 1e-9, "µs": 1e-6, "us": 1e-6, "ms": 1e-3, "s": 1.0}
for line in text.splitlines():
    m = re.match(r"^(\S.*?)\s+time:\s+\[\S+ \S+ (\S+) (\S+) \S+ \S+\]", line)
    if m:
        medians[m.group(1).strip()] = float(m.group(2)) * unit[m.group(3)]
        continue
    m = re.match(r"^\s+time:\s+\[\S+ \S+ (\S+) (\S+) \S+ \S+\]", line)
    if m and name:
        medians[name] = float(m.group(1)) * unit[m.group(2)]
        continue
    if line and not line.startswith(" "):
        name = line.strip()
print(json.dumps({"commit": commit, "round": rnd, "machine": machine, "median_seconds": medians}))
PY
  done
done

result="$out/$(date -u +%Y%m%dT%H%M%SZ).json"
python3 - "$runs" "$base" "$head" "$rounds" >"$result" <<'PY'
import json, sys
runs = [json.loads(l) for l in open(sys.argv[1])]
print(json.dumps({
    "what": "benches/engine.rs medians, two commits alternating",
    "base": sys.argv[2], "head": sys.argv[3], "rounds": int(sys.argv[4]),
    "flags": "cargo bench --bench engine (release profile with debug info, criterion defaults)",
    "runs": runs,
}, indent=1))
PY
python3 - "$result" <<'PY'
import json, sys, statistics
r = json.load(open(sys.argv[1]))
names = sorted({n for run in r["runs"] for n in run["median_seconds"]})
def fmt(s):
    return f"{s * 1e9:.0f} ns" if s < 1e-6 else f"{s * 1e6:.1f} µs" if s < 1e-3 else f"{s * 1e3:.2f} ms"
print(f"| benchmark | {r['base']} (base) | {r['head']} (head) | head / base |")
print("|---|---|---|---|")
for n in names:
    b = [run["median_seconds"][n] for run in r["runs"] if run["commit"] == r["base"] and n in run["median_seconds"]]
    h = [run["median_seconds"][n] for run in r["runs"] if run["commit"] == r["head"] and n in run["median_seconds"]]
    if b and h:
        print(f"| {n} | {' / '.join(map(fmt, b))} | {' / '.join(map(fmt, h))} | {statistics.median(h) / statistics.median(b):.2f} |")
PY
log "results: ${result#"$ROOT"/}"
