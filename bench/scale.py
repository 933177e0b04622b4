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
unschedulable Pods and the ReplicaSets go. With the operator, the run waits until no series is Ongoing and
then checks every key: the sum of its raw objects' counts against its series' counts (bench/keys.py).

The apiserver's metrics are read before and after the load window: requests per verb and resource, the
bytes it sent on watches of Events; etcd's puts. The operator's write-latency histogram gives p50/p99
per kind.
"""

import contextlib
import datetime
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

LOOP_SHARE = float(os.environ.get("LOOP_SHARE", "0.2"))
UNSCHEDULABLE_SHARE = float(os.environ.get("UNSCHEDULABLE_SHARE", "0.02"))
LOAD_MINUTES = float(os.environ.get("LOAD_MINUTES", "4"))
SAMPLE_SECONDS = 15
DRAIN_LIMIT = 15 * 60
# The runs' policy (bench/scale.sh): seriesWindow 3m, in seconds.
WINDOW = 180
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
    return metrics(urllib.request.urlopen(os.environ["ETCD_URL"] + "/metrics", timeout=20).read().decode())


def operator_metrics():
    return metrics(urllib.request.urlopen(os.environ["OP_URL"] + "/metrics", timeout=20).read().decode())


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


def finish_lateness(series, finish_after=180):
    """Exact finish lateness per series: the time of its last write in the apiserver's audit log
    (the Finished write) minus (lastObservedTime + finishAfter). p50, p99, max over every series."""
    last = {}
    for path in glob.glob(os.path.join(os.environ["CLUSTER_DIR"], "audit*.log")):
        with open(path) as audit:
            for line in audit:
                e = json.loads(line)
                ref = e.get("objectRef") or {}
                if (
                    e.get("stage") != "ResponseComplete"
                    or ref.get("apiGroup") != "events.k8s.io"
                    or (e.get("responseStatus") or {}).get("code", 500) >= 300
                ):
                    continue
                at = parse_time(e["stageTimestamp"])
                name = (ref.get("namespace"), ref.get("name"))
                last[name] = max(last.get(name, at), at)
    late = sorted(
        last[(e["metadata"]["namespace"], e["metadata"]["name"])]
        - parse_time((e.get("series") or {}).get("lastObservedTime") or e["eventTime"])
        - finish_after
        for e in series
        if (e["metadata"]["namespace"], e["metadata"]["name"]) in last
    )
    if not late:
        return None
    return {
        "series": len(late),
        "p50": round(late[len(late) // 2], 2),
        "p99": round(late[min(len(late) - 1, int(len(late) * 0.99))], 2),
        "max": round(late[-1], 2),
    }


def emitter_writes():
    """(namespace, Event name) -> times of every create and patch of a core/v1 Event by anyone but the
    operator, from the apiserver's audit log (bench/scale.sh turns on AUDIT_CORE_EVENTS for the steps;
    empty without it)."""
    writes = defaultdict(list)
    for path in glob.glob(os.path.join(os.environ["CLUSTER_DIR"], "audit*.log")):
        with open(path) as audit:
            for line in audit:
                e = json.loads(line)
                ref = e.get("objectRef") or {}
                if e.get("stage") != "ResponseComplete" or ref.get("resource") != "events" or ref.get("apiGroup"):
                    continue
                if e.get("verb") not in ("create", "patch") or (e.get("responseStatus") or {}).get("code", 500) >= 300:
                    continue
                writes[(ref.get("namespace"), ref.get("name"))].append(parse_time(e["stageTimestamp"]))
    return writes


def parse_time(s):
    return datetime.datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()


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

    def check(self):
        raw = listed("events", "-A", "-l", "!app.kubernetes.io/managed-by")
        series = listed("events.v1.events.k8s.io", "-A", "-l", "app.kubernetes.io/managed-by=event-series")
        verdicts, differs, explained = defaultdict(int), [], []
        groups = tally(raw, series, window=WINDOW)
        writes = emitter_writes()
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
            "finish_lateness_s": finish_lateness(series),
            "raw_occurrences": sum(g["raw"] for g in groups.values()),
            "series_objects": len(series),
            "occurrences_in_series": sum(g["series"] for g in groups.values()),
            "series_not_finished": sum(
                1 for e in series if e["metadata"].get("labels", {}).get("eventseries.dev/state") != "Finished"
            ),
        }

    def run(self):
        result = {
            "label": self.label,
            "pods": self.pods,
            "namespaces": self.namespaces,
            "operator": self.with_operator,
            "load_minutes": LOAD_MINUTES,
            "loop_share": LOOP_SHARE,
            "unschedulable_share": UNSCHEDULABLE_SHARE,
        }
        result.update(self.setup())
        api0, etcd0, cpu0, t0 = apiserver_metrics(), etcd_metrics(), self.cpu(), time.monotonic()
        while time.monotonic() - t0 < LOAD_MINUTES * 60:
            time.sleep(SAMPLE_SECONDS)
            self.sample(t0, cpu0)
        api1, etcd1, cpu1 = apiserver_metrics(), etcd_metrics(), self.cpu()
        window = time.monotonic() - t0
        core_event_writes = sum(
            v
            for key, v in requests_by(api0, api1).items()
            if key.endswith(" core/events") and key.split()[0] in ("POST", "PATCH", "PUT")
        )
        watch_bytes = sum(
            v - api0.get(n, 0)
            for n, v in api1.items()
            if n.startswith("apiserver_watch_events_sizes_sum{") and 'resource="events"' in n and 'group=""' in n
        )
        result.update(
            {
                "window_s": round(window),
                "cpu_percent": {n: round(100 * (cpu1[n] - cpu0[n]) / window, 1) for n in cpu1},
                "requests": requests_by(api0, api1),
                "core_event_writes_per_s": round(core_event_writes / window, 1),
                "watch_bytes_core_events": round(watch_bytes),
                "etcd_puts": round(
                    sum(v - etcd0.get(n, 0) for n, v in etcd1.items() if n.startswith("etcd_mvcc_put_total"))
                ),
                "etcd_txns": round(
                    sum(v - etcd0.get(n, 0) for n, v in etcd1.items() if n.startswith("etcd_mvcc_txn_total"))
                ),
                "samples": self.samples,
            }
        )
        self.stop_load()
        if self.with_operator:
            result["drain_s"] = self.drain()
            m = operator_metrics()
            result["operator_peak_rss_kib"] = status_kib(self.procs["operator"], "VmHWM")
            result["operator_rss_kib_end"] = status_kib(self.procs["operator"], "VmRSS")
            result["latency_s"] = {
                kind: {
                    "p50": quantile(m, kind, 0.5),
                    "p99": quantile(m, kind, 0.99),
                    "count": m.get(f'event_series_write_latency_seconds_count{{kind="{kind}"}}'),
                }
                for kind in ("create", "heartbeat", "refresh", "finish")
            }
            result["operator"] = {
                name: m.get(name)
                for name in (
                    "event_series_occurrences_total",
                    "event_series_series_started_total",
                    "event_series_series_finished_total",
                    "event_series_watch_restarts_total",
                    "event_series_watch_relists_total",
                )
            }
            result["operator_writes"] = {n: v for n, v in m.items() if n.startswith("event_series_api_requests_total")}
            result["counts"] = self.check()
        with open(self.out, "w") as f:
            json.dump(result, f, indent=1)
        log(
            "done: "
            + json.dumps(
                {key: result.get(key) for key in ("cpu_percent", "core_event_writes_per_s", "latency_s", "counts")}
            )[:1500]
        )


def main():
    if len(sys.argv) != 7 or sys.argv[1] != "run":
        sys.exit(__doc__)
    Run(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5] == "1", sys.argv[6]).run()


if __name__ == "__main__":
    main()
