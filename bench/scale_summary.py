#!/usr/bin/env python3
"""The summary of one `just bench-scale` (bench/scale.sh): DIR/summary.json from DIR/run.json and the
runs' files, and the figures on stdout. `python3 bench/scale_summary.py DIR` recomputes it."""

import json
import os
import sys


def load(path):
    with open(path) as f:
        return json.load(f)


def step_row(r):
    cpu = r["cpu_percent"]
    lat = r.get("latency_s") or {}
    counts = r.get("counts") or {}
    return {
        "label": r["label"],
        "pods": r["pods"],
        "namespaces": r["namespaces"],
        "nodes": r.get("nodes"),
        "core_event_writes_per_s": r["core_event_writes_per_s"],
        "create_p50_s": (lat.get("create") or {}).get("p50"),
        "create_p99_s": (lat.get("create") or {}).get("p99"),
        "heartbeat_p99_s": (lat.get("heartbeat") or {}).get("p99"),
        "finish_p99_s_histogram": (lat.get("finish") or {}).get("p99"),
        "finish_lateness_s": counts.get("finish_lateness_s"),
        "operator_cpu_percent": cpu.get("operator"),
        "apiserver_cpu_percent": cpu.get("apiserver"),
        "operator_cpu_share_of_apiserver": round(cpu["operator"] / cpu["apiserver"], 3)
        if cpu.get("operator") is not None and cpu.get("apiserver")
        else None,
        "operator_peak_rss_mib": round(r["operator_peak_rss_kib"] / 1024, 1)
        if r.get("operator_peak_rss_kib")
        else None,
        "watch_bytes_per_s": round(r["watch_bytes_core_events"] / r["window_s"]),
        "keys": counts.get("keys"),
        "series_objects": counts.get("series_objects"),
        "series_not_finished": counts.get("series_not_finished"),
        "raw_occurrences": counts.get("raw_occurrences"),
        "occurrences_in_series": counts.get("occurrences_in_series"),
    }


def bill(runs):
    """The API server's figures without, with, without the operator, side by side."""
    out = {}
    for label in ("bill-without-1", "bill-with", "bill-without-2"):
        r = runs.get(label)
        if not r:
            continue
        reqs = r["requests"]
        out[label] = {
            "apiserver_cpu_percent": r["cpu_percent"].get("apiserver"),
            "etcd_cpu_percent": r["cpu_percent"].get("etcd"),
            "etcd_puts": r["etcd_puts"],
            "etcd_txns": r["etcd_txns"],
            "window_s": r["window_s"],
            "requests_total": sum(reqs.values()),
            "events_requests": {key: v for key, v in reqs.items() if key.endswith("/events")},
            "lease_requests": sum(v for key, v in reqs.items() if key.endswith("coordination.k8s.io/leases")),
            "watch_bytes_core_events": r["watch_bytes_core_events"],
        }
    w = out.get("bill-with")
    base = [out[x]["apiserver_cpu_percent"] for x in ("bill-without-1", "bill-without-2") if x in out]
    if w and base:
        mean = sum(base) / len(base)
        out["apiserver_cpu_with_over_without"] = round(w["apiserver_cpu_percent"] / mean, 3) if mean else None
    return out


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    d = sys.argv[1]
    meta = load(os.path.join(d, "run.json"))
    runs = {}
    for name in sorted(os.listdir(d)):
        if name.endswith(".json") and name not in ("run.json", "summary.json"):
            r = load(os.path.join(d, name))
            runs[r["label"]] = r
    summary = {
        "commit": meta["commit"],
        "machine": meta["machine"],
        "flags": meta,
        "steps": [
            step_row(r)
            for r in sorted((r for label, r in runs.items() if label.startswith("step-")), key=lambda r: r["pods"])
        ],
        "bill": bill(runs),
    }
    with open(os.path.join(d, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
