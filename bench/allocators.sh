#!/usr/bin/env bash
# The allocator comparison: bench/memory.sh once per variant of the operator, one after the other on
# the same machine.
#   glibc-tuned    the default build: glibc malloc, mallopt(M_MMAP_THRESHOLD) at start, malloc_trim
#                  after recovery and after write bursts (src/memory.rs)
#   glibc-untuned  the same binary with EVENT_SERIES_MALLOC_TUNING=off: glibc malloc left alone
#   jemalloc       cargo feature `jemalloc` (tikv-jemallocator as the global allocator, glibc tuning off)
#   mimalloc       cargo feature `mimalloc` (mimalloc as the global allocator, glibc tuning off)
# Each variant is built (cargo build --release --bin event-series [--features ...], CARGO_TARGET_DIR
# honoured) and its binary copied to target/allocators/<variant>/ before any run, so that the runs
# measure exactly those binaries.
#
# Usage: bench/allocators.sh [VARIANT...]   (default: all four, in the order above)
# Environment: BUILD (1; 0: use the copies already in target/allocators), OUT (bench/results), and
#   what bench/memory.sh reads (SMALL, LARGE, BARE_LISTS, ...).
# Result: $OUT/allocators/<variant>.json (memory.sh's result) and $OUT/allocators.json (the figures
#   side by side).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$ROOT/bench/lib.sh"

OUT="${OUT:-$ROOT/bench/results}" BUILD="${BUILD:-1}"
VARIANTS=("$@")
[ ${#VARIANTS[@]} -gt 0 ] || VARIANTS=(glibc-tuned glibc-untuned jemalloc mimalloc)
COPIES="$ROOT/target/allocators"

features() {
  case "$1" in
    glibc-tuned | glibc-untuned) echo '' ;;
    jemalloc | mimalloc) echo "$1" ;;
    *) die "unknown variant $1 (glibc-tuned, glibc-untuned, jemalloc, mimalloc)" ;;
  esac
}

if [ "$BUILD" = 1 ]; then
  for v in "${VARIANTS[@]}"; do
    f="$(features "$v")"
    log "building $v${f:+ (--features $f)}"
    (cd "$ROOT" && cargo build --release --bin event-series ${f:+--features "$f"})
    mkdir -p "$COPIES/$v"
    cp "$TARGET/release/event-series" "$COPIES/$v/event-series"
  done
fi

mkdir -p "$OUT/allocators"
for v in "${VARIANTS[@]}"; do
  [ -x "$COPIES/$v/event-series" ] || die "no $COPIES/$v/event-series (BUILD=1)"
  tuning=''
  [ "$v" = glibc-untuned ] && tuning=off
  log "variant $v"
  OPERATOR="$COPIES/$v/event-series" OUT="$OUT/allocators" NAME="$v" \
    EVENT_SERIES_MALLOC_TUNING="$tuning" bash "$ROOT/bench/memory.sh"
done

# The figures side by side, from every variant's result present (this run's or an earlier one's).
for f in "$OUT"/allocators/{glibc-tuned,glibc-untuned,jemalloc,mimalloc}.json; do
  [ -f "$f" ] || continue
  jq --arg v "$(basename "$f" .json)" '{
    variant: $v,
    rss_kib: [.memory[] | {series, vmrss_kib, vmhwm_kib, loadavg: .machine.loadavg, date: .machine.date}],
    after_restart_kib: [.memory_after_restart[] | {series, vmrss_kib, restart_peak_kib: .vmhwm_kib,
      loadavg: .machine.loadavg, date: .machine.date}],
    restart_ms: [.restart[] | {series, ready_ms, active_after, loadavg: .machine.loadavg,
      date: .machine.date}]
  }' "$f"
done | jq -s '{variants: ., command: "bash bench/allocators.sh", machine: '"$(machine_json)"'}' \
  >"$OUT/allocators.json"
log "done: $OUT/allocators.json"
