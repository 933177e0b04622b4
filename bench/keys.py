"""The raw-against-series count of one key, shared by bench/soak.py and bench/scale.py.

A key is what an admin calls one loop: the regarding object, the reason and the reporting component.
For every key, the occurrences the emitters stored (the sum of their raw objects' counts) must equal the
occurrences event-series counted into series objects, unless the key never made a series (single
occurrences, by design).
"""

from collections import defaultdict


def occurrences(e):
    """A raw object's occurrences, as the operator reads them: series.count, else count, at least 1."""
    n = (e.get("series") or {}).get("count") or e.get("count") or 1
    return max(int(n), 1)


def group_of(ref, reason, controller):
    return "%s/%s %s %s %s" % (ref.get("kind", ""), ref.get("name", ""), ref.get("fieldPath", "") or "-",
                               reason, controller or "-")


def verdict_of(g):
    if g["series"] == g["raw"]:
        return "exact"
    if g["series_objects"] == 0 and g["raw"] == g["raw_objects"]:
        return "lone"  # single occurrences: no series by design
    return "differs"


def tally(raw, series):
    """Per key (of namespace/object/reason/reporter): raw occurrences and objects, series count and objects.

    raw: core/v1 Events (the emitters'), series: events.k8s.io/v1 Events (event-series')."""
    groups = defaultdict(lambda: {"raw": 0, "raw_objects": 0, "series": 0, "series_objects": 0, "states": []})
    for e in raw:
        g = groups[e["metadata"]["namespace"], group_of(e.get("involvedObject") or {}, e.get("reason") or "",
                                                        e.get("reportingComponent")
                                                        or (e.get("source") or {}).get("component") or "")]
        g["raw"] += occurrences(e)
        g["raw_objects"] += 1
    for e in series:
        g = groups[e["metadata"]["namespace"], group_of(e.get("regarding") or {}, e.get("reason") or "",
                                                        e.get("reportingController") or "")]
        g["series"] += (e.get("series") or {}).get("count", 1)
        g["series_objects"] += 1
        g["states"].append(e["metadata"].get("labels", {}).get("eventseries.dev/state"))
    return groups
