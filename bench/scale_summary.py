#!/usr/bin/env python3
"""The summary of one `just bench-scale` (bench/scale.sh): DIR/summary.json from DIR/run.json and the
runs' files, and the figures on stdout. `python3 bench/scale_summary.py DIR` recomputes it."""

import json
import os
import re
import sys

from keys import rejudge  # bench/, this file's folder, is on sys.path when it runs
from tables import bill_figures


def load(path):
    with open(path) as f:
        return json.load(f)


def keys_rejudged(counts, window):
    """The keys' verdicts, those a run judged "differs" judged again by today's rules
    (bench/keys.py `rejudge`), with how many changed."""
    keys = dict(counts.get("keys") or {})
    if not window:
        return keys
    for row in counts.get("differs") or []:
        v = rejudge(row, window)
        if v != "differs":
            keys["differs"] -= 1
            keys[v] = keys.get(v, 0) + 1
            keys["rejudged"] = keys.get("rejudged", 0) + 1
    if not keys.get("differs"):
        keys.pop("differs", None)
    return keys


def step_row(r, window=None):
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
        # From the audit log: the emitters' writes against the series objects' (bench/scale_figures.py).
        "end_to_end": counts.get("end_to_end"),
        "machine_cpu": r.get("machine_cpu"),
        "saturation": r.get("saturation"),
        "drain": r.get("drain"),
        "operator_cpu_percent": cpu.get("operator"),
        "apiserver_cpu_percent": cpu.get("apiserver"),
        "operator_cpu_share_of_apiserver": round(cpu["operator"] / cpu["apiserver"], 3)
        if cpu.get("operator") is not None and cpu.get("apiserver")
        else None,
        "operator_peak_rss_mib": round(r["operator_peak_rss_kib"] / 1024, 1)
        if r.get("operator_peak_rss_kib")
        else None,
        "watch_bytes_per_s": round(r["watch_bytes_core_events"] / r["window_s"]),
        "keys": keys_rejudged(counts, window),
        "series_objects": counts.get("series_objects"),
        "series_not_finished": counts.get("series_not_finished"),
        "raw_occurrences": counts.get("raw_occurrences"),
        "occurrences_in_series": counts.get("occurrences_in_series"),
    }


def bill_row(r):
    """One bill run's figures: the API server's CPU and memory, requests, etcd writes, watch bytes."""
    reqs = r["requests"]
    watch = r["watch_bytes_core_events"] + (r.get("watch_bytes_events_k8s_io") or 0)
    occurrences = r.get("core_event_writes")
    return {
        "apiserver_cpu_percent": r["cpu_percent"].get("apiserver"),
        "apiserver_rss_mib": round(r["apiserver_rss_kib_mean"] / 1024, 1) if r.get("apiserver_rss_kib_mean") else None,
        "etcd_cpu_percent": r["cpu_percent"].get("etcd"),
        "etcd_puts": r["etcd_puts"],
        "etcd_txns": r["etcd_txns"],
        "etcd_writes": (r.get("etcd_writes") or {}).get("writes"),
        "etcd_writes_source": (r.get("etcd_writes") or {}).get("source"),
        "window_s": r["window_s"],
        "requests_total": sum(reqs.values()),
        "events_requests": {key: v for key, v in reqs.items() if key.endswith("/events")},
        "lease_requests": sum(v for key, v in reqs.items() if key.endswith("coordination.k8s.io/leases")),
        "watch_bytes_core_events": r["watch_bytes_core_events"],
        "watch_bytes_events_k8s_io": r.get("watch_bytes_events_k8s_io"),
        # An occurrence is a write of a raw Event through core/v1 (kwok's and the controller-manager's
        # recorders write once per occurrence), the same load with and without the operator.
        "occurrences": occurrences,
        "watch_bytes_per_occurrence": round(watch / occurrences, 1)
        if occurrences and r.get("watch_bytes_events_k8s_io") is not None
        else None,
        "operator_in_window": r.get("operator_in_window"),
        "machine_cpu": r.get("machine_cpu"),
        "saturation": r.get("saturation"),
    }


def run_order(label):
    """Bill runs in the order they ran: pair by pair, the run without first."""
    m = re.search(r"-(\d+)$", label)
    return (int(m.group(1)) if m else 0, 0 if label.startswith("bill-without") else 1)


def bill(runs):
    """The API server's bill: each run's figures, and per figure the runs without the operator beside
    those with it (mean, min-max, difference, verdict; bench/tables.py's bill_figures)."""
    labels = sorted((x for x in runs if x.startswith("bill-")), key=run_order)
    rows = {label: bill_row(runs[label]) for label in labels}
    without = [rows[x] for x in labels if x.startswith("bill-without")]
    with_ = [rows[x] for x in labels if not x.startswith("bill-without")]
    if not rows:
        return {}
    return {"runs": rows, "figures": bill_figures(without, with_)}


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
            step_row(r, meta.get("series_window_s"))
            for r in sorted((r for label, r in runs.items() if label.startswith("step-")), key=lambda r: r["pods"])
        ],
        "bill": bill(runs),
    }
    with open(os.path.join(d, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
