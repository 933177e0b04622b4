#!/usr/bin/env python3
"""Every series object's longest time between two writes, from an API server's audit log.

python3 bench/write_gaps.py CLUSTER_DIR TTL_SECONDS prints one JSON object: writes and objects
(successful creates, patches and updates of events.k8s.io Events), the log's span, the gaps' p50,
p99 and longest, and how many objects went more than 3/4 of the TTL and more than the TTL without a
write. An object not written since counts as old as the log's end. The API server rotates its log
at 200 MB: the rotated files (audit-<date>.log) are read first, by name.
"""

import glob
import json
import os
import sys
from datetime import datetime


def lines(cluster_dir):
    for path in sorted(glob.glob(os.path.join(cluster_dir, "audit*.log"))):
        with open(path) as f:
            yield from f


def gaps(lines, ttl):
    last, longest = {}, {}
    writes, start = 0, None
    for line in lines:
        if '"events.k8s.io"' not in line:
            continue
        e = json.loads(line)
        ref = e.get("objectRef") or {}
        if e.get("stage") != "ResponseComplete" or ref.get("apiGroup") != "events.k8s.io":
            continue
        if e["verb"] not in ("create", "patch", "update") or e["responseStatus"]["code"] >= 300:
            continue
        at = datetime.fromisoformat(e["stageTimestamp"].replace("Z", "+00:00")).timestamp()
        name = ref["namespace"] + "/" + ref["name"]
        start = at if start is None else min(start, at)
        if name in last:
            longest[name] = max(longest.get(name, 0.0), at - last[name])
        last[name] = at
        writes += 1
    if not last:
        return {"writes": 0, "objects": 0}
    end = max(last.values())
    gap = sorted(max(longest.get(k, 0.0), end - t) for k, t in last.items())

    def q(f):
        return round(gap[min(len(gap) - 1, int(f * len(gap)))], 1)

    return {
        "writes": writes,
        "objects": len(gap),
        "log_s": round(end - start, 1),
        "gap_p50_s": q(0.5),
        "gap_p99_s": q(0.99),
        "longest_gap_s": round(gap[-1], 1),
        "over_three_quarters_ttl": sum(g > 0.75 * ttl for g in gap),
        "over_ttl": sum(g > ttl for g in gap),
    }


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    print(json.dumps(gaps(lines(sys.argv[1]), float(sys.argv[2]))))
