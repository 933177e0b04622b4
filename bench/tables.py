#!/usr/bin/env python3
"""The tables of docs/BENCHMARKS.md and docs/FAULTS.md that are generated from result files.

A generated table sits between two markers that name its generator and its result file:

    <!-- table: scale-steps bench/results/scale/20261127T160414Z/summary.json -->
    | ... |
    <!-- /table -->

    python3 bench/tables.py           rewrites every generated table from its file
    python3 bench/tables.py --latest  the same, each marker first pointed at the newest result file of
                                      its kind (the date in its path: `just bench-all` ends with this)
    python3 bench/tables.py --check   exits 1 and names each table that differs from its file
                                      (tests/docs.rs runs this)
    python3 bench/tables.py --stale   names each table whose result file was measured on other
                                      operator code than HEAD's (src/, core/, the dependencies), with
                                      what changed since: figures to re-run (`RESUME=1 just bench-all`
                                      re-runs only those)

The result file's commit and machine are printed under each table, so a figure always says what it
measured. A generator's name may carry an argument after a colon: `growth:series,namespaces` shows
those axes only, and `...:history` marks a table that records what one past run found (an
investigation's evidence): `--latest` and `--stale` leave it as measured.
"""

import glob
import json
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCS = ["docs/BENCHMARKS.md", "docs/FAULTS.md"]
MARKER = re.compile(r"<!-- table: (\S+) (\S+) -->\n(.*?)<!-- /table -->\n", re.DOTALL)


def n(v, digits=0):
    """A number as the docs write it: thousands separated, '-' for none."""
    if v is None:
        return "-"
    if isinstance(v, float) and digits:
        return "{:,.{d}f}".format(v, d=digits)
    return f"{round(v):,}"


def table(header, rows):
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(lines) + "\n"


# Benchmarks whose result takes the machine when the run is over (their rows carry their own load).
MACHINE_AT_END = ("restore-buffer", "growth")


def source(d, path, kind=None):
    m = d.get("machine") or {}
    # A dated copy (bench/lib.sh keep_dated) takes the machine when the run is over.
    when = "when it ended" if "kind" in d or kind in MACHINE_AT_END else "at the start"
    return "\n<sub>From [`{p}`](../{p}): commit {c}, {cpu} × {nproc}{kernel}, load average {load} {when}, {date}.</sub>\n".format(
        p=path,
        c=d.get("commit", "?")[:7],
        cpu=m.get("cpu", "?"),
        nproc=m.get("nproc", "?"),
        # The runs here came from two virtual machines that report the same CPU: the kernel build
        # tells them apart, so a figure compared across runs shows whether the machine changed.
        kernel=", kernel {}".format(m["kernel"]) if m.get("kernel") else "",
        load=m.get("loadavg", "?").split()[0],
        when=when,
        date=m.get("date", "?"),
    )


def percent_pair(a, b):
    return f"{n(a, 1)} / {n(b, 1)}" if a is not None and b is not None else "-"


def machine_idle(c):
    """The machine's idle / steal CPU (% of all its CPUs) of a window, '-' for a run before it."""
    return percent_pair(c.get("idle_percent"), c.get("steal_percent")) if c else "-"


def scale_steps(d):
    rows = []
    for s in d["steps"]:
        keys = s.get("keys") or {}
        fl = s.get("finish_lateness_s") or {}
        sat = s.get("saturation")
        drain = s.get("drain") or {}
        rows.append(
            [
                "{} pods / {} ns / {} nodes".format(n(s["pods"]), n(s["namespaces"]), n(s["nodes"])),
                n(s["core_event_writes_per_s"], 1),
                "{} / {}".format(n(s["create_p50_s"], 2), n(s["create_p99_s"], 2)),
                "{} / {}".format(n(fl.get("p99"), 1), n(fl.get("max"), 1)),
                "{} % / {} %".format(n(s["operator_cpu_percent"], 1), n(s["apiserver_cpu_percent"], 1)),
                n(s["operator_peak_rss_mib"], 1),
                n(s["watch_bytes_per_s"]),
                "{} (drain {})".format(machine_idle(s.get("machine_cpu")), machine_idle(drain.get("machine_cpu")))
                if s.get("machine_cpu")
                else "-",
                "{} / {}".format(n(sat["apf_rejected"]), n(sat["status_429"])) if sat else "-",
                "{} exact{}, {} single, {} off{}".format(
                    n(keys.get("exact", 0) + keys.get("exact, lone by design", 0)),
                    " ({} of them beside occurrences alone by design)".format(n(keys["exact, lone by design"]))
                    if keys.get("exact, lone by design")
                    else "",
                    n(keys.get("lone", 0)),
                    n(keys.get("differs", 0)),
                    " ({} judged by the occurrences' own timestamps when summarised)".format(n(keys["rejudged"]))
                    if keys.get("rejudged")
                    else "",
                ),
                "{} / {}".format(n(s["occurrences_in_series"]), n(s["raw_occurrences"])),
            ]
        )
    return table(
        [
            "step",
            "core Event writes/s at the API server",
            "create p50 / p99 (s), operator's histogram",
            "finish lateness by the events' timestamps, p99 / max (s)",
            "CPU operator / apiserver",
            "operator peak RSS (MiB)",
            "watch bytes/s to the operator",
            "machine idle / steal, % of all CPUs",
            "APF rejections / 429s",
            "keys",
            "occurrences in series / raw",
        ],
        rows,
    )


def spread(p, digits, keys=("p50", "p99")):
    """'p50 / p99 (count)' of a percentiles record (bench/scale_figures.py), '-' for none."""
    if not p:
        return "-"
    return "{} ({})".format(" / ".join(n(float(p[k]), digits) for k in keys), n(p["count"]))


def drain_probes(s):
    """The completeness probes of a step's quiet drain and what the API server served ('-' before the
    runs that recorded them)."""
    drain = s.get("drain") or {}
    p = drain.get("probes")
    if not p:
        return "-"
    return "{}; {}".format(
        " / ".join(n(p[r]) for r in ("quiet", "changes", "behind", "failed")),
        n((drain.get("requests") or {}).get("WATCH core/events", 0)),
    )


def scale_latency(d):
    """End to end, from the API server's audit log: an emitter's write to the series write that shows
    it, per kind, and the finish lateness under load and in the quiet drain (bench/scale_figures.py)."""
    rows = []
    # The runs that recorded the completeness probes get a column for them.
    probed = any((s.get("drain") or {}).get("probes") for s in d["steps"])
    for s in d["steps"]:
        e = s.get("end_to_end") or {}
        late = e.get("finish_lateness_s") or {}
        refresh = spread(e.get("refresh_s"), 1)
        if e.get("refresh_s") and e.get("occurrences_shown_only_by_the_finish") is not None:
            refresh += "; {} shown only by the finish".format(n(e["occurrences_shown_only_by_the_finish"]))
        rows.append(
            [
                "{} pods / {} ns".format(n(s["pods"]), n(s["namespaces"])),
                spread(e.get("create_s"), 3),
                refresh,
                spread(late.get("loaded"), 1, ("p50", "p99", "max")),
                spread(late.get("quiet"), 1, ("p50", "p99", "max")),
            ]
            + ([drain_probes(s)] if probed else [])
        )
    return table(
        [
            "step",
            "create: second occurrence's write to the create, p50 / p99 (s) (series)",
            "refresh: an occurrence's write to the next write of its series, p50 / p99 (s) (occurrences)",
            "finish lateness under load, p50 / p99 / max (s) (series)",
            "finish lateness in the quiet drain, p50 / p99 / max (s) (series)",
        ]
        + (
            [
                "probes in the drain: quiet / changes / behind / failed; the API server's WATCH requests on core/v1 Events"
            ]
            if probed
            else []
        ),
        rows,
    )


def met(v, limit, unit=" s"):
    return "{}{}: {}".format(n(v, 2 if v < 1 else 1), unit, "met" if v <= limit else "**missed**")


def scale_targets(d):
    """The scale targets, one column per step: met or missed, by the figures of `scale_steps` and
    `scale_latency` (a figure a run did not measure shows '-')."""

    def create(s):
        p = ((s.get("end_to_end") or {}).get("create_s") or {}).get("p99")
        return "{} (the operator's histogram: {} s)".format(
            "-" if p is None else met(p, 2), n(s.get("create_p99_s"), 2)
        )

    def lateness(s):
        late = (s.get("end_to_end") or {}).get("finish_lateness_s") or {}
        p99 = [(late.get(k) or {}).get("p99") for k in ("loaded", "quiet")]
        shown = " / ".join("-" if p is None else n(p, 1) + " s" for p in p99)
        measured = [p for p in p99 if p is not None]
        verdict = (": met" if max(measured) <= 5 else ": **missed**") if measured else ""
        old = (s.get("finish_lateness_s") or {}).get("p99")
        return "{}{} (by the events' timestamps: {} s; the operator's histogram: {} s)".format(
            shown, verdict, n(old, 1), n(s.get("finish_p99_s_histogram"), 1)
        )

    def cpu(s):
        share = s.get("operator_cpu_share_of_apiserver")
        if share is None:
            return "-"
        return "{} / {} = {}".format(
            n(s["operator_cpu_percent"], 1), n(s["apiserver_cpu_percent"], 1), met(100 * share, 5, " %")
        )

    def counts(s):
        keys = s.get("keys") or {}
        series_keys = keys.get("exact", 0) + keys.get("exact, lone by design", 0) + keys.get("differs", 0)
        if keys.get("differs"):
            return "**{} of {} keys off**".format(n(keys["differs"]), n(series_keys))
        lone = keys.get("exact, lone by design")
        return "every key ({}{})".format(
            n(series_keys), f"; {n(lone)} beside occurrences alone by design" if lone else ""
        )

    steps = d["steps"]
    return table(
        ["target", *["{} Pods".format(n(s["pods"])) for s in steps]],
        [
            ["create p99 ≤ 2 s after the second occurrence's write", *[create(s) for s in steps]],
            [
                "finish lateness p99 ≤ 5 s beyond `finishAfter` after the last occurrence's write: under load / quiet",
                *[lateness(s) for s in steps],
            ],
            ["operator CPU ≤ 5 % of the API server's", *[cpu(s) for s in steps]],
            ["counts exact", *[counts(s) for s in steps]],
        ],
    )


# The bill's figures: (key of a bill run's row, what the table calls it, decimals).
BILL_FIGURES = [
    ("apiserver_cpu_percent", "API server CPU (% of one core)", 1),
    ("apiserver_rss_mib", "API server RSS, mean over the window (MiB)", 1),
    ("etcd_cpu_percent", "etcd CPU (% of one core)", 1),
    ("requests_total", "API requests", 0),
    ("etcd_writes", "etcd writes (its puts + deletes)", 0),
    ("watch_bytes_per_occurrence", "bytes sent on watches of Events, per occurrence", 1),
]
VERDICT_RESOLVED = "resolved"
VERDICT_NOISE = "cannot be resolved on this machine"
# The bill's goal: the API server's CPU with the operator at most 10 % above its CPU without.
BILL_CPU_GOAL_PERCENT = 10.0


def bill_goal(f, goal=BILL_CPU_GOAL_PERCENT):
    """Whether a spread_verdict meets "at most +goal %": judged on the difference when it is resolved;
    when it is not, met only if the spread without (which then bounds the difference) is itself within
    the goal, and otherwise this machine cannot tell."""
    mean = f["without"]["mean"]
    if not mean:
        return "cannot be judged"
    if f["verdict"] == VERDICT_RESOLVED:
        return "met" if f["difference_percent"] <= goal else "**missed**"
    if 100 * f["spread_without"] / mean <= goal and min(f["without"]["runs"], f["with"]["runs"]) >= 2:
        return "met (inside a spread of {} %)".format(n(100 * f["spread_without"] / mean, 1))
    return "cannot be judged on this machine"


def summary_of(values):
    return {"runs": len(values), "mean": sum(values) / len(values), "min": min(values), "max": max(values)}


def spread_verdict(without, with_):
    """The runs with the operator against those without: the difference of the means, and whether
    this machine can tell it from noise. "resolved" only when the difference exceeds the spread
    (max - min) of the runs without, and each side has two runs at least: one run without has no
    spread, and one run with could be the noisy one. None when a side has no figure (a run before
    the figure was recorded)."""
    without = [v for v in without if v is not None]
    with_ = [v for v in with_ if v is not None]
    if not without or not with_:
        return None
    a, b = summary_of(without), summary_of(with_)
    diff = b["mean"] - a["mean"]
    spread = a["max"] - a["min"]
    return {
        "without": a,
        "with": b,
        "difference": diff,
        "difference_percent": 100 * diff / a["mean"] if a["mean"] else None,
        "spread_without": spread,
        "verdict": VERDICT_RESOLVED if min(len(without), len(with_)) >= 2 and abs(diff) > spread else VERDICT_NOISE,
    }


def bill_figures(without, with_):
    """spread_verdict of every bill figure, from the rows of the runs without and with the operator."""
    return {
        key: spread_verdict([r.get(key) for r in without], [r.get(key) for r in with_])
        for key, _name, _digits in BILL_FIGURES
    }


def bill_sides(b):
    """(rows without, rows with) of a summary's bill: {"runs": {label: row}} since the bill alternates
    pairs, {label: row} beside a ratio before (bill-without-1, bill-with, bill-without-2)."""
    runs = b.get("runs", b)
    rows = [(label, r) for label, r in runs.items() if isinstance(r, dict) and label.startswith("bill-")]
    return (
        [r for label, r in rows if label.startswith("bill-without")],
        [r for label, r in rows if not label.startswith("bill-without")],
    )


def core_writes(r):
    """Writes of raw Events through core/v1 in a bill run: the emitters', once per occurrence."""
    return sum(v for k, v in r["events_requests"].items() if k.split()[0] in ("POST", "PATCH", "PUT") and " core/" in k)


def verbs(rows):
    """The mean requests on Events per verb and group, and on Leases, of bill runs."""
    total = {}
    for r in rows:
        for k, v in list(r["events_requests"].items()) + [("Leases", r["lease_requests"])]:
            total[k] = total.get(k, 0) + v
    short = lambda k: k.replace("events.k8s.io/events", "events.k8s.io").replace("core/events", "core")
    return ", ".join(f"{short(k)} {n(v / len(rows))}" for k, v in total.items()) if rows else "-"


def runs(k):
    return "1 run" if k == 1 else f"{n(k)} runs"


def scale_bill(d):
    without, with_ = bill_sides(d["bill"])
    figures = bill_figures(without, with_)

    def side(f, digits):
        text = n(f["mean"], digits)
        return text if f["runs"] == 1 else "{} ({}–{})".format(text, n(f["min"], digits), n(f["max"], digits))

    rows = []
    for key, name, digits in BILL_FIGURES:
        f = figures[key]
        if f is None:
            rows.append([name, "-", "-", "-", "-"])
            continue
        pct = f["difference_percent"]
        rows.append(
            [
                name,
                side(f["without"], digits),
                side(f["with"], digits),
                "{}{}{}".format(
                    "+" if f["difference"] >= 0 else "",
                    n(f["difference"], digits),
                    "" if pct is None else " ({}{} %)".format("+" if pct >= 0 else "", n(pct, 1)),
                ),
                (
                    "**{}**".format(f["verdict"])
                    if f["verdict"] == VERDICT_RESOLVED
                    else "{} ({})".format(
                        f["verdict"],
                        "spread without: {}".format(n(f["spread_without"], digits))
                        if min(f["without"]["runs"], f["with"]["runs"]) >= 2
                        else "{} without, {} with".format(runs(f["without"]["runs"]), runs(f["with"]["runs"])),
                    )
                )
                + (f"; goal ≤ +{n(BILL_CPU_GOAL_PERCENT)} %: {bill_goal(f)}" if key == "apiserver_cpu_percent" else ""),
            ]
        )
    # What the load was and what the window held, for reading the figures above: no verdict.
    load = spread_verdict([core_writes(r) for r in without], [core_writes(r) for r in with_])
    rows.append(
        ["occurrences (raw Event writes through core/v1)"]
        + ([side(load["without"], 0), side(load["with"], 0), "", ""] if load else ["-", "-", "", ""])
    )
    rows.append(["of the requests, on Events and Leases, mean (verb: count)", verbs(without), verbs(with_), "", ""])
    held = [r.get("operator_in_window") for r in with_ if r.get("operator_in_window")]
    if held:
        mean = lambda f: n(sum(f(h) for h in held) / len(held))
        rows.append(
            [
                "series created / refreshes and heartbeats / finishes written in the window (with, mean)",
                "",
                "{} / {} / {}".format(
                    mean(lambda h: h["writes"]["create"]),
                    # The operator's write kinds are create, heartbeat (early refreshes included) and
                    # finish; the files before this said "refresh" too, always 0.
                    mean(lambda h: h["writes"].get("heartbeat", 0) + (h["writes"].get("refresh") or 0)),
                    mean(lambda h: h["writes"]["finish"]),
                ),
                "",
                "",
            ]
        )
    probed = [h["probes"] for h in held if h.get("probes")]
    if probed:
        mean = lambda r: n(sum(p[r] for p in probed) / len(probed))
        rows.append(
            [
                "completeness probes in the window, quiet / changes / behind / failed "
                + "(with, mean; each a one-second WATCH, counted in the requests above)",
                "",
                " / ".join(mean(r) for r in ("quiet", "changes", "behind", "failed")),
                "",
                "",
            ]
        )
    # A run with FIRST_REFRESH set looks like the defaults' otherwise: the policy says which it was.
    policy = (d.get("flags") or {}).get("policy")
    if policy:
        rows.append(
            ["the operator's policy (firstRefresh and heartbeatInterval: 1m and 30m unless named)", "", policy, "", ""]
        )
    return table(
        [
            "",
            f"without: mean (min–max) of {runs(len(without))}",
            f"with: mean (min–max) of {runs(len(with_))}",
            "with − without",
            "verdict",
        ],
        rows,
    )


def heartbeats(d):
    a = d["audit"]
    return table(
        ["", ""],
        [
            ["series, heartbeat, flags", "{}, {}".format(n(d["series"]), d["flags"])],
            ["writes (apiserver audit log) / objects", "{} / {}".format(n(a["writes"]), n(a["objects"]))],
            ["longest time between two writes of one object", "**{} s**".format(a["longest_gap_s"])],
            [
                "objects gone with their TTL (patch answered 404) and created again",
                n(d.get("patch_404", (d.get("samples") or [{}])[-1].get("patch_404"))),
            ],
            [
                "heartbeats and refreshes written, mean wait",
                "{}, {} s".format(n(d["heartbeats"]), d["heartbeat_latency_mean_s"]),
            ],
            ["most writes pending", n(d["max_pending"])],
            ["occurrences counted", n(d["occurrences_counted"])],
        ],
    )


def cpu_idle_steal(samples):
    """The machine's idle / steal (% of all its CPUs) between the first and last of `samples`, from
    their /proc/stat "cpu" fields (user nice system idle iowait irq softirq steal)."""
    stats = [x["proc_stat_cpu"] for x in samples if x.get("proc_stat_cpu")]
    if len(stats) < 2:
        return "-"
    d = [b - a for a, b in zip(stats[0], stats[-1])]
    total = sum(d) or 1
    return percent_pair(100 * d[3] / total, 100 * d[7] / total)


def bound(d):
    """`just bench-bound`: the default bound as shipped, every other bound full, against the TTL
    and the Deployment's memory limit."""
    a, o, r = d["audit"], d["occurrences"], d["restart"]
    mib = lambda kib: n(kib / 1024, 1)
    metrics = dict(line.rsplit(" ", 1) for line in d.get("metrics", []))
    m = lambda name: n(float(metrics[name])) if name in metrics else "-"
    ttl = 3600
    goal_mib = d.get("limit_mib", 256)
    exact = o["written"] == o["counted"]
    return table(
        ["", "measured", "goal"],
        [
            [
                "loops (one occurrence each every {} s) / namespaces / minutes".format(d["rotate_s"]),
                "{} / {} / {}".format(n(d["series"]), n(d["namespaces"]), n(d["minutes"])),
                "",
            ],
            [
                "one-off keys held beside them: small / every field at its limit",
                "{} / {}".format(n(d["lone"]), n(d["lone_at_limit"])),
                "",
            ],
            [
                "series objects written (audit log) / their writes",
                "{} / {}".format(n(a["objects"]), n(a["writes"])),
                "",
            ],
            [
                "time between two writes of one object: p50 / p99 / longest",
                "{} / {} / **{} s**".format(n(a["gap_p50_s"]), n(a["gap_p99_s"]), n(a["longest_gap_s"])),
                f"under the TTL ({n(ttl)} s)",
            ],
            [
                "objects past 3/4 of the TTL / past the TTL between two writes",
                "{} / **{}**".format(n(a["over_three_quarters_ttl"]), n(a["over_ttl"])),
                "0 past the TTL",
            ],
            [
                "fewest series objects stored once all were created",
                n(d["min_stored_after_creates"] if d["min_stored_after_creates"] >= 0 else None),
                n(d["series"]),
            ],
            ["most writes pending", n(d["max_pending"]), ""],
            [
                "series given up: over maxActiveSeries / for key bytes",
                "{} / {}".format(
                    m('event_series_series_evicted_total{reason="max_active_series"}'),
                    m('event_series_series_evicted_total{reason="key_bytes"}'),
                ),
                "",
            ],
            [
                "alerts over the limit / posts failed (nothing listens)",
                "{} / {}".format(
                    m("event_series_alerts_over_limit"), m('event_series_alerts_sent_total{outcome="failed"}')
                ),
                "",
            ],
            [
                "occurrences counted / written",
                "{} / {}{}".format(n(o["counted"]), n(o["written"]), "" if exact else " **(differ)**"),
                "equal",
            ],
            [
                "peak RSS (VmHWM): running / restarted beside it all",
                "**{}** / **{} MiB**".format(mib(d["peak_rss_kib"]), mib(r["peak_rss_kib"])),
                f"under {goal_mib} MiB",
            ],
            [
                "RSS once every series was created / at the end of the loops",
                "{} / {} MiB".format(*bound_rss(d)),
                "",
            ],
            [
                "restart: Ready after / RSS a minute later",
                "{} s / {} MiB".format(n(r["ready_s"]), mib(r["rss_kib_after_a_minute"])),
                "",
            ],
            ["machine idle / steal over the run (%)", cpu_idle_steal(d.get("samples", [])), ""],
        ],
    )


def bound_rss(d):
    """The operator's RSS (MiB) at the first sample with every series created, and at the last."""
    samples = d.get("samples", [])
    created = next((x for x in samples if x["creates"] >= d["series"]), None)
    mib = lambda x: n(x["rss_kib"] / 1024, 1) if x else "-"
    return mib(created), mib(samples[-1] if samples else None)


def engine(d):
    """`just bench-engine`: each criterion benchmark of the engine, its median with the 95 %
    interval, and what that is per second where the benchmark counts elements."""
    rows = []
    for b in d["benchmarks"]:
        med, (lo, hi) = b["median_ns"], b["median_ci_ns"]
        per_s = "-"
        if b.get("elements"):
            per_s = "**{}** ({}–{})".format(*(si(b["elements"] / (ns * 1e-9)) for ns in (med, hi, lo)))
        rows.append([b["id"].removeprefix("engine/"), duration_ns(med), f"{duration_ns(lo)}–{duration_ns(hi)}", per_s])
    return table(["benchmark", "median", "95 % interval", "elements per second"], rows)


def si(v):
    """A rate as the docs write it: 5.89 M, 758 k."""
    for unit, size in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if v >= size:
            return f"{v / size:.3g} {unit}"
    return f"{v:.3g}"


def duration_ns(ns):
    for unit, size in (("s", 1e9), ("ms", 1e6), ("µs", 1e3)):
        if ns >= size:
            return f"{ns / size:.3g} {unit}"
    return f"{ns:.3g} ns"


def heap(d):
    """`just bench-engine`: the heap per active series (benches/memory.rs, a counting allocator)
    against the 512 B target, and a restart's heap at each restart buffer size."""
    rows = [
        [n(h["series"]), f"{n(h['bytes_per_series'])} B", f"**{n(h['beyond_strings'])} B**", f"{h['mib_all']} MiB"]
        for h in d["heap"]
    ]
    out = table(
        ["active series", "heap per series", "beyond the strings it carries (target ≤ 512 B)", "heap for all"], rows
    )
    if d.get("entries"):
        out += "\n" + table(
            ["what the engine and the writer hold", "heap each"],
            [[f"{n(e['count'])} {e['what']}", f"**{n(e['bytes_each'])} B**"] for e in d["entries"]],
        )
    if d.get("every_bound_full"):
        out += "\n" + table(
            [
                "every bound full: maxActiveSeries, --max-key-bytes (writes pending)",
                "candidates",
                "+ keys at every limit",
                "+ series and their pending creates",
                "heap in all",
            ],
            [
                [
                    f"{n(b['max_active_series'])}, {b['key_mib']} MiB ({n(b['pending'])})",
                    f"{b['candidates_mib']} MiB",
                    f"{b['at_limit_mib']} MiB",
                    f"{b['series_pending_mib']} MiB",
                    f"**{b['all_mib']} MiB**",
                ]
                for b in d["every_bound_full"]
            ],
        )
    rows = [
        [
            f"{n(r['series'])} series, {n(r['listed_raw'])} raw events, buffer {r['buffer_mib']} MiB",
            f"{r['restored_mib']} MiB",
            f"**{r['peak_mib']} MiB**",
            f"{r['after_recovery_mib']} / {r['settled_mib']} MiB",
        ]
        for r in d["restarts"]
    ]
    return (
        out
        + "\n"
        + table(
            [
                "restart (heap of the engine and its buffer)",
                "series restored",
                "peak",
                "after the recovery / after housekeeping",
            ],
            rows,
        )
    )


def soak(d):
    k = d["keys"]
    w = d.get("writes") or {}
    first, second = d["leader_first_half"], d["leader_second_half"]
    return table(
        ["", ""],
        [
            ["keys checked", "{} exact, {} single occurrences, {} off".format(k["exact"], k["lone"], k["differs"])],
            ["occurrences in series / raw", "{} / {}".format(n(d["occurrences_in_series"]), n(d["raw_occurrences"]))],
            [
                "leader deletions / apiserver restarts",
                "{} / {}".format(len(d["leader_deletes"]), len(d["apiserver_restarts"])),
            ],
            [
                "leader RSS median, 1st / 2nd hour (MiB)",
                "{} / {}".format(n(first["rss_kib"]["median"] / 1024, 1), n(second["rss_kib"]["median"] / 1024, 1)),
            ],
            [
                "open descriptors, tokio tasks (median)",
                "{}, {}".format(n(second["fds"]["median"]), n(second["tasks"]["median"])),
            ],
            ["event-series writes per loop", n(w.get("event_series_writes_per_loop"), 2)],
        ],
    )


def failover(d):
    after, bare, rss = d["after_sigkill_ms"], d["bare_list_ms"], d["rss_kib"]
    s = lambda ms: n(ms / 1000, 1) + " s"
    return table(
        ["", "", "target"],
        [
            ["stored raw events / series", "{} / {}".format(n(d["stored_raw_events"]), n(d["series"])), ""],
            ["after SIGKILL: standby holds the Lease", s(after["lease"]), "within the lease duration"],
            [
                "after SIGKILL: engine rebuilt / first write answered",
                "{} / {}".format(s(after["rebuilt"]), s(after["first_write"])),
                "",
            ],
            [
                "bare paginated lists (kubectl): series objects + raw events",
                "{} + {} = {}".format(s(bare["series_objects"]), s(bare["raw_events"]), s(bare["both"])),
                "",
            ],
            [
                "rebuild (Lease to rebuilt) over the bare lists",
                "**{}×**".format(d["rebuild_over_bare_lists"]),
                "≤ 1.2×",
            ],
            [
                "RSS: leader steady / standby peak after the restore (MiB)",
                "{} / {}".format(n(rss["leader_steady"] / 1024, 1), n(rss["standby_peak_after_restore"] / 1024, 1)),
                "",
            ],
            ["peak over steady", "**{}×**".format(d["peak_over_steady"]), "≤ 1.5×"],
        ],
    )


def failover_standby(d, stored=None):
    """Cold and warm standbys side by side, one column each, at the stored data of one run (`stored`,
    the table's argument: the number of stored raw events it is for)."""
    names = [m for m in ("cold", "warm") if m in d["modes"]]
    modes = [d["modes"][m] for m in names]
    s = lambda ms: "-" if ms is None else n(ms / 1000, 1) + " s"
    mib = lambda kib: n(kib / 1024, 1)
    per_replica = lambda m, key: "{} / {}".format(n(m["one_replica"][key], 1), n(m["two_replicas"][key], 1))
    mib2 = lambda b: n(b / 2**20, 2)
    watch = lambda w: "{} + {}".format(mib2(w["watch_bytes"]["core"]), mib2(w["watch_bytes"]["events_k8s_io"]))

    def row(label, f, target=""):
        return [label, *[f(m) for m in modes], target]

    def row_if(key, label, f, target=""):
        """The row, for results whose every mode records `key` (older results do not)."""
        return [row(label, f, target)] if all(m.get(key) for m in modes) else []

    return table(
        ["", *[f"**{m}**" for m in names], "target"],
        [
            [
                "stored raw events / series",
                *["{} / {}".format(n(d["stored_raw_events"]), n(d["series"]))] * len(modes),
                "",
            ],
            row(
                "after SIGKILL: standby holds the Lease",
                lambda m: s(m["after_sigkill_ms"]["lease"]),
                "lease duration + retry period",
            ),
            row("after SIGKILL: engine rebuilt", lambda m: s(m["after_sigkill_ms"]["rebuilt"])),
            row(
                "after SIGKILL: first series write answered",
                lambda m: "**{}**".format(s(m["after_sigkill_ms"]["first_write"])),
                "warm: ≤ 20 s (lease duration + 5 s)",
            ),
            row(
                "longest gap between series writes across the hand-over (before the kill)",
                lambda m: "{} ({})".format(
                    s(m["write_gap_ms"]["across_handover"]), s(m["write_gap_ms"]["steady_before_kill"])
                ),
            ),
            row(
                "RSS before the kill: leader / standby (MiB)",
                lambda m: "{} / {}".format(mib(m["rss_kib"]["leader"]), mib(m["rss_kib"]["standby"])),
            ),
            row(
                "standby's peak RSS (VmHWM) at its first write (MiB)",
                lambda m: mib(m["rss_kib"]["standby_peak_after_takeover"]),
            ),
            row(
                "API server CPU over {} s: one / two replicas".format(modes[0]["one_replica"]["seconds"]),
                lambda m: per_replica(m, "apiserver_cpu_s") + " s",
            ),
            row("etcd CPU, the same windows", lambda m: per_replica(m, "etcd_cpu_s") + " s"),
            row(
                "watch bytes sent for Events, raw + series objects, the same windows (MiB)",
                lambda m: "{} / {}".format(watch(m["one_replica"]), watch(m["two_replicas"])),
            ),
            row("standby Ready after its start", lambda m: n(m["standby_ready_after_start_s"]) + " s"),
            *row_if(
                "leader_while_standby_started",
                "the leader's heartbeats / writes shed from the standby's start to the end of the two-replica window",
                lambda m: "{} / {}".format(
                    n(m["leader_while_standby_started"]["heartbeats"]), n(m["leader_while_standby_started"]["shed"])
                ),
                "0 / 0: else the rows above hold the leader's writes",
            ),
            row(
                "the leader kept the Lease until the kill (the standby's start deposed nobody)",
                lambda m: {True: "yes", False: "**no**"}.get(m.get("leader_kept_until_kill"), "-"),
                "yes",
            ),
            *row_if(
                "alerts_resolved_then_fired",
                "alerts unresolved before the kill / resolved and fired again",
                lambda m: "{} / **{}**".format(
                    n(m["alerts_resolved_then_fired"]["unresolved_before_kill"]),
                    n(m["alerts_resolved_then_fired"]["lapsed"]),
                ),
                "0 fired again",
            ),
        ],
    )


def growth(d, axes=None):
    pts = points(d, axes)
    if pts and all(p["axis"] == "message" for p in pts):
        return growth_message(pts)
    rows = [
        [
            "{} {}".format(n(p["x"]), p["axis"]),
            n(p["series"]),
            n(p["stored"]),
            n(p["steady_rss_kib"] / 1024, 1),
            n(p["restart_ms"] / 1000, 1),
            n(p["restart_peak_rss_kib"] / 1024, 1),
        ]
        for p in pts
        if p["axis"] != "message"
    ]
    return table(
        [
            "point",
            "series",
            "stored raw events",
            "RSS (MiB)",
            "restart (s)",
            "restart peak RSS (MiB)",
        ],
        rows,
    )


def growth_message(pts):
    """The message axis: the CPU per change is over the changes the operator counted, which a slow
    API server makes fewer than planned, so planned and written are beside it."""

    def wrote(p):
        load = p.get("loader")
        if not load:
            return "not recorded"
        return "{} ({} skipped, {} failed) in {} s".format(
            n(load["done"]), n(load.get("skipped", 0)), n(load["failed"]), n(load["wall_s"], 1)
        )

    rows = [
        [
            "{} B".format(n(p["x"])),
            n(p["rss_kib"] / 1024, 1),
            # Bold where the operator counted fewer than were written (the loader's and 100 creates).
            "**{}**".format(n(p["changes"]))
            if p.get("loader") and p["changes"] < p["loader"]["done"] + 100
            else n(p["changes"]),
            n(p["planned"]) if p.get("planned") is not None else "not recorded",
            wrote(p),
            "{} µs".format(p["cpu_us_per_change"]),
        ]
        for p in pts
    ]
    return table(
        [
            "message",
            "RSS (MiB)",
            "changes counted",
            "planned (rate × seconds + creates)",
            "loader: changes written besides the 100 creates (skipped: behind its rate)",
            "CPU per change",
        ],
        rows,
    )


def restore_buffer(d, _flag=None):
    mib = lambda kib: n(kib / 1024, 1)
    rows = [
        [
            "{} (round {})".format(r.get("value", r.get("buffer")), r["round"]),
            n(r["rebuilt_ms"] / 1000, 1),
            n(r["flushes"]),
            mib(r["peak_rss_kib"]),
            "**{}×**".format(r["peak_over_steady"]),
            mib(r["rss_after_15s_kib"]),
            r["loadavg_1m"],
        ]
        for r in d["runs"]
    ]
    return table(
        [
            d.get("flag", "--restart-buffer-bytes"),
            "rebuilt (s)",
            "early replays",
            "peak RSS (MiB)",
            "peak over steady ({} MiB)".format(mib(d["leader_steady_rss_kib"])),
            "RSS 15 s later (MiB)",
            "load (1 min)",
        ],
        rows,
    )


ECONOMY = [
    ("legacy", "client-go `tools/record` (the kubelet's) alone"),
    ("events", "client-go `tools/events` alone"),
    ("kube-rs", "kube-rs `Recorder`"),
    ("event-series", "`tools/record` + event-series"),
]


def economy(d):
    """`just bench-economy`: the writes of one storm per approach, each recorder's and the system's
    (raw writes plus series writes), from a dated summary (bench/results/dated/economy/)."""
    by = {r["approach"]: r for r in d["result"]}
    rows = []
    for approach, label in ECONOMY:
        r = by.get(approach)
        if r is None:
            continue
        core, ev = r["core_writes"], r["events_k8s_io_writes"]
        total = core + ev
        if r.get("linger_s"):
            label += " (alive {} s after the storm)".format(n(r["linger_s"]))
        held = "{} ({} %)".format(n(r["api_count"]), n(100 * r["api_count"] / max(r["emitted"], 1), 1))
        op = r.get("operator") or {}
        if op:
            held += "; series objects count {} in {}, {} Finished".format(
                n(op["series_count_sum"]), n(op["series_objects"]), n(op["finished_objects"])
            )
        load = lambda m: (m or {}).get("loadavg", "?").split()[0]
        rows.append(
            [
                label,
                n(r["emitted"]),
                n(core),
                n(ev),
                f"**{n(total)}**",
                n(1000 * total / max(r["emitted"], 1), 1),
                held,
                "{} / {}".format(load(r.get("machine_start")), load(r.get("machine_end"))),
            ]
        )
    return table(
        [
            "approach",
            "occurrences emitted",
            "core/v1 writes (raw)",
            "events.k8s.io writes",
            "all writes",
            "writes per 1,000 occurrences",
            "occurrences the API holds",
            "load (1 min) at start / end",
        ],
        rows,
    )


def memory(d):
    """`just bench-memory`: RSS with 10,000 and 100,000 series, built and after a restart."""
    r = d["result"]
    mib = lambda kib: n(kib / 1024, 1)
    rows = []
    for built, restart, after in zip(r["memory"], r["restart"], r["memory_after_restart"]):
        rows.append(
            [
                n(built["series"]),
                "**{}** (peak {})".format(mib(built["vmrss_kib"]), mib(built["vmhwm_kib"])),
                n(restart["ready_ms"] / 1000, 1),
                "**{}** (peak {})".format(mib(after["vmrss_kib"]), mib(after["vmhwm_kib"])),
            ]
        )
    return table(
        [
            "active series",
            "RSS (MiB), process that built them",
            "restart to /readyz (s)",
            "RSS (MiB) after a restart rebuilt them",
        ],
        rows,
    )


def flood(d):
    """`just bench-flood`: peak RSS with 300 raw events of 100 B and of 1 MB messages."""
    r = d["result"]
    mib = lambda kib: n(kib / 1024, 1)
    rows = [
        [
            str(i + 1),
            mib(x["short_watch_kib"]),
            mib(x["long_watch_kib"]),
            mib(x["short_restart_kib"]),
            mib(x["long_restart_kib"]),
        ]
        for i, x in enumerate(r["runs"])
    ]
    return table(
        [
            "run",
            "peak watching, 100 B (MiB)",
            "peak watching, 1 MB (MiB)",
            "peak after a restart, 100 B (MiB)",
            "peak after a restart, 1 MB (MiB)",
        ],
        rows,
    )


def bookmarks(d):
    """`just bench-bookmarks`: what forced watch reconnects re-send, with and without bookmarks."""
    rows = [
        [
            "off (default for events)" if x["watch_cache"] == "off" else x["watch_cache"],
            x["bookmarks"],
            n(x["watch_restarts"]),
            "**{}**".format(n(x["bookmarks_received"])),
            n(x["relists"]),
            "**{}**".format(n(x["raw_events_resent"])),
        ]
        for x in d["result"]
    ]
    return table(
        [
            "apiserver watch cache",
            "bookmarks asked",
            "watch reconnects",
            "bookmarks received",
            "relists (410 Gone)",
            "raw events re-sent",
        ],
        rows,
    )


def ingest(d):
    """`just bench-ingest`: raw event changes a second against the operator's lag, CPU and RSS."""
    rows = [
        [
            n(x["target_rate"]),
            n(x["achieved_rate"], 1),
            n(x["operator_observed_per_s"], 1),
            "{} / {}".format(n(x["lag_p50_s"] * 1000, 1), n(x["lag_p99_s"] * 1000, 1)),
            n(x["operator_cpu_cores"], 3),
            n(x["apiserver_cpu_cores"], 3),
            n(x["operator_rss_kib"] / 1024, 1),
            x["loadavg_at_start"].split()[0],
        ]
        for x in d["result"]["steps"]
    ]
    return table(
        [
            "target changes/s",
            "achieved",
            "seen by the operator /s",
            "lag p50 / p99 (ms)",
            "operator CPU (cores)",
            "apiserver CPU (cores)",
            "operator RSS (MiB)",
            "load (1 min)",
        ],
        rows,
    )


def against_kubelet(got, want):
    """The series' summed counts beside the kubelet's occurrences, in bold when they differ."""
    return f"{n(got)}, the kubelet's exactly" if got == want else f"**{n(got)}, not the kubelet's {n(want)}**"


def node(d):
    """`just bench-node`: per namespace of the real node, the kubelet's writes beside event-series' and
    how stale the series objects' view of the loop got (bench/node.sh)."""
    rows = []
    for ns, v in d["namespaces"].items():
        series = v["series"]
        finished = sum(1 for s in series.values() if s["state"] == "Finished")
        rows.append(
            [
                ns,
                d["policies"].get(ns, "?"),
                n(v["restarts"]),
                "{} ({})".format(n(v["kubelet_writes"]), n(v["raw_occurrences"])),
                "**{}**".format(n(v["event_series_writes"])),
                "{} s".format(n(v["largest_staleness_s"])),
                n(v["largest_occurrences_not_shown"]),
                "{} series ({}), {} Finished; counts sum to {}".format(
                    n(len(series)),
                    ", ".join("{} {}".format(r, n(s["count"])) for r, s in sorted(series.items())),
                    n(finished),
                    against_kubelet(sum(s["count"] for s in series.values()), v["raw_occurrences"]),
                ),
            ]
        )
    rows.append(
        [
            "whole cluster, apiserver `/metrics`",
            "",
            "",
            "core/v1 {}".format(n(d["core_writes_total"])),
            "events.k8s.io {}".format(n(d["events_k8s_io_writes_total"])),
            "",
            "",
            "",
        ]
    )
    return table(
        [
            "namespace",
            "policy",
            "restarts in {} min".format(d["minutes"]),
            "kubelet writes (occurrences)",
            "event-series writes",
            "largest lag of `lastObservedTime`",
            "most occurrences not shown",
            "series at the end",
        ],
        rows,
    )


def node_latency(d):
    """`just bench-node` end to end, from the API server's audit log (bench/scale_figures.py): the
    kubelet's write of an occurrence to the series write that shows it, and each finish's lateness
    past finishAfter, against the goal of finishAfter + 5 s once the cluster is quiet."""
    rows = []
    for ns, v in d["namespaces"].items():
        e = v["end_to_end"]
        late = e["finish_lateness_s"]
        quiet = (late.get("quiet") or {}).get("p99")
        refresh = spread(e.get("refresh_s"), 1)
        if e.get("refresh_s"):
            refresh += "; {} shown only by the finish".format(n(e["occurrences_shown_only_by_the_finish"]))
        rows.append(
            [
                ns,
                spread(e.get("create_s"), 3),
                refresh,
                spread(late.get("loaded"), 1, ("p50", "p99", "max")),
                spread(late.get("quiet"), 1, ("p50", "p99", "max")),
                "-" if quiet is None else met(quiet, 5),
            ]
        )
    return table(
        [
            "namespace",
            "create: second occurrence's write to the create, p50 / p99 (s) (series)",
            "refresh: an occurrence's write to the next write of its series, p50 / p99 (s) (occurrences)",
            "finish lateness while the loop ran, p50 / p99 / max (s) (series)",
            "finish lateness after the Pods went, p50 / p99 / max (s) (series)",
            "quiet p99 against finishAfter + 5 s",
        ],
        rows,
    )


def rollout(d):
    """`just bench-rollout`: a `kubectl rollout restart` of the installed operator on the real node
    (bench/rollout.sh): the hand-over timings from the API server's audit log, alerts, counts, RSS."""
    load, r, counts = d["load"], d["rollout"], d.get("counts", {})
    s = lambda ms: "-" if ms is None else n(ms / 1000, 1) + " s"
    mib = lambda kib: "-" if kib is None else n(kib / 1024, 1)
    a = r["alerts"]

    def replicas(rows):
        lead = [x for x in rows if x["leader"]]
        rest = [x for x in rows if not x["leader"]]
        return " / ".join(mib(x["rss_kib"]) for x in lead + rest)

    def keys(g):
        c = counts.get(g)
        if c is None:
            return "-"
        text = "{} keys, {} exact; {} occurrences in series, {} raw".format(
            n(c["keys"]), n(c["exact"]), n(c["series_count_sum"]), n(c["raw_occurrences"])
        )
        return text if c["off"] == 0 else "**{} ({} off)**".format(text, n(c["off"]))

    new = [p for p in r["pods"] if p["deleted_ms"] is None]
    after = {x["pod"]: x for x in r["replicas_after"]}
    return table(
        ["", "", "target"],
        [
            [
                "series / alerting loops / stream",
                "{} in {} namespaces / {} (resend {}) / {} changes a second on {} keys, heartbeat {}".format(
                    n(load["series"]),
                    n(load["seed_namespaces"]),
                    n(load["alerts_expected"]),
                    load["alert_resend_interval"],
                    load["stream"]["rate_per_s"],
                    load["stream"]["keys"],
                    load["stream"]["heartbeat"],
                ),
                "",
            ],
            [
                "`rollout status` done / last old Pod gone, after the restart",
                "{} / {}".format(s(r["status_ms"]), s(r["old_pods_gone_ms"])),
                "",
            ],
            [
                "new Pods Ready after their creation",
                ", ".join(s(p["ready_ms"] - p["created_ms"]) for p in new if p["ready_ms"] is not None),
                "",
            ],
            ["changes of the Lease holder", n(r["leader_changes"]), "at most 2"],
            [
                "old leader's last request to new leader's first series write",
                ", ".join(
                    "**{}**{}".format(
                        s(h["exit_to_first_write_ms"]),
                        {True: " (warm)", False: " (cold: it took the Lease before its restore)"}.get(
                            h.get("warm_at_lease"), ""
                        ),
                    )
                    for h in r["handovers"]
                )
                or "-",
                "≤ 20 s (lease duration + 5 s)",
            ],
            [
                "longest gap between series writes across the rollout (the 30 s before)",
                "**{}** ({})".format(
                    s(r["write_gap_ms"]["across_rollout"]["ms"]), s(r["write_gap_ms"]["steady_before"]["ms"])
                ),
                "≤ 20 s",
            ],
            [
                "alerts active before / fewest during the rollout",
                "{} / {}".format(n(a["before"]), n(a["fewest"])),
                "the same",
            ],
            ["alerts that lapsed and fired again", "**{}**".format(n(a["lapsed_alerts"])), "0"],
            ["seeded series: every key's count", keys("seeded"), "every key exact"],
            ["stream: every key's count", keys("stream"), "every key exact"],
            [
                "RSS before: leader / standby (MiB)",
                replicas(r["replicas_before"]),
                "",
            ],
            [
                "RSS after: leader / standby (MiB); peak (VmHWM) of the new Pods",
                "{}; {}".format(
                    replicas(r["replicas_after"]),
                    " / ".join(mib(after.get(p["pod"], {}).get("hwm_kib")) for p in new),
                ),
                "",
            ],
            [
                "container memory at its peak (cgroup), new Pods (MiB); restarts",
                "{}; {}".format(
                    " / ".join(mib(after.get(p["pod"], {}).get("cgroup_peak_kib")) for p in new),
                    n(sum(x.get("restarts") or 0 for x in r["replicas_after"])),
                ),
                "under the limit, {}".format(d["memory_limit"]),
            ],
        ],
    )


def points(d, axes):
    """The growth points of `axes` (a comma-separated list; all when None)."""
    keep = axes.split(",") if axes else None
    return [p for p in d.get("points", []) if keep is None or p["axis"] in keep]


def fits(kind, arg, d, current):
    """Whether result `d` can stand for `current` in a table of `kind`: a growth file with points of
    the table's axes, a scale file run with the same steps (a bill table: with its bill)."""
    if kind == "growth":
        return bool(points(d, arg))
    if kind.startswith("failover"):
        # The cold/warm runs have modes; the earlier runs measured a cold standby only.
        if kind == "failover-standby":
            return "modes" in d and (arg is None or d["stored_raw_events"] == int(arg))
        return "modes" not in d
    if kind == "node-latency":
        # The runs before it measured no end-to-end figures.
        return all("end_to_end" in v for v in d["namespaces"].values())
    if kind == "restore-buffer":
        # The same bench alternates another flag when asked, into a directory of its own.
        return d.get("flag", "--restart-buffer-bytes") == (arg or "--restart-buffer-bytes")
    if kind == "rollout":
        # A run stopped early has no figures for the table.
        return bool(d.get("completed"))
    if kind.startswith("scale-"):
        labels = lambda r: [s.get("label") for s in r.get("steps", [])]
        return labels(d) == labels(current) and (kind != "scale-bill" or bool(d.get("bill")))
    return True


GENERATORS = {
    "scale-steps": scale_steps,
    "scale-latency": scale_latency,
    "scale-targets": scale_targets,
    "scale-bill": scale_bill,
    "heartbeats": heartbeats,
    "bound": bound,
    "engine": engine,
    "heap": heap,
    "soak": soak,
    "failover": failover,
    "failover-standby": failover_standby,
    "growth": growth,
    "restore-buffer": restore_buffer,
    "economy": economy,
    "memory": memory,
    "flood": flood,
    "bookmarks": bookmarks,
    "ingest": ingest,
    "node": node,
    "node-latency": node_latency,
    "rollout": rollout,
}


DATE = re.compile(r"\d{8}T\d{6}Z")


def newest(path, kind, arg):
    """The newest result file like `path` (its date part replaced) that fits the table."""
    current = result(path)
    for found in sorted(glob.glob(os.path.join(ROOT, DATE.sub("*", path))), reverse=True):
        rel = os.path.relpath(found, ROOT)
        if rel == path or fits(kind, arg, result(rel), current):
            return rel
    return path


def generator(name):
    """(kind, argument or None) of a marker's generator name."""
    kind, _, arg = name.partition(":")
    return kind, arg or None


def render(text, latest=False):
    def one(m):
        name, path = m.group(1), m.group(2)
        kind, arg = generator(name)
        if latest and arg != "history":
            path = newest(path, kind, arg)
        d = result(path)
        body = GENERATORS[kind](d, arg) if arg not in (None, "history") else GENERATORS[kind](d)
        return f"<!-- table: {name} {path} -->\n{body}{source(d, path, kind)}<!-- /table -->\n"

    return MARKER.sub(one, text)


# What a benchmark measures: the operator's code and its dependencies. The crate's own version line
# is left out of the manifests, so that a version bump alone does not make every figure stale.
CODE = ["src", "core"]
MANIFESTS = ["Cargo.toml", "Cargo.lock", "core/Cargo.toml"]
OWN_VERSION = re.compile(r'(name = "event-series(?:-core)?"\n)version = "[^"]*"\n')


def git(*args):
    return subprocess.run(["git", "-C", ROOT, *args], capture_output=True, text=True, check=False)


def changed_since(commit, extra=()):
    """The operator code paths (and `extra` paths, e.g. the benchmark's own script) that differ
    between `commit` and HEAD ([] when the figures are current); None when the commit is not in this
    clone or the code measured was not committed ("-dirty", bench/lib.sh)."""
    if commit.endswith("-dirty") or git("cat-file", "-e", commit + "^{commit}").returncode != 0:
        return None
    paths = [*CODE, *extra]
    out = [p for p in git("diff", "--name-only", commit, "HEAD", "--", *paths).stdout.split() if p not in MANIFESTS]
    for m in MANIFESTS:
        old, new = git("show", f"{commit}:{m}"), git("show", "HEAD:" + m)
        if OWN_VERSION.sub(r"\1", old.stdout) != OWN_VERSION.sub(r"\1", new.stdout):
            out.append(m)
    return out


BINARY_COMMIT = re.compile(r"\(commit ([0-9a-f]{7,40})")


def binary_differs(d):
    """Why a result's binary is not its commit's code (None when it is, or the binary did not say):
    bench/lib.sh records the measured binary's `--version`, which names the commit it was built from."""
    m = BINARY_COMMIT.search(str((d.get("machine") or {}).get("binary", "")))
    commit = d.get("commit", "?").removesuffix("-dirty")
    if m and not (commit.startswith(m.group(1)) or m.group(1).startswith(commit)):
        return f"the binary measured was built from {m.group(1)}"
    return None


def result(path):
    """A result file with its commit and machine (a soak keeps both beside its summary)."""
    with open(os.path.join(ROOT, path)) as f:
        d = json.load(f)
    run = os.path.dirname(os.path.join(ROOT, path))
    if "commit" not in d and os.path.exists(os.path.join(run, "commit")):
        with open(os.path.join(run, "commit")) as f:
            d["commit"] = f.read().strip()
        with open(os.path.join(run, "machine.json")) as f:
            d["machine"] = json.load(f)
    return d


def stale_tables():
    """(doc, table, result file, commit, what changed) of every generated table that is not current."""
    out = []
    for doc in DOCS:
        with open(os.path.join(ROOT, doc)) as f:
            text = f.read()
        for m in MARKER.finditer(text):
            if generator(m.group(1))[1] == "history":
                continue
            d = result(m.group(2))
            commit = d.get("commit", "?")
            changed = changed_since(commit)
            differs = binary_differs(d)
            if differs:
                out.append((doc, m.group(1), m.group(2), commit[:7], differs))
            elif changed != []:
                out.append(
                    (
                        doc,
                        m.group(1),
                        m.group(2),
                        commit[:7],
                        "uncommitted code, or a commit not in this clone"
                        if changed is None
                        else ", ".join(changed[:6]) + (f" and {len(changed) - 6} more" if len(changed) > 6 else ""),
                    )
                )
    return out


def main():
    check = sys.argv[1:] == ["--check"]
    latest = sys.argv[1:] == ["--latest"]
    if sys.argv[1:2] == ["--current"] and len(sys.argv) >= 3:
        # --current GLOB [PATH...]: exit 0 when the newest result file matching GLOB was measured on
        # HEAD's operator code and PATHs (bench/all.sh's RESUME=1).
        found = sorted(glob.glob(os.path.join(ROOT, sys.argv[2])))
        if not found:
            sys.exit(f"no result file matches {sys.argv[2]}")
        newest_file = os.path.relpath(found[-1], ROOT)
        newest = result(newest_file)
        changed = changed_since(newest.get("commit", "?"), sys.argv[3:])
        if binary_differs(newest):
            sys.exit(f"{newest_file} is not current ({binary_differs(newest)})")
        if changed != []:
            sys.exit(
                "{} is not current ({})".format(
                    newest_file, "unknown commit" if changed is None else "changed since: " + ", ".join(changed[:6])
                )
            )
        print(f"{newest_file} is current")
        return
    if sys.argv[1:] == ["--stale"]:
        for row in stale_tables():
            print("{}: {} ({}), measured on {}; changed since: {}".format(*row))
        return
    if sys.argv[1:] and not (check or latest):
        sys.exit(__doc__)
    stale = []
    for doc in DOCS:
        path = os.path.join(ROOT, doc)
        with open(path) as f:
            text = f.read()
        new = render(text, latest)
        if new != text:
            if check:
                stale += [
                    "{}: {}".format(doc, m.group(1) + " " + m.group(2))
                    for m, o in zip(MARKER.finditer(new), MARKER.finditer(text))
                    if m.group(0) != o.group(0)
                ]
            else:
                with open(path, "w") as f:
                    f.write(new)
    if stale:
        sys.exit(
            "tables that differ from their result files (python3 bench/tables.py rewrites them):\n  "
            + "\n  ".join(stale)
        )


if __name__ == "__main__":
    main()
