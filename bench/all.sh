#!/usr/bin/env bash
# `just bench-all`: every benchmark, one after another (about twelve hours on 2 cores), then
# the tables of docs/ generated from the newest result files.
#
# RESUME=1 skips each benchmark whose newest result file is current: measured on HEAD's operator
# code (src/, core/, the dependencies) and HEAD's version of its own script (`python3 bench/tables.py
# --current`). The whole set then completes over several sittings while the code stays the same; a
# change to the operator makes every figure stale again. The older end-to-end benchmarks (economy,
# memory, flood, bookmarks, ingest) overwrite their summary and keep a dated copy with its commit
# under bench/results/dated/ (`keep_dated`, bench/lib.sh).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
log() { printf '%s bench-all: %s\n' "$(date +%T)" "$*" >&2; }

# name | recipe | newest-result glob ("" = undated: always re-run) | the script it depends on
steps=(
  "engine|just bench-engine|bench/results/engine/*.json|bench/engine.sh"
  "economy|just bench-economy|bench/results/dated/economy/*.json|bench/economy.sh"
  "memory|just bench-memory|bench/results/dated/memory/*.json|bench/memory.sh"
  "flood|just bench-flood|bench/results/dated/flood/*.json|bench/flood.sh"
  "bookmarks|just bench-bookmarks|bench/results/dated/bookmarks/*.json|bench/bookmarks.sh"
  "ingest|just bench-ingest|bench/results/dated/ingest/*.json|bench/ingest.sh"
  "node|just bench-node|bench/results/node/*.json|bench/node.sh"
  "heartbeats|just bench-heartbeats|bench/results/heartbeats/*.json|bench/heartbeats.sh"
  "bound|just bench-bound|bench/results/bound/*.json|bench/bound.sh"
  "scale|just bench-scale|bench/results/scale/*/summary.json|bench/scale.sh"
  "scale-watch-cache|WATCH_CACHE=on STEPS= just bench-scale|bench/results/scale-watch-cache/*/summary.json|bench/scale.sh"
  "failover|just bench-failover|bench/results/failover/*.json|bench/failover.sh"
  "rollout|just bench-rollout|bench/results/rollout/*.json|bench/rollout.sh"
  "restore-buffer|just bench-restore-buffer|bench/results/restore-buffer/*.json|bench/restore-buffer.sh"
  "growth|just bench-growth|bench/results/growth/*.json|bench/growth.sh"
  "soak|just bench-soak|bench/results/soak/*/summary.json|bench/soak.sh"
)

for step in "${steps[@]}"; do
  IFS='|' read -r name recipe results script <<<"$step"
  if [ "${RESUME:-0}" = 1 ] && [ -n "$results" ] && python3 bench/tables.py --current "$results" "$script" >&2; then
    log "$name: skipped, its newest result is current"
    continue
  fi
  log "$name: $recipe"
  bash -c "$recipe"
done
python3 bench/tables.py --latest
python3 bench/tables.py --stale
