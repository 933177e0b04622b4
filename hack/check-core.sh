#!/usr/bin/env bash
# Keeps the pure core pure: core/ (the crate event-series-core) must depend on no async runtime and no
# API client, so that nothing in the engine can wait on the network or a clock of its own. Fails
# naming the crate that came in and the path it came by.
set -euo pipefail
cd "$(dirname "$0")/.."
forbidden=(tokio async-std smol kube-client kube hyper reqwest tower)
deps="$(cargo tree -p event-series-core -e normal --prefix none --format '{p}' | awk '{ print $1 }' | sort -u)"
bad=0
for crate in "${forbidden[@]}"; do
  if grep -qx "$crate" <<<"$deps"; then
    echo "check-core: event-series-core depends on $crate:" >&2
    cargo tree -p event-series-core -e normal -i "$crate" >&2 || true
    bad=1
  fi
done
[ "$bad" = 0 ] && echo "check-core: event-series-core depends on no async runtime and no API client ($(wc -l <<<"$deps") crates)"
exit "$bad"
