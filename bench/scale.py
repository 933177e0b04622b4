#!/usr/bin/env python3
"""One run of `just bench-scale` (bench/scale.sh starts the control plane, kwok and the operator first).

    scale.py run OUT.json PODS NAMESPACES WITH_OPERATOR(0|1) LABEL

Load, all from real emitters, spread over NAMESPACES:
  - simulated Nodes (kwok) and PODS Pods bound to them by the real kube-scheduler; LOOP_SHARE of them
    crash-loop (kwok's Stage emits BackOff through its tools/record recorder every 10-30 s), the rest
    run quietly;
  - UNSCHEDULABLE_SHARE of the Pods ask for a node label no Node has (the scheduler's FailedScheduling,
    written by its events.k8s.io recorder);
  - one ReplicaSet per namespace that its ResourceQuota refuses (the controller-manager's FailedCreate).
For LOAD_MINUTES the processes are sampled every SAMPLE_SECONDS (CPU, RSS); then the looping and
unschedulable Pods and the ReplicaSets go. The figures are over WINDOW_MINUTES from the start of the load
(default LOAD_MINUTES: the load alone; the bill's runs take longer, so that the loops' finishes fall
inside). With the operator, the run then waits until no series is Ongoing and checks every key: the sum
of its raw objects' counts against its series' counts (bench/keys.py), and from the apiserver's audit
log the end-to-end latencies and finish lateness (bench/scale_figures.py).

The apiserver's metrics are read before and after the window: requests per verb and resource, the bytes
it sent on watches of Events, APF rejections and 429s; etcd's puts and deletes; /proc/stat for the
machine's idle and steal time. The operator's write-latency histogram gives p50/p99 per kind.
"""

import contextlib
import glob
import json
import os
import subprocess
import sys
import time
import urllib.request
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor

from keys import explain_by_writes, tally, verdict_of  # bench/, this file's folder, is on sys.path when it runs
from scale_figures import (
    audit_writes,
    increase,
    lateness_by_timestamps,
    machine_cpu,
    proc_stat_cpu,
    saturation,
    series_figures,
)

LOOP_SHARE = float(os.environ.get("LOOP_SHARE", "0.2"))
UNSCHEDULABLE_SHARE = float(os.environ.get("UNSCHEDULABLE_SHARE", "0.02"))
LOAD_MINUTES = float(os.environ.get("LOAD_MINUTES", "4"))
WINDOW_MINUTES = max(LOAD_MINUTES, float(os.environ.get("WINDOW_MINUTES") or LOAD_MINUTES))
SAMPLE_SECONDS = 15
DRAIN_LIMIT = 15 * 60
# The runs' policy (bench/scale.sh writes it and passes its times), in seconds.
WINDOW = int(os.environ.get("SERIES_WINDOW_S", "180"))
FINISH_AFTER = int(os.environ.get("FINISH_AFTER_S", "180"))
PODS_PER_NODE = 200
STOP = "bench.eventseries.dev/stop"
CLK = os.sysconf("SC_CLK_TCK")


def log(msg):
    print(f"{time.strftime('%H:%M:%S')} scale: {msg}", file=sys.stderr, flush=True)


def k(*args, stdin=None, timeout=600):
    r = subprocess.run(
        [os.environ["KUBECTL"], "--kubeconfig", os.environ["KUBECONFIG"], *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if r.returncode != 0:
        raise RuntimeError(f"kubectl {' '.join(args[:4])}: {r.stderr.strip()[:500]}")
    return r.stdout


def listed(*args):
    """Every object of a paginated list (kubectl pages by --chunk-size)."""
    return json.loads(k("get", *args, "-o", "json", "--chunk-size=500"))["items"]


def create(objects, workers=4, batch=250):
    """Creates objects with several kubectl processes at once, as many tenants would."""
    batches = [objects[i : i + batch] for i in range(0, len(objects), batch)]
    with ThreadPoolExecutor(workers) as pool:
        list(
            pool.map(
                lambda b: k("create", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": b})),
                batches,
            )
        )


def pid_of(name):
    try:
        return int(open(os.path.join(os.environ["CLUSTER_DIR"], name + ".pid")).read())
    except (OSError, ValueError):
        return None


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as stat:
        f = stat.read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / CLK


def status_kib(pid, field):
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def metrics(text):
    """Prometheus text -> {name{labels}: value}."""
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            with contextlib.suppress(ValueError):
                out[name] = float(value)
    return out


def apiserver_metrics():
    return metrics(k("get", "--raw", "/metrics", timeout=60))


def etcd_metrics():
    """etcd's own counters; {} when it does not answer (the writes then come from the apiserver's)."""
    try:
        return metrics(urllib.request.urlopen(os.environ["ETCD_URL"] + "/metrics", timeout=20).read().decode())
    except OSError as e:
        log(f"etcd /metrics: {e}")
        return {}


def etcd_writes(etcd0, etcd1, api0, api1):
    """Writes to etcd in a window: its own puts and deletes (etcd_mvcc_*), or, when etcd's metrics
    did not answer, the apiserver's count of its create, update and delete requests to etcd."""
    if etcd0 and etcd1:
        return {
            "source": "etcd",
            "writes": increase(etcd0, etcd1, "etcd_mvcc_put_total") + increase(etcd0, etcd1, "etcd_mvcc_delete_total"),
        }
    return {
        "source": "apiserver etcd_requests_total",
        "writes": sum(
            increase(api0, api1, "etcd_requests_total", operation=op) for op in ("create", "update", "delete")
        ),
    }


def machine():
    with open("/proc/stat") as f:
        return proc_stat_cpu(f.read())


def operator_metrics():
    return metrics(urllib.request.urlopen(os.environ["OP_URL"] + "/metrics", timeout=20).read().decode())


def mean_of(values):
    values = [v for v in values if v is not None]
    return round(sum(values) / len(values)) if values else None


def requests_by(before, after):
    """apiserver_request_total's increase per "VERB group/resource" (all codes)."""
    out = defaultdict(float)
    for name, v in after.items():
        if not name.startswith("apiserver_request_total{"):
            continue
        labels = dict(part.split("=", 1) for part in name[len("apiserver_request_total{") : -1].split('",'))
        labels = {key: val.strip('"') for key, val in labels.items()}
        key = f"{labels.get('verb')} {labels.get('group') or 'core'}/{labels.get('resource')}"
        out[key] += v - before.get(name, 0)
    return {key: round(v) for key, v in sorted(out.items()) if v >= 1}


def probes(before, after):
    """The operator's completeness probes between two scrapes, per result (watch_probes_total)."""
    return {
        result: increase(before, after, "event_series_watch_probes_total", result=result)
        for result in ("quiet", "changes", "behind", "failed")
    }


def quantile(m, kind, q):
    """The q-quantile of event_series_write_latency_seconds{kind}, interpolated linearly within its
    bucket (as PromQL's histogram_quantile does)."""
    buckets = sorted(
        (float(name.split('le="')[1].split('"')[0]), v)
        for name, v in m.items()
        if name.startswith("event_series_write_latency_seconds_bucket{") and f'kind="{kind}"' in name
    )
    total = buckets[-1][1] if buckets else 0
    if not total:
        return None
    rank, lower, below = q * total, 0.0, 0.0
    for le, v in buckets:
        if v >= rank:
            if le == float("inf"):
                return lower
            return round(lower + (le - lower) * (rank - below) / max(v - below, 1e-9), 3)
        lower, below = le, v
    return None


def audit_log():
    """Every successful write of an Event in the apiserver's audit log (rotated files included), read
    line by line: at 20,000 Pods the log holds hundreds of MB."""

    def lines():
        for path in sorted(glob.glob(os.path.join(os.environ["CLUSTER_DIR"], "audit*.log"))):
            with open(path) as audit:
                yield from audit

    return audit_writes(lines())


def emitter_writes(writes):
    """(namespace, Event name) -> times of every create and patch of a raw object through core/v1
    (bench/scale.sh turns on AUDIT_CORE_EVENTS for the steps; empty without it): the legacy
    recorders write once per occurrence, which bench/keys.py's explain_by_writes relies on."""
    out = defaultdict(list)
    for t, verb, group, obj in writes:
        if verb in ("create", "patch") and group == "":
            out[obj].append(t)
    return out


def workload(pods, namespaces):
    """Namespaces with their quota and refused ReplicaSet, Nodes, Pods (in creation order)."""
    nodes = max(10, -(-pods // PODS_PER_NODE))
    objs = {"nodes": [], "namespaces": [], "quotas": [], "replicasets": [], "pods": []}
    for i in range(nodes):
        objs["nodes"].append(
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {
                    "name": f"kwok-{i:04d}",
                    "annotations": {"kwok.x-k8s.io/node": "fake"},
                    "labels": {"type": "kwok", "kubernetes.io/hostname": f"kwok-{i:04d}"},
                },
            }
        )
    per_ns = [pods // namespaces + (1 if i < pods % namespaces else 0) for i in range(namespaces)]
    container = [{"name": "main", "image": "registry.invalid/app:1"}]
    n = 0
    for i, count in enumerate(per_ns):
        ns = f"scale-{i:04d}"
        objs["namespaces"].append({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
        # Room for this namespace's Pods and not one more: the ReplicaSet's Pod is refused.
        objs["quotas"].append(
            {
                "apiVersion": "v1",
                "kind": "ResourceQuota",
                "metadata": {"name": "pods", "namespace": ns},
                "spec": {"hard": {"pods": str(count)}},
            }
        )
        objs["replicasets"].append(
            {
                "apiVersion": "apps/v1",
                "kind": "ReplicaSet",
                "metadata": {"name": "refused", "namespace": ns},
                "spec": {
                    "replicas": 1,
                    "selector": {"matchLabels": {"app": "refused"}},
                    "template": {"metadata": {"labels": {"app": "refused"}}, "spec": {"containers": container}},
                },
            }
        )
        for j in range(count):
            labels, spec = {}, {"containers": container, "terminationGracePeriodSeconds": 0}
            if (n % 1000) < LOOP_SHARE * 1000:
                labels = {"bench.eventseries.dev/loop": "true", STOP: "true"}
            elif (n % 1000) < (LOOP_SHARE + UNSCHEDULABLE_SHARE) * 1000:
                labels = {STOP: "true"}
                spec["nodeSelector"] = {"bench.eventseries.dev/nowhere": "true"}
            objs["pods"].append(
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {"name": f"p-{j:05d}", "namespace": ns, "labels": labels},
                    "spec": spec,
                }
            )
            n += 1
    return objs


class Run:
    def __init__(self, out, pods, namespaces, with_operator, label):
        self.out, self.pods, self.namespaces = out, pods, namespaces
        self.with_operator, self.label = with_operator, label
        self.procs = {name: pid_of(name) for name in ("apiserver", "etcd", "kwok", "scheduler", "controller-manager")}
        if with_operator:
            self.procs["operator"] = int(os.environ["OP_PID"])
        self.samples = []
        # The apiserver's /metrics, /proc/stat and the operator's /metrics at the window's end,
        # where the drain starts.
        self.after_window = ({}, None, {})

    def cpu(self):
        return {name: cpu_seconds(pid) for name, pid in self.procs.items() if pid}

    def sample(self, t0, cpu0):
        row = {
            "t": round(time.monotonic() - t0),
            "cpu_s": {n: round(v - cpu0[n], 2) for n, v in self.cpu().items()},
            "rss_kib": {n: status_kib(pid, "VmRSS") for n, pid in self.procs.items() if pid},
        }
        if self.with_operator:
            m = operator_metrics()
            row["series_active"] = m.get("event_series_series_active", 0)
            row["writes_pending"] = m.get("event_series_writes_pending", 0)
        self.samples.append(row)
        active = (
            f" active {int(row['series_active'])} pending {int(row['writes_pending'])}" if self.with_operator else ""
        )
        log(f"{int(row['t']):4d} s: cpu {row['cpu_s']}{active}")

    def setup(self):
        objs = workload(self.pods, self.namespaces)
        started = time.monotonic()
        create(objs["nodes"])
        deadline = time.monotonic() + 300
        while sum(
            1
            for n in listed("nodes", "-l", "type=kwok")
            if any(c["type"] == "Ready" and c["status"] == "True" for c in n.get("status", {}).get("conditions", []))
        ) < len(objs["nodes"]):
            if time.monotonic() > deadline:
                raise RuntimeError("kwok's Nodes not Ready within 300 s")
            time.sleep(2)
        create(objs["namespaces"])
        create(objs["quotas"])
        # The quota controller must have counted the namespace before the Pods come, or the
        # ReplicaSet's Pod could slip in.
        while any(not q.get("status", {}).get("hard") for q in listed("resourcequota", "-A")):
            time.sleep(2)
        create(objs["pods"], workers=6)
        create(objs["replicasets"])
        log(
            f"created {len(objs['nodes'])} nodes, {int(self.namespaces)} namespaces, {int(self.pods)} pods"
            f" in {time.monotonic() - started:.0f} s"
        )
        return {"nodes": len(objs["nodes"]), "setup_s": round(time.monotonic() - started)}

    def stop_load(self):
        k("delete", "pods", "-A", "-l", STOP, "--wait=false", timeout=1800)
        k("delete", "replicasets", "-A", "--all", "--wait=false", timeout=1800)

    def drain(self):
        """Until no series is Ongoing (and the stopped Pods are gone)."""
        started = time.monotonic()
        while time.monotonic() - started < DRAIN_LIMIT:
            m = operator_metrics()
            if m.get("event_series_series_active", 1) == 0 and m.get("event_series_writes_pending", 1) == 0:
                return round(time.monotonic() - started)
            time.sleep(10)
        return None

    def check(self, load_stopped_at):
        raw = listed("events", "-A", "-l", "!app.kubernetes.io/managed-by")
        series = listed("events.v1.events.k8s.io", "-A", "-l", "app.kubernetes.io/managed-by=event-series")
        verdicts, differs, explained = defaultdict(int), [], []
        groups = tally(raw, series, window=WINDOW)
        audit = audit_log()
        writes = emitter_writes(audit)
        explain_by_writes(groups, writes, WINDOW)
        by_name = {(e["metadata"]["namespace"], e["metadata"]["name"]): e for e in raw}
        for key, g in groups.items():
            v = verdict_of(g)
            verdicts[v] += 1
            if v in ("exact", "lone"):
                continue
            # Everything known about the key, to tell an occurrence alone by design from one lost.
            row = {
                "namespace": key[0],
                "key": key[1],
                "verdict": v,
                **g,
                "raw_spans": [
                    [
                        by_name[(key[0], n)].get("firstTimestamp"),
                        by_name[(key[0], n)].get("lastTimestamp"),
                        by_name[(key[0], n)].get("count"),
                    ]
                    for n in g["names"]
                ],
                "writes": sorted(round(t, 3) for n in g["names"] for t in writes.get((key[0], n), [])),
                "series_spans": [
                    [
                        e.get("eventTime"),
                        (e.get("series") or {}).get("lastObservedTime"),
                        (e.get("series") or {}).get("count"),
                    ]
                    for e in series
                    if e["metadata"]["namespace"] == key[0]
                    and e.get("reason") == key[1].split(" ")[2]
                    and (e.get("regarding") or {}).get("name") == key[1].split(" ")[0].split("/", 1)[-1]
                ],
            }
            (differs if v == "differs" else explained).append(row)
        return {
            "keys": dict(verdicts),
            "differs": differs[:200],
            "explained": explained[:50],
            "raw_objects": len(raw),
            "finish_lateness_s": lateness_by_timestamps(series, audit, FINISH_AFTER),
            # Without AUDIT_CORE_EVENTS (the bill's runs) only the scheduler's keys have writes here.
            "end_to_end": series_figures(raw, series, audit, FINISH_AFTER, load_stopped_at),
            "raw_occurrences": sum(g["raw"] for g in groups.values()),
            "series_objects": len(series),
            "occurrences_in_series": sum(g["series"] for g in groups.values()),
            "series_not_finished": sum(
                1 for e in series if e["metadata"].get("labels", {}).get("eventseries.dev/state") != "Finished"
            ),
        }

    def window(self):
        """The load for LOAD_MINUTES, sampled, and the figures over WINDOW_MINUTES from its start; the
        load stopped inside the window when it is longer. Returns (figures, when the load stopped)."""
        api0, etcd0, cpu0, t0 = apiserver_metrics(), etcd_metrics(), self.cpu(), time.monotonic()
        stat0, op0 = machine(), operator_metrics() if self.with_operator else {}
        started_at = time.time()
        while time.monotonic() - t0 < LOAD_MINUTES * 60:
            time.sleep(SAMPLE_SECONDS)
            self.sample(t0, cpu0)
        stopped_at = None
        if WINDOW_MINUTES > LOAD_MINUTES:
            stopped_at = time.time()
            self.stop_load()
            while time.monotonic() - t0 < WINDOW_MINUTES * 60:
                time.sleep(SAMPLE_SECONDS)
                self.sample(t0, cpu0)
        api1, etcd1, cpu1, stat1 = apiserver_metrics(), etcd_metrics(), self.cpu(), machine()
        window = time.monotonic() - t0
        core_event_writes = sum(
            v
            for key, v in requests_by(api0, api1).items()
            if key.endswith(" core/events") and key.split()[0] in ("POST", "PATCH", "PUT")
        )
        watch_bytes = lambda group: increase(
            api0, api1, "apiserver_watch_events_sizes_sum", group=group, resource="events"
        )
        out = {
            "window_started_at": round(started_at, 3),
            "window_s": round(window),
            "cpu_percent": {n: round(100 * (cpu1[n] - cpu0[n]) / window, 1) for n in cpu1},
            "apiserver_rss_kib_mean": mean_of(row["rss_kib"].get("apiserver") for row in self.samples),
            "requests": requests_by(api0, api1),
            "core_event_writes": round(core_event_writes),
            "core_event_writes_per_s": round(core_event_writes / window, 1),
            "watch_bytes_core_events": watch_bytes(""),
            "watch_bytes_events_k8s_io": watch_bytes("events.k8s.io"),
            # None when etcd's /metrics did not answer at either end of the window.
            "etcd_puts": increase(etcd0, etcd1, "etcd_mvcc_put_total") if etcd0 and etcd1 else None,
            "etcd_deletes": increase(etcd0, etcd1, "etcd_mvcc_delete_total") if etcd0 and etcd1 else None,
            "etcd_txns": increase(etcd0, etcd1, "etcd_mvcc_txn_total") if etcd0 and etcd1 else None,
            "etcd_writes": etcd_writes(etcd0, etcd1, api0, api1),
            "machine_cpu": machine_cpu(stat0, stat1),
            "saturation": saturation(api0, api1),
            "samples": self.samples,
        }
        if self.with_operator:
            # Whether the window held what the bill is meant to: the series' finishes and refreshes.
            op1 = operator_metrics()
            out["operator_in_window"] = {
                **{
                    name: increase(op0, op1, "event_series_" + name)
                    for name in ("series_started_total", "series_finished_total", "occurrences_total")
                },
                "writes": {
                    kind: increase(op0, op1, "event_series_write_latency_seconds_count", kind=kind)
                    for kind in ("create", "heartbeat", "finish")
                },
                # The completeness probes: one-second metadata watches, in the requests' WATCH count.
                "probes": probes(op0, op1),
            }
        if stopped_at is None:
            stopped_at = time.time()
            self.stop_load()
        self.after_window = (api1, stat1, op1 if self.with_operator else {})
        return out, stopped_at

    def after_drain(self, stopped_at):
        """With the operator: the drain, then the operator's figures and every key checked."""
        out = {"drain_s": self.drain()}
        # The drain is the quiet part of a step: what the machine and the API server had left.
        api1, stat1, op1 = self.after_window
        api2, stat2 = apiserver_metrics(), machine()
        m = operator_metrics()
        out["drain"] = {
            "machine_cpu": machine_cpu(stat1, stat2),
            "saturation": saturation(api1, api2),
            # What the probes cost the API server while the finishes fell due in a quiet cluster.
            "probes": probes(op1, m),
            "requests": requests_by(api1, api2),
        }
        out["operator_peak_rss_kib"] = status_kib(self.procs["operator"], "VmHWM")
        out["operator_rss_kib_end"] = status_kib(self.procs["operator"], "VmRSS")
        out["latency_s"] = {
            kind: {
                "p50": quantile(m, kind, 0.5),
                "p99": quantile(m, kind, 0.99),
                "count": m.get(f'event_series_write_latency_seconds_count{{kind="{kind}"}}'),
            }
            for kind in ("create", "heartbeat", "finish")
        }
        out["operator"] = {
            name: m.get(name)
            for name in (
                "event_series_occurrences_total",
                "event_series_series_started_total",
                "event_series_series_finished_total",
                "event_series_watch_restarts_total",
                "event_series_watch_relists_total",
            )
        }
        out["operator_writes"] = {n: v for n, v in m.items() if n.startswith("event_series_api_requests_total")}
        out["counts"] = self.check(stopped_at)
        return out

    def run(self):
        result = {
            "label": self.label,
            "pods": self.pods,
            "namespaces": self.namespaces,
            "operator": self.with_operator,
            "load_minutes": LOAD_MINUTES,
            "window_minutes": WINDOW_MINUTES,
            "finish_after_s": FINISH_AFTER,
            "loop_share": LOOP_SHARE,
            "unschedulable_share": UNSCHEDULABLE_SHARE,
        }
        result.update(self.setup())
        figures, stopped_at = self.window()
        result.update(figures)
        result["load_stopped_at"] = round(stopped_at, 3)
        if self.with_operator:
            result.update(self.after_drain(stopped_at))
        with open(self.out, "w") as f:
            json.dump(result, f, indent=1)
        log(
            "done: "
            + json.dumps(
                {
                    key: result.get(key)
                    for key in ("cpu_percent", "core_event_writes_per_s", "machine_cpu", "latency_s", "counts")
                }
            )[:1500]
        )


def main():
    if len(sys.argv) != 7 or sys.argv[1] != "run":
        sys.exit(__doc__)
    Run(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5] == "1", sys.argv[6]).run()


if __name__ == "__main__":
    main()
