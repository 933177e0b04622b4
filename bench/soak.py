#!/usr/bin/env python3
"""The schedule of `just bench-soak` (bench/soak.sh starts the cluster and the operator first).

    soak.py run OUT               the whole soak; results in OUT
    soak.py summary OUT [AUDIT]   the summary again from OUT's files (after a change to the
                                  analysis); AUDIT: the cluster dir whose audit logs explain keys

Every action is logged to OUT/actions.jsonl, every minute's sample to OUT/samples.jsonl, every
checked key to OUT/keys.jsonl, so a summary can be recomputed without re-running two hours. An
action that fails is logged and the soak goes on: the summary counts failures.
"""

import datetime
import glob
import json
import os
import signal
import ssl
import statistics
import subprocess
import sys
import time
import urllib.request
from collections import defaultdict

from keys import lone_in_times, tally, verdict_of  # bench/, this file's folder, is on sys.path when it runs

NS = "event-series-system"
MANAGED = "app.kubernetes.io/managed-by=event-series"


def env_float(name, default):
    return float(os.environ.get(name, default))


MINUTES = env_float("SOAK_MINUTES", 120)
CYCLE_EVERY = env_float("SOAK_CYCLE_EVERY", 10)
CYCLE_LIFE = env_float("SOAK_CYCLE_LIFE", 25)
LEADER_EVERY = env_float("SOAK_LEADER_EVERY", 20)
APISERVER_AT = [float(x) for x in os.environ.get("SOAK_APISERVER_AT", "45 75").split()]
CRASH_PODS = int(os.environ.get("SOAK_CRASH_PODS", "2"))
# A namespace whose series are not all Finished this long after its workloads went is reported.
DRAIN_LIMIT = 15 * 60
# The default policy's seriesWindow, in seconds: occurrences further apart are separate series.
WINDOW = 6 * 60


class Soak:
    def __init__(self, out):
        self.out = out
        self.kubectl = os.environ["KUBECTL"]
        self.kubeconfig = os.environ["KUBECONFIG"]
        self.cluster = os.environ["CLUSTER_DIR"]
        self.t0 = time.monotonic()
        self.token = None
        self.image = None

    # --- plumbing ---

    def minute(self):
        return (time.monotonic() - self.t0) / 60

    def k(self, *args, stdin=None, timeout=90):
        r = subprocess.run(
            [self.kubectl, "--kubeconfig", self.kubeconfig, *args],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if r.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(args[:4])}: {r.stderr.strip()[:300]}")
        return r.stdout

    def kj(self, *args):
        return json.loads(self.k(*args, "-o", "json"))

    def apply(self, obj):
        self.k("apply", "-f", "-", stdin=json.dumps(obj))

    def record(self, name, row):
        row = {"t_min": round(self.minute(), 2), "at": time.strftime("%H:%M:%S"), **row}
        with open(os.path.join(self.out, name), "a") as f:
            f.write(json.dumps(row) + "\n")
        return row

    def act(self, what, fn, *args):
        """Runs one action; a failure is logged and counted, never fatal."""
        start = time.monotonic()
        try:
            detail = fn(*args) or {}
            ok = True
        except Exception as e:  # noqa: BLE001 - a soak goes on; the failure is in the summary
            detail, ok = {"error": str(e)[:500]}, False
        row = self.record(
            "actions.jsonl", {"action": what, "ok": ok, "seconds": round(time.monotonic() - start, 1), **detail}
        )
        print(
            f"{row['at']} soak: {row['t_min']:5.1f} min {what} {'ok' if ok else 'FAILED'} {json.dumps(detail)[:200]}",
            file=sys.stderr,
            flush=True,
        )
        return ok

    # --- the workloads ---

    def pod(self, name, args, extra=None):
        spec = {
            "restartPolicy": "Always",
            "dnsPolicy": "Default",
            "automountServiceAccountToken": False,
            "terminationGracePeriodSeconds": 1,
            "containers": [
                {
                    "name": "main",
                    "image": self.image,
                    "imagePullPolicy": "IfNotPresent",
                    "args": args,
                    "resources": {
                        "requests": {"cpu": "1m", "memory": "8Mi"},
                        "limits": {"cpu": "100m", "memory": "32Mi"},
                    },
                }
            ],
        }
        spec.update(extra or {})
        return {"metadata": {"name": name, "labels": {"soak": name}}, "spec": spec}

    def start_cycle(self, ns):
        self.k("create", "namespace", ns)
        # Room for the crash loops and the unschedulable Pod, none for the Deployment's Pod.
        self.apply(
            {
                "apiVersion": "v1",
                "kind": "ResourceQuota",
                "metadata": {"name": "pods", "namespace": ns},
                "spec": {"hard": {"pods": str(CRASH_PODS + 1)}},
            }
        )
        wait_until(60, lambda: self.kj("-n", ns, "get", "resourcequota", "pods").get("status", {}).get("hard"))
        pods = [self.pod(f"crash-{i}", ["--no-such-flag"]) for i in range(CRASH_PODS)]
        pods.append(self.pod("unschedulable", ["--no-such-flag"], {"nodeSelector": {"soak": "nowhere"}}))
        for p in pods:
            # The namespace's default ServiceAccount comes from the controller-manager, a moment later.
            wait_until(
                60,
                lambda p=p: self.try_apply(
                    {
                        "apiVersion": "v1",
                        "kind": "Pod",
                        "metadata": {**p["metadata"], "namespace": ns},
                        "spec": p["spec"],
                    }
                ),
            )
        tpl = self.pod("refused", ["--no-such-flag"])
        self.apply(
            {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": {"name": "refused", "namespace": ns},
                "spec": {
                    "replicas": 1,
                    "selector": {"matchLabels": {"soak": "refused"}},
                    "template": {"metadata": {"labels": {"soak": "refused"}}, "spec": tpl["spec"]},
                },
            }
        )
        return {"namespace": ns, "loops": CRASH_PODS + 2}

    def try_apply(self, obj):
        try:
            self.apply(obj)
            return True
        except RuntimeError:
            return False

    def stop_cycle(self, ns):
        self.k("-n", ns, "delete", "deployment,pod", "--all", "--wait=false")
        return {"namespace": ns}

    def ongoing(self, ns):
        items = self.kj("-n", ns, "get", "events.v1.events.k8s.io", "-l", MANAGED + ",eventseries.dev/state=Ongoing")
        pods = self.kj("-n", ns, "get", "pods")["items"]
        return len(items["items"]) + len(pods)

    def check_cycle(self, ns, drained):
        """Every key of the namespace: the emitters' raw occurrences against the series' counts."""
        raw = self.kj("-n", ns, "get", "events", "-l", "!app.kubernetes.io/managed-by")["items"]
        series = self.kj("-n", ns, "get", "events.v1.events.k8s.io", "-l", MANAGED)["items"]
        groups = {key: g for (_, key), g in tally(raw, series).items()}
        verdicts = defaultdict(int)
        for key, g in sorted(groups.items()):
            verdict = verdict_of(g)
            verdicts[verdict] += 1
            self.record("keys.jsonl", {"namespace": ns, "key": key, "verdict": verdict, "drained": drained, **g})
        self.k("delete", "namespace", ns, "--wait=false")
        return {"namespace": ns, "drained": drained, **verdicts}

    # --- the faults ---

    def delete_leader(self):
        lease = self.kj("-n", NS, "get", "lease", "event-series")
        holder = lease["spec"].get("holderIdentity") or ""
        if not holder:
            raise RuntimeError("no holder")
        self.k("-n", NS, "delete", "pod", holder, "--wait=false")
        start = time.monotonic()
        new = holder
        while time.monotonic() - start < 120:
            time.sleep(1)
            try:
                new = self.kj("-n", NS, "get", "lease", "event-series")["spec"].get("holderIdentity") or ""
            except RuntimeError:
                continue
            if new and new != holder:
                break
        return {
            "deleted": holder,
            "new_holder": new,
            "handover_seconds": round(time.monotonic() - start, 1) if new != holder else None,
        }

    def restart_apiserver(self):
        pid_file = os.path.join(self.cluster, "apiserver.pid")
        with open(pid_file) as f:
            pid = int(f.read().strip())
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = f.read().split(b"\0")[:-1]
        os.kill(pid, signal.SIGTERM)
        start = time.monotonic()
        while os.path.exists(f"/proc/{pid}") and time.monotonic() - start < 60:
            time.sleep(0.2)
        if os.path.exists(f"/proc/{pid}"):
            os.kill(pid, signal.SIGKILL)
            time.sleep(1)
        with open(os.path.join(self.cluster, "apiserver.log"), "ab") as log:
            proc = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        with open(pid_file, "w") as f:
            f.write(f"{proc.pid}\n")
        wait_until(180, lambda: self.ready())
        return {"old_pid": pid, "new_pid": proc.pid, "down_seconds": round(time.monotonic() - start, 1)}

    def ready(self):
        try:
            return self.k("get", "--raw", "/readyz", timeout=10).strip() == "ok"
        except (RuntimeError, subprocess.TimeoutExpired):
            return False

    # --- the samples ---

    def sample(self):
        pods = self.kj("-n", NS, "get", "pods", "-l", "app.kubernetes.io/name=event-series")["items"]
        holder = self.kj("-n", NS, "get", "lease", "event-series")["spec"].get("holderIdentity") or ""
        pids = operator_pids()
        replicas = []
        for p in pods:
            name = p["metadata"]["name"]
            r = {
                "pod": name,
                "leader": name == holder,
                "phase": p["status"].get("phase"),
                "restarts": sum(c.get("restartCount", 0) for c in p["status"].get("containerStatuses") or []),
            }
            pid = pids.get(name)
            if pid:
                r.update(proc_stats(pid))
            ip = p["status"].get("podIP")
            if ip:
                r.update(self.metrics(ip))
            replicas.append(r)
        writes = self.apiserver_writes()
        return {"holder": holder, "replicas": replicas, **writes}

    def metrics(self, ip):
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        req = urllib.request.Request(f"https://{ip}:8443/metrics", headers={"Authorization": "Bearer " + self.token})
        try:
            text = urllib.request.urlopen(req, context=ctx, timeout=5).read().decode()
        except Exception as e:  # noqa: BLE001 - a replica going away mid-scrape is normal here
            return {"metrics_error": str(e)[:120]}
        want = {
            "event_series_runtime_tasks": "tasks",
            "event_series_series_active": "series_active",
            "event_series_writes_pending": "writes_pending",
        }
        out = {"api_requests": 0}
        for line in text.splitlines():
            if line.startswith("#"):
                continue
            name, _, value = line.rpartition(" ")
            if name in want:
                out[want[name]] = float(value)
            elif name.startswith("event_series_api_requests_total{"):
                out["api_requests"] += float(value)
        return out

    def apiserver_writes(self):
        """The apiserver's own count of Event writes per group since it (re)started."""
        try:
            text = self.k("get", "--raw", "/metrics", timeout=20)
        except (RuntimeError, subprocess.TimeoutExpired):
            return {}
        core = ev = 0.0
        for line in text.splitlines():
            if not line.startswith("apiserver_request_total{") or 'resource="events"' not in line:
                continue
            if 'subresource=""' not in line or any(f'verb="{v}"' in line for v in ("GET", "LIST", "WATCH")):
                continue
            value = float(line.rpartition(" ")[2])
            if 'group=""' in line:
                core += value
            elif 'group="events.k8s.io"' in line:
                ev += value
        return {"apiserver_core_writes": core, "apiserver_events_k8s_io_writes": ev}

    # --- the schedule ---

    def run(self):
        self.image = self.kj("-n", NS, "get", "deployment", "event-series")["spec"]["template"]["spec"]["containers"][
            0
        ]["image"]
        self.token = self.k("-n", NS, "create", "token", "soak-metrics", "--duration=12h").strip()
        starts = [i * CYCLE_EVERY for i in range(1000) if i * CYCLE_EVERY + CYCLE_LIFE <= MINUTES - 10]
        leader_at = [m * LEADER_EVERY for m in range(1, 1000) if m * LEADER_EVERY < MINUTES - 10]
        apiserver_at = list(APISERVER_AT)
        cycles = {}  # ns -> {"start", "stopped"}
        next_sample = 0.0
        self.record(
            "actions.jsonl",
            {
                "action": "plan",
                "ok": True,
                "cycles": starts,
                "leader_deletes": leader_at,
                "apiserver_restarts": apiserver_at,
                "minutes": MINUTES,
                "crash_pods": CRASH_PODS,
                "image": self.image,
            },
        )
        while True:
            now = self.minute()
            if now >= next_sample:
                self.act("sample", lambda: self.record("samples.jsonl", self.sample()) and {})
                next_sample += 1
            if starts and now >= starts[0]:
                ns = f"soak-{len(cycles):02d}"
                cycles[ns] = {"start": starts.pop(0), "stopped": None, "checked": False}
                self.act("start " + ns, self.start_cycle, ns)
            for ns, c in cycles.items():
                if c["stopped"] is None and now >= c["start"] + CYCLE_LIFE:
                    c["stopped"] = now
                    self.act("stop " + ns, self.stop_cycle, ns)
                elif c["stopped"] is not None and not c["checked"]:
                    late = (now - c["stopped"]) * 60 > DRAIN_LIMIT
                    if late or self.quiet(ns):
                        c["checked"] = True
                        self.act("check " + ns, self.check_cycle, ns, not late)
            if leader_at and now >= leader_at[0]:
                leader_at.pop(0)
                self.act("delete leader", self.delete_leader)
            if apiserver_at and now >= apiserver_at[0]:
                apiserver_at.pop(0)
                self.act("restart apiserver", self.restart_apiserver)
            if now >= MINUTES and all(c["checked"] for c in cycles.values()) and not starts:
                break
            time.sleep(5)
        self.act("audit", self.audit)
        summarise(self.out, self.cluster)

    def quiet(self, ns):
        try:
            return self.ongoing(ns) == 0
        except RuntimeError:
            return False

    def audit(self):
        """Writes per namespace and writer, from the apiserver's audit log (all its rotated files)."""
        writers = defaultdict(lambda: defaultdict(int))
        for e, ref in event_writes(self.cluster):
            ns = ref.get("namespace") or ""
            if ns.startswith("soak-"):
                agent = (e.get("userAgent") or "").split("/")[0]
                writers[ns][f"{agent} {ref.get('apiGroup') or 'core'}"] += 1
        with open(os.path.join(self.out, "writes.json"), "w") as f:
            json.dump(writers, f, indent=1, sort_keys=True)
        return {"namespaces": len(writers)}


def wait_until(seconds, fn):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if fn():
            return
        time.sleep(1)
    raise RuntimeError(f"not within {int(seconds)}s")


def operator_pids():
    """POD_NAME -> pid of every event-series process on this machine that runs as a Pod."""
    out = {}
    for d in glob.glob("/proc/[0-9]*"):
        try:
            with open(d + "/comm") as f:
                if f.read().strip() != "event-series":
                    continue
            with open(d + "/environ", "rb") as f:
                env = f.read().split(b"\0")
        except OSError:
            continue
        for kv in env:
            if kv.startswith(b"POD_NAME="):
                out[kv[9:].decode()] = int(d[6:])
    return out


def proc_stats(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            status = dict(line.split(":", 1) for line in f if ":" in line)
        return {
            "pid": pid,
            "rss_kib": int(status["VmRSS"].split()[0]),
            "threads": int(status["Threads"]),
            "fds": len(os.listdir(f"/proc/{pid}/fd")),
        }
    except (OSError, KeyError, ValueError):
        return {"pid": pid}


def occurrence_times(cluster):
    """(namespace, involved object name) -> sorted times of every Event write by an emitter (core/v1
    or events.k8s.io/v1, never the operator's): taken as one occurrence each, which `explain` only
    believes when the number of writes equals the raw objects' total count (legacy recorders patch
    count + 1 per occurrence; the scheduler's recorder here wrote each retry)."""
    times = defaultdict(list)
    for e, ref in event_writes(cluster):
        if e.get("verb") not in ("create", "patch") or (e.get("responseStatus") or {}).get("code", 500) >= 300:
            continue
        if (e.get("userAgent") or "").startswith("event-series/") or not (ref.get("namespace") or "").startswith(
            "soak-"
        ):
            continue
        at = datetime.datetime.fromisoformat(e["stageTimestamp"].replace("Z", "+00:00")).timestamp()
        times[(ref["namespace"], ref["name"].rsplit(".", 1)[0])].append(at)
    return {k: sorted(v) for k, v in times.items()}


def event_writes(cluster):
    """(entry, objectRef) of every completed write of an Event in the apiserver's audit logs (the
    current file and the rotated ones)."""
    for path in sorted(glob.glob(os.path.join(cluster, "audit*.log"))):
        with open(path) as f:
            for line in f:
                try:
                    e = json.loads(line)
                except ValueError:
                    continue
                ref = e.get("objectRef") or {}
                if e.get("stage") != "ResponseComplete" or ref.get("resource") != "events":
                    continue
                if e.get("verb") in ("get", "list", "watch"):
                    continue
                yield e, ref


def lone_by_design(times, window=WINDOW):
    """Occurrences with no other within `window` before or after: never part of a series."""
    return lone_in_times(times, window)


def explain(keys, cluster):
    """A key whose series hold fewer occurrences than its raw objects is explained when the missing
    ones are exactly the occurrences that stood alone (more than seriesWindow from any other of
    the same object's events, as the emitter's writes were timed by the apiserver's audit log).
    Only keys whose object has no other reason with raw events can be judged this way."""
    if not cluster:
        return
    times = occurrence_times(cluster)
    reasons = defaultdict(set)
    for k in keys:
        reasons[(k["namespace"], k["key"].split(" ")[0])].add(k["key"])
    for k in keys:
        if k["verdict"] != "differs":
            continue
        obj = k["key"].split(" ")[0]
        if len(reasons[(k["namespace"], obj)]) != 1:
            continue
        t = times.get((k["namespace"], obj.split("/", 1)[1]), [])
        lone = lone_by_design(t)
        if len(t) == k["raw"] and k["series"] == k["raw"] - lone:
            k["verdict"] = "exact"
            k["lone_by_design"] = lone


def read_jsonl(path):
    with open(path) as f:
        return [json.loads(line) for line in f]


def summarise(out, cluster=None):
    samples = read_jsonl(os.path.join(out, "samples.jsonl"))
    keys = read_jsonl(os.path.join(out, "keys.jsonl")) if os.path.exists(os.path.join(out, "keys.jsonl")) else []
    explain(keys, cluster)
    actions = read_jsonl(os.path.join(out, "actions.jsonl"))
    writes = {}
    if os.path.exists(os.path.join(out, "writes.json")):
        with open(os.path.join(out, "writes.json")) as f:
            writes = json.load(f)
    leaders = [
        dict(r, t_min=s["t_min"]) for s in samples for r in s.get("replicas", []) if r.get("leader") and "rss_kib" in r
    ]
    everyone = [dict(r, t_min=s["t_min"]) for s in samples for r in s.get("replicas", []) if "rss_kib" in r]
    warm = [r for r in leaders if r["t_min"] >= 10]
    half = len(warm) // 2

    def stat(rows, field):
        vals = [r[field] for r in rows if field in r]
        return {"median": statistics.median(vals), "max": max(vals)} if vals else None

    tenures = defaultdict(list)
    for r in leaders:
        tenures[r["pod"]].append(r)
    summary = {
        "samples": len(samples),
        "leader_first_half": {f: stat(warm[:half], f) for f in ("rss_kib", "fds", "threads", "tasks")},
        "leader_second_half": {f: stat(warm[half:], f) for f in ("rss_kib", "fds", "threads", "tasks")},
        "any_replica_max": {f: (stat(everyone, f) or {}).get("max") for f in ("rss_kib", "fds", "threads", "tasks")},
        "tenures": {
            pod: {
                "from_min": rows[0]["t_min"],
                "to_min": rows[-1]["t_min"],
                "rss_kib": [rows[0]["rss_kib"], rows[-1]["rss_kib"]],
                "fds": [rows[0].get("fds"), rows[-1].get("fds")],
                "tasks": [rows[0].get("tasks"), rows[-1].get("tasks")],
            }
            for pod, rows in tenures.items()
        },
        "container_restarts": max((r.get("restarts", 0) for r in everyone), default=0),
        "keys": {v: sum(1 for k in keys if k["verdict"] == v) for v in ("exact", "lone", "differs")},
        "occurrences_in_series": sum(k["series"] for k in keys),
        "raw_occurrences": sum(k["raw"] for k in keys),
        "differs": [k for k in keys if k["verdict"] == "differs"],
        "explained": [k for k in keys if "lone_by_design" in k],
        "namespaces_checked": len({k["namespace"] for k in keys}),
        "namespaces_not_drained": sorted({k["namespace"] for k in keys if not k["drained"]}),
        "failed_actions": [a for a in actions if not a.get("ok")],
        "leader_deletes": [a for a in actions if a["action"] == "delete leader"],
        "apiserver_restarts": [a for a in actions if a["action"] == "restart apiserver"],
    }
    loops = [a.get("loops") for a in actions if a["action"].startswith("start ") and a.get("ok")]
    op = [sum(v for w, v in per.items() if w.startswith("event-series events.k8s.io")) for per in writes.values()]
    emitters = [sum(v for w, v in per.items() if not w.startswith("event-series ")) for per in writes.values()]
    if op and loops:
        summary["writes"] = {
            "namespaces": len(op),
            "loops_per_namespace": loops[0],
            "event_series_writes_per_namespace": {"median": statistics.median(op), "max": max(op)},
            "event_series_writes_per_loop": round(sum(op) / (len(op) * loops[0]), 2),
            "emitter_writes_per_namespace": {"median": statistics.median(emitters), "max": max(emitters)},
        }
    with open(os.path.join(out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    brief = {
        k: summary[k]
        for k in (
            "samples",
            "leader_first_half",
            "leader_second_half",
            "any_replica_max",
            "keys",
            "occurrences_in_series",
            "raw_occurrences",
            "namespaces_not_drained",
        )
    }
    brief["failed_actions"] = len(summary["failed_actions"])
    brief["writes"] = summary.get("writes")
    print(json.dumps(brief, indent=1))


def main():
    if len(sys.argv) not in (3, 4) or sys.argv[1] not in ("run", "summary"):
        sys.exit(__doc__)
    if sys.argv[1] == "run":
        Soak(sys.argv[2]).run()
    else:
        summarise(sys.argv[2], sys.argv[3] if len(sys.argv) == 4 else None)


if __name__ == "__main__":
    main()
