#!/usr/bin/env bash
# `just bench-engine`: the pure engine's criterion benchmarks (benches/engine.rs), the operator's
# cost per raw event change without the API server (benches/decode.rs) and the heap the engine
# holds per series (benches/memory.rs, a counting allocator), with the commit, the machine and the
# flags, into one result file: bench/results/engine/<date>.json. docs/BENCHMARKS.md's Engine and
# Memory tables are generated from it (bench/tables.py `engine` and `heap`). ENGINE_BENCH_ARGS are
# passed to criterion (default: none, its full 100 samples).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$ROOT/bench/lib.sh"

criterion="$TARGET/criterion"
# Only this run's estimates are read: an old benchmark's directory must not stay in the result.
rm -rf "$criterion"
cargo bench --bench engine --bench decode --bench memory --no-run -q
machine="$(machine_json)"
read -ra args <<<"${ENGINE_BENCH_ARGS:-}"
log "cargo bench --bench engine --bench decode -- ${args[*]}"
cargo bench --bench engine --bench decode -q -- "${args[@]}" >"$TARGET/bench-engine.txt"
log "cargo bench --bench memory"
cargo bench --bench memory -q >"$TARGET/bench-memory.txt"
mkdir -p bench/results/engine
out="bench/results/engine/$(date -u +%Y%m%dT%H%M%SZ).json"
python3 - "$criterion" "$TARGET/bench-memory.txt" "$BENCH_COMMIT" "$machine" "${args[*]}" "$(cut -d' ' -f1 /proc/loadavg)" <<'PY' >"$out"
import glob, json, os, re, sys

criterion, memory_txt, commit, machine, args, load_end = sys.argv[1:]
machine = json.loads(machine)
# The benchmarks are built with cargo's bench profile, not the operator binary bench/lib.sh names.
machine["profile"] = "bench"
machine["binary"] = "cargo bench --bench engine --bench decode --bench memory"
benchmarks = []
for path in sorted(glob.glob(os.path.join(criterion, "**", "new", "benchmark.json"), recursive=True)):
    with open(path) as f:
        b = json.load(f)
    with open(os.path.join(os.path.dirname(path), "estimates.json")) as f:
        e = json.load(f)
    ci = e["median"]["confidence_interval"]
    benchmarks.append({
        "id": b["full_id"],
        "elements": (b.get("throughput") or {}).get("Elements"),
        "median_ns": e["median"]["point_estimate"],
        "median_ci_ns": [ci["lower_bound"], ci["upper_bound"]],
        "mean_ns": e["mean"]["point_estimate"],
    })
if not benchmarks:
    sys.exit(f"no criterion estimates under {criterion}")
heap, restarts = [], []
per_series = re.compile(r"memory/(\d+) active series: (\d+) bytes heap per series in total, (\d+) beyond"
                        r" the strings it carries \(([\d.]+) MiB for all\)")
restart = re.compile(r"memory/restart of (\d+) series and (\d+) listed raw events, buffer (\d+) MiB: heap"
                     r" ([\d.]+) MiB once the series are restored, peak ([\d.]+) MiB, ([\d.]+) MiB after the"
                     r" recovery, ([\d.]+) MiB after a tick and housekeeping")
entry = re.compile(r"memory/(\d+) (candidates|pending writes): (\d+) bytes heap per (?:candidate|pending write)")
full = re.compile(r"memory/every bound full at (\d+) series, key bytes (\d+) MiB: ([\d.]+) MiB of candidates,"
                  r" ([\d.]+) MiB more with keys at every limit, ([\d.]+) MiB more with the series and their"
                  r" pending creates; ([\d.]+) MiB in all, peak ([\d.]+) MiB \((\d+) series, (\d+) pending")
entries, bounds = [], []
for line in open(memory_txt):
    if m := entry.search(line):
        entries.append({"what": m[2], "count": int(m[1]), "bytes_each": int(m[3])})
    elif m := full.search(line):
        bounds.append({"max_active_series": int(m[1]), "key_mib": int(m[2]), "candidates_mib": float(m[3]),
                       "at_limit_mib": float(m[4]), "series_pending_mib": float(m[5]), "all_mib": float(m[6]),
                       "peak_mib": float(m[7]), "series": int(m[8]), "pending": int(m[9])})
    elif m := per_series.search(line):
        heap.append({"series": int(m[1]), "bytes_per_series": int(m[2]), "beyond_strings": int(m[3]),
                     "mib_all": float(m[4])})
    elif m := restart.search(line):
        restarts.append({"series": int(m[1]), "listed_raw": int(m[2]), "buffer_mib": int(m[3]),
                         "restored_mib": float(m[4]), "peak_mib": float(m[5]), "after_recovery_mib": float(m[6]),
                         "settled_mib": float(m[7])})
if not heap or not restarts:
    sys.exit(f"benches/memory.rs printed no figures this script knows ({memory_txt})")
print(json.dumps({"commit": commit, "machine": machine, "flags": args or "criterion defaults",
                  "loadavg_at_end": load_end, "benchmarks": benchmarks, "heap": heap, "restarts": restarts,
                  "entries": entries, "every_bound_full": bounds},
                 indent=1))
PY
log "wrote $out"
