"""The figures of a `just bench-scale` run that come from the API server's own records: its audit log
(end-to-end latencies, finish lateness), its /metrics (APF rejections, 429s) and the machine's
/proc/stat (idle and steal CPU). bench/scale.py reads them; the functions here only compute, so that
bench/test_scale_figures.py can check them on made-up input.

Timing comes from the audit log's stageTimestamp at ResponseComplete, on both sides: an emitter's
write of a raw Event and the operator's write of a series object are timed by the same clock at the
same point of the request, whatever the emitters' or the operator's clocks say.
"""

import bisect
import datetime
import json
import math
from collections import defaultdict

from keys import raw_key, series_key  # bench/, this file's folder, is on sys.path when it runs

WRITES = ("create", "update", "patch")


def parse_time(s):
    return datetime.datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()


def audit_writes(lines):
    """Every successful write of an Event, either API group, from audit log lines (JSON, one a line):
    (time, verb, API group, (namespace, name)), sorted by time.

    The audit policy records these at level Metadata (hack/cluster-up.sh): no body, only objectRef.
    A create's objectRef carries the name from the object in the request, so a write can be tied to
    the object it made. The scheduler writes its raw events through events.k8s.io, the kubelet-style
    recorders through core/v1: both groups are one resource, and which objects are raw events and
    which are series objects is told by the objects listed at the end, not by the group."""
    out = []
    for line in lines:
        # Most lines are Leases: skip them before paying for the JSON.
        if '"events"' not in line:
            continue
        e = json.loads(line)
        ref = e.get("objectRef") or {}
        if e.get("stage") != "ResponseComplete" or ref.get("resource") != "events" or ref.get("subresource"):
            continue
        if e.get("verb") not in WRITES or (e.get("responseStatus") or {}).get("code", 500) >= 300:
            continue
        out.append(
            (
                parse_time(e["stageTimestamp"]),
                e["verb"],
                ref.get("apiGroup") or "",
                (ref.get("namespace"), ref.get("name")),
            )
        )
    out.sort()
    return out


def percentiles(values, digits=3):
    """count, p50, p99 and max of `values` (nearest rank: a value that was measured, never one
    interpolated between two); None when there are none."""
    if not values:
        return None
    v = sorted(values)
    rank = lambda q: v[max(0, math.ceil(q * len(v)) - 1)]
    return {
        "count": len(v),
        "p50": round(rank(0.5), digits),
        "p99": round(rank(0.99), digits),
        "max": round(v[-1], digits),
    }


def writes_by_object(writes):
    """(namespace, name) -> [(time, verb)] in time order."""
    out = defaultdict(list)
    for t, verb, _group, obj in writes:
        out[obj].append((t, verb))
    return out


def emitter_writes_by_key(writes, raw):
    """key (bench/keys.py) -> times of the emitters' writes of its raw objects, in order.

    A write is tied to its key through the raw objects listed at the end of the run: each names its
    namespace, regarding object, reason and reporter, the key bench/keys.py checks the counts by. In
    this benchmark that key is as fine as the operator's (one reporting instance and one uid per
    object), and no raw object is deleted before the list (the event TTL is an hour)."""
    key_of = {(e["metadata"]["namespace"], e["metadata"]["name"]): raw_key(e) for e in raw}
    out = defaultdict(list)
    for t, _verb, _group, obj in writes:
        key = key_of.get(obj)
        if key is not None:
            out[key].append(t)
    return out


def series_figures(raw, series, writes, finish_after, load_stopped_at=None):
    """End-to-end latencies and finish lateness per series, from the audit log's writes (`writes`, as
    audit_writes returns them), the raw objects (`raw`, core/v1 as listed) and the series objects
    (`series`, events.k8s.io/v1 as listed) at the end of a run.

    For a series object of key K, its occurrences' writes are the emitters' writes of K from its
    eventTime (its first occurrence's timestamp, less 1 s: legacy timestamps are whole seconds, and a
    write never precedes its own timestamp) to its last write (a Finished series; an Ongoing one has
    no end). Then:
    - create: its create minus the write of its second occurrence (the one that makes a series), or
      of the first when only one was written before the create (a raw object first seen counting two);
    - refresh: for every occurrence written after the create, the object's next write minus the
      occurrence's write; an occurrence whose next write is the Finished one is counted as shown
      only by the finish, not here (that wait is the finish's);
    - finish lateness (Finished series): its last write, the one that wrote it Finished, minus its
      last occurrence's write, minus finishAfter. "loaded" when that finish was due
      (last occurrence's write + finishAfter) before the load stopped, "quiet" otherwise.
    A write of K's next series that lands before this one's finish would be taken as this one's: only
    an emitter writing an occurrence minutes after its timestamp does that, and then it makes the
    lateness look smaller, never larger."""
    by_key = emitter_writes_by_key(writes, raw)
    objects = writes_by_object(writes)
    create, refresh, loaded, quiet = [], [], [], []
    only_by_finish = unattributed = 0
    for s in series:
        own = objects.get((s["metadata"]["namespace"], s["metadata"]["name"]))
        finished = (s["metadata"].get("labels") or {}).get("eventseries.dev/state") == "Finished"
        start = s.get("eventTime") or (s.get("series") or {}).get("lastObservedTime")
        if not own or not start:
            unattributed += 1
            continue
        times = [t for t, _ in own]
        end = times[-1] if finished else math.inf
        first = parse_time(start) - 1
        occurrences = [t for t in by_key.get(series_key(s), []) if first <= t <= end]
        if not occurrences:
            unattributed += 1
            continue
        created = next((t for t, verb in own if verb == "create"), None)
        if created is not None:
            before = [t for t in occurrences if t <= created]
            if before:
                create.append(created - before[min(1, len(before) - 1)])
            for t in occurrences:
                if t <= created:
                    continue
                i = bisect.bisect_right(times, t)
                if i == len(times):
                    continue  # not written since: an Ongoing series at the end
                if finished and i == len(times) - 1:
                    only_by_finish += 1
                    continue
                refresh.append(times[i] - t)
        if finished:
            last = occurrences[-1]
            due = last + finish_after
            late = times[-1] - due
            (quiet if load_stopped_at is not None and due >= load_stopped_at else loaded).append(late)
    return {
        "create_s": percentiles(create),
        "refresh_s": percentiles(refresh),
        "occurrences_shown_only_by_the_finish": only_by_finish,
        "finish_lateness_s": {
            "loaded": percentiles(loaded),
            "quiet": percentiles(quiet),
            "all": percentiles(loaded + quiet),
        },
        "series_without_writes_seen": unattributed,
    }


def lateness_by_timestamps(series, writes, finish_after):
    """The earlier measure, kept beside the new one: each series' last write in the audit log minus
    its lastObservedTime (the emitter's timestamp of its last occurrence) minus finishAfter. It charges
    the operator with the time an emitter held an occurrence before writing it."""
    last = {}
    for t, _verb, _group, obj in writes:
        last[obj] = t
    late = [
        last[(e["metadata"]["namespace"], e["metadata"]["name"])]
        - parse_time((e.get("series") or {}).get("lastObservedTime") or e["eventTime"])
        - finish_after
        for e in series
        if (e["metadata"]["namespace"], e["metadata"]["name"]) in last
    ]
    p = percentiles(late, digits=2)
    # "series" is what the result files before the count was renamed call it.
    return None if p is None else {"series": p.pop("count"), **p}


def proc_stat_cpu(text):
    """The machine's CPU times (/proc/stat's "cpu" line, all CPUs together) in clock ticks."""
    for line in text.splitlines():
        if line.startswith("cpu "):
            return [int(x) for x in line.split()[1:]]
    return None


def machine_cpu(before, after):
    """Idle, iowait and steal as % of all the machine's CPU time between two proc_stat_cpu readings
    (user nice system idle iowait irq softirq steal; guest time is already inside user)."""
    if not before or not after:
        return None
    d = [a - b for a, b in zip(after, before)]
    total = sum(d[:8])
    if total <= 0:
        return None
    share = lambda i: round(100 * d[i] / total, 1) if len(d) > i else None
    return {"idle_percent": share(3), "iowait_percent": share(4), "steal_percent": share(7)}


def labels_of(name):
    """The labels of a metric line's name, `family{a="x",b="y"}` -> {"a": "x", "b": "y"}."""
    if "{" not in name:
        return {}
    out = {}
    for part in name[name.index("{") + 1 : -1].split('",'):
        if "=" in part:
            k, v = part.split("=", 1)
            out[k] = v.strip('"')
    return out


def increase(before, after, family, **want):
    """The increase of a counter family between two scrapes, summed over the series whose labels
    match `want`."""
    total = 0.0
    for name, v in after.items():
        if name != family and not name.startswith(family + "{"):
            continue
        labels = labels_of(name)
        if all(labels.get(k) == w for k, w in want.items()):
            total += v - before.get(name, 0)
    return round(total)


def saturation(before, after):
    """What the API server refused between two scrapes of its /metrics: requests API Priority and
    Fairness rejected (per priority level and reason), and every answer 429."""
    by = defaultdict(float)
    for name, v in after.items():
        if name.startswith("apiserver_flowcontrol_rejected_requests_total{"):
            labels = labels_of(name)
            by["{} {}".format(labels.get("priority_level"), labels.get("reason"))] += v - before.get(name, 0)
    return {
        "apf_rejected": increase(before, after, "apiserver_flowcontrol_rejected_requests_total"),
        "apf_rejected_by": {k: round(v) for k, v in sorted(by.items()) if v >= 1},
        "status_429": increase(before, after, "apiserver_request_total", code="429"),
    }
