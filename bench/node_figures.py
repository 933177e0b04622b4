#!/usr/bin/env python3
"""The figures of bench/node.sh for one namespace, read with the harness's kubectl.

    node_figures.py staleness NS    one line per Ongoing series object: "reason seconds occurrences",
                                    how far its series.lastObservedTime and count lag behind the
                                    kubelet's raw objects of the same reason (what a reader of the
                                    object does not see yet)
    node_figures.py summary NS AUDIT RESTARTS STALE_S STALE_N STOPPED_AT
                                    the namespace's figures as one JSON object: writes per writer from
                                    the apiserver's audit log, the kubelet's occurrences, the series,
                                    and end to end from the audit log (bench/scale_figures.py): the
                                    kubelet's write to the series write that shows it, and finish
                                    lateness, "quiet" for a finish due after STOPPED_AT (epoch
                                    seconds, when the Pods were deleted)

Environment: KUBECTL, KUBECONFIG.
"""

import json
import os
import subprocess
import sys
from datetime import datetime

from scale_figures import audit_writes, series_figures  # bench/, this file's folder, is on sys.path

# finishAfter of both namespaces' policies (the default; bench/node.sh changes only firstRefresh).
FINISH_AFTER = 360


def get(ns, *args):
    out = subprocess.run(
        [os.environ["KUBECTL"], "--kubeconfig", os.environ["KUBECONFIG"], "-n", ns, "get", *args, "-o", "json"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return json.loads(out)["items"]


def t(s):
    return datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()


def raw_events(ns):
    return get(ns, "events", "-l", "!app.kubernetes.io/managed-by")


def kubelets(raw):
    return [e for e in raw if (e.get("source") or {}).get("component") == "kubelet"]


def staleness(ns):
    raw = {}
    for e in kubelets(raw_events(ns)):
        if not e.get("lastTimestamp"):
            continue
        r = raw.setdefault(e["reason"], [0.0, 0])
        r[0] = max(r[0], t(e["lastTimestamp"]))
        r[1] += max(e.get("count") or 1, 1)
    ongoing = "app.kubernetes.io/managed-by=event-series,eventseries.dev/state=Ongoing"
    for e in get(ns, "events.v1.events.k8s.io", "-l", ongoing):
        if e["reason"] not in raw:
            continue
        s = e.get("series") or {}
        last, count = raw[e["reason"]]
        seen = t(s.get("lastObservedTime") or e["eventTime"])
        print(e["reason"], max(0, round(last - seen)), max(0, count - s.get("count", 1)))


def summary(ns, audit, restarts, stale_s, stale_n, stopped_at):
    kubelet = operator = 0
    with open(audit) as lines:
        for line in lines:
            e = json.loads(line)
            ref = e.get("objectRef") or {}
            if e.get("stage") != "ResponseComplete" or ref.get("resource") != "events":
                continue
            if ref.get("namespace") != ns or e["verb"] in ("get", "list", "watch"):
                continue
            agent = e.get("userAgent", "")
            if agent.startswith("kubelet/") and ref.get("apiGroup", "") == "":
                kubelet += 1
            elif agent.startswith("event-series/") and ref.get("apiGroup") == "events.k8s.io":
                operator += 1
    raw = raw_events(ns)
    items = kubelets(raw)
    with open(audit) as lines:
        writes = [w for w in audit_writes(lines) if w[3][0] == ns]
    backoff = [e for e in items if e.get("reason") == "BackOff"]
    series = get(ns, "events.v1.events.k8s.io", "-l", "app.kubernetes.io/managed-by=event-series")

    def occ(es):
        return sum(max(e.get("count") or 1, 1) for e in es)

    print(
        json.dumps(
            {
                "restarts": int(restarts or 0),
                "kubelet_writes": kubelet,
                "event_series_writes": operator,
                "raw_occurrences": occ(items),
                "raw_objects": len(items),
                "backoff_occurrences": occ(backoff),
                "backoff_objects": len(backoff),
                "series": {
                    e["reason"]: {
                        "count": (e.get("series") or {}).get("count", 1),
                        "state": e["metadata"]["labels"]["eventseries.dev/state"],
                    }
                    for e in series
                },
                "series_objects": len(series),
                "largest_staleness_s": int(stale_s),
                "largest_occurrences_not_shown": int(stale_n),
                "end_to_end": series_figures(raw, series, writes, FINISH_AFTER, float(stopped_at)),
            }
        )
    )


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "staleness":
        staleness(sys.argv[2])
    elif len(sys.argv) == 8 and sys.argv[1] == "summary":
        summary(*sys.argv[2:])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
