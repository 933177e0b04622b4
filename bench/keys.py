"""The raw-against-series count of one key, shared by bench/soak.py and bench/scale.py.

A key is what an admin calls one loop: the regarding object, the reason and the reporting component.
For every key, the occurrences the emitters stored (the sum of their raw objects' counts) must equal the
occurrences event-series counted into series objects, unless the key never made a series (single
occurrences, by design).
"""

import datetime
from collections import defaultdict


def occurrences(e):
    """A raw object's occurrences, as the operator reads them: series.count, else count, at least 1."""
    n = (e.get("series") or {}).get("count") or e.get("count") or 1
    return max(int(n), 1)


def group_of(ref, reason, controller):
    kind, name, field = ref.get("kind", ""), ref.get("name", ""), ref.get("fieldPath", "") or "-"
    return f"{kind}/{name} {field} {reason} {controller or '-'}"


def raw_key(e):
    """(namespace, key) of a raw core/v1 Event as listed through the core API."""
    return (
        e["metadata"]["namespace"],
        group_of(
            e.get("involvedObject") or {},
            e.get("reason") or "",
            e.get("reportingComponent") or (e.get("source") or {}).get("component") or "",
        ),
    )


def series_key(e):
    """(namespace, key) of a series object (events.k8s.io/v1), comparable with raw_key."""
    return (
        e["metadata"]["namespace"],
        group_of(e.get("regarding") or {}, e.get("reason") or "", e.get("reportingController") or ""),
    )


def verdict_of(g):
    if g["series"] == g["raw"]:
        return "exact"
    if g["series_objects"] == 0 and g["raw"] == g["raw_objects"]:
        return "lone"  # single occurrences: no series by design
    if g.get("lone_by_design") and g["series"] == g["raw"] - g["lone_by_design"]:
        return "exact, lone by design"
    return "differs"


def lone_by_design(spans, window):
    """Occurrences that stood alone: more than `window` seconds from every other occurrence of their
    key, so that no series counts them, by design (a series needs two occurrences within the window).

    spans: per raw object (first, last, count), times in seconds. Only single-occurrence objects are
    judged (their time is exact); an object counting several occurrences spans [first, last] and
    stands for occurrences all through it, none of them alone as far as can be known."""
    spans = sorted(spans)
    lone = 0
    for i, (first, _last, count) in enumerate(spans):
        if count != 1:
            continue
        others = spans[:i] + spans[i + 1 :]
        if all(first - o_last > window or o_first - first > window for o_first, o_last, _ in others):
            lone += 1
    return lone


def lone_by_timestamps(raw_span, series_spans, window):
    """Occurrences of a key with one raw object that stood alone by their own timestamps, which is
    how the operator times them: the first when its timestamp is more than `window` before every
    series' first, the last when more than `window` after every series' last (an emitter starved of
    CPU writes occurrences late, so two writes less than `window` apart can carry timestamps further
    apart). Only the first and last have known timestamps (the object's firstTimestamp and
    lastTimestamp); with no series, a two-occurrence object whose two are further apart stood
    alone twice.

    raw_span: (first, last, count); series_spans: [(first, last, count)]; times in seconds."""
    first, last, count = raw_span
    if not series_spans:
        return 2 if count == 2 and last - first > window else 0
    alone = 0
    if count >= 2 and min(f for f, _, _ in series_spans) - first > window:
        alone += 1
    if last - max(la for _, la, _ in series_spans) > window:
        alone += 1
    return alone


def rejudge(row, window):
    """The verdict, by today's rules, of a key a run judged "differs", from what the run kept of it
    (bench/scale.py: its raw objects' spans, its series' spans and the emitters' writes), so that a
    summary recomputed later counts it as the rules now would."""
    spans = [(seconds(f), seconds(la), c or 1) for f, la, c in row.get("raw_spans", []) if f and la]
    series = [(seconds(f), seconds(la), c or 1) for f, la, c in row.get("series_spans", []) if f and la]
    lone = lone_by_design(spans, window)
    if len(spans) == 1:
        lone = max(lone, lone_by_timestamps(spans[0], series, window))
    verdict = verdict_of({**row, "lone_by_design": lone})
    writes = row.get("writes") or []
    if verdict == "differs" and len(writes) == row["raw"]:
        # The writes are the other account, judged on their own: a late write can stand alone by
        # the writes while its timestamp, which the operator went by, joins its series, so the
        # larger of the two counts can call an exact key short.
        verdict = verdict_of({**row, "lone_by_design": lone_in_times(sorted(writes), window)})
    return verdict


def tally(raw, series, window=None):
    """Per key (of namespace/object/reason/reporter): raw occurrences and objects, series count and objects.

    raw: core/v1 Events (the emitters'), series: events.k8s.io/v1 Events (event-series'). With
    `window` (seriesWindow in seconds), also the raw occurrences that stood alone by design."""
    groups = defaultdict(
        lambda: {"raw": 0, "raw_objects": 0, "series": 0, "series_objects": 0, "states": [], "spans": [], "names": []}
    )
    for e in raw:
        g = groups[raw_key(e)]
        g["raw"] += occurrences(e)
        g["raw_objects"] += 1
        g["names"].append(e["metadata"]["name"])
        first, last = e.get("firstTimestamp") or e.get("eventTime"), e.get("lastTimestamp") or e.get("eventTime")
        if first and last:
            g["spans"].append((seconds(first), seconds(last), occurrences(e)))
    for e in series:
        g = groups[series_key(e)]
        g["series"] += (e.get("series") or {}).get("count", 1)
        g["series_objects"] += 1
        g["states"].append(e["metadata"].get("labels", {}).get("eventseries.dev/state"))
        last = (e.get("series") or {}).get("lastObservedTime") or e.get("eventTime")
        if e.get("eventTime") and last:
            g.setdefault("series_times", []).append((seconds(e["eventTime"]), seconds(last), 0))
    for g in groups.values():
        spans = g.pop("spans")
        series_times = g.pop("series_times", [])
        if window is not None and g["series"] != g["raw"]:
            g["lone_by_design"] = lone_by_design(spans, window)
            if len(spans) == 1:
                g["lone_by_design"] = max(g["lone_by_design"], lone_by_timestamps(spans[0], series_times, window))
    return groups


def seconds(t):
    return datetime.datetime.fromisoformat(t.replace("Z", "+00:00")).timestamp()


def lone_in_times(times, window):
    """Occurrences (sorted times) with no other within `window` before or after."""
    lone = 0
    for i, t in enumerate(times):
        before = i > 0 and t - times[i - 1] <= window
        after = i + 1 < len(times) and times[i + 1] - t <= window
        lone += not (before or after)
    return lone


def explain_by_writes(groups, writes, window):
    """A key whose series hold fewer occurrences than its raw objects is explained when the missing
    ones are exactly the occurrences that stood alone, timed by the emitters' writes of its raw
    objects (`writes`: (namespace, object name) -> times, from the apiserver's audit log): believed
    only when the key's raw objects were written once per occurrence (a legacy recorder creates, then
    patches count + 1)."""
    for (ns, _), g in groups.items():
        if verdict_of(g) != "differs":
            continue
        times = sorted(t for name in g["names"] for t in writes.get((ns, name), []))
        if len(times) != g["raw"]:
            g["writes_seen"] = len(times)
            continue
        # Only where the timestamps, which the operator went by, do not account for the key: the
        # writes are judged on their own, never added to them (see `rejudge`).
        by_writes = lone_in_times(times, window)
        if verdict_of({**g, "lone_by_design": by_writes}) != "differs":
            g["lone_by_design"] = by_writes
