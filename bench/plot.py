#!/usr/bin/env python3
"""Draws docs/economy.svg: API writes against occurrences, one line per approach, from the samples
bench/economy.sh recorded (bench/results/economy/samples-<approach>.csv). Standard library only: the
SVG is written by hand.

Usage: python3 bench/plot.py [results-dir] [output.svg]
"""

import csv
import json
import math
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "bench", "results", "economy")
OUTPUT = sys.argv[2] if len(sys.argv) > 2 else os.path.join(ROOT, "docs", "economy.svg")

# (label, approach file, column(s) summed, colour, dashed)
SERIES = [
    ("kube-rs Recorder (kube 5)", "kube-rs", ["events_k8s_io_writes"], "#d62728", False),
    ("client-go tools/record (legacy)", "legacy", ["core_writes"], "#ff7f0e", False),
    ("tools/record + event-series (both)", "event-series", ["core_writes", "events_k8s_io_writes"], "#1f77b4", False),
    ("  of which event-series' own writes", "event-series", ["events_k8s_io_writes"], "#1f77b4", True),
    ("client-go tools/events", "events", ["events_k8s_io_writes"], "#2ca02c", False),
]

W, H = 860, 520
L, R, T, B = 80, 300, 50, 60  # margins (legend on the right)


def load(approach):
    path = os.path.join(RESULTS, f"samples-{approach}.csv")
    if not os.path.exists(path):
        return None
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def esc(s):
    return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def main():
    data = {}
    for label, approach, cols, _colour, _dashed in SERIES:
        rows = load(approach)
        if rows:
            data[label] = [(int(r["occurrences"]), sum(int(r[c]) for c in cols)) for r in rows]
    if not data:
        sys.exit(f"plot: no samples in {RESULTS}; run bench/economy.sh first")
    meta = {}
    for approach in ("legacy", "events", "kube-rs", "event-series"):
        p = os.path.join(RESULTS, f"{approach}.json")
        if os.path.exists(p):
            with open(p) as f:
                meta[approach] = json.load(f)

    xmax = max(x for pts in data.values() for x, _ in pts)
    xmax = max(1, xmax)
    ymax_exp = max(2, math.ceil(math.log10(max(10, max(y for pts in data.values() for _, y in pts)))))
    pw, ph = W - L - R, H - T - B

    def sx(x):
        return L + pw * x / xmax

    def sy(y):
        return T + ph * (1 - math.log10(max(1, y)) / ymax_exp)

    out = [
        (
            f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" '
            'font-family="sans-serif" font-size="12">'
        ),
        f'<rect width="{W}" height="{H}" fill="white"/>',
    ]
    some = next(iter(meta.values()), {})
    title = "API writes for one crash-loop storm"
    if some:
        title += f" ({some['pods']} pods x {some['rate']:g}/s x {some['duration_s']} s, real kube-apiserver)"
    out.append(f'<text x="{L}" y="24" font-size="15" font-weight="bold">{esc(title)}</text>')
    # Grid and axes.
    for e in range(ymax_exp + 1):
        y = sy(10**e)
        out.append(f'<line x1="{L}" y1="{y:.1f}" x2="{L + pw}" y2="{y:.1f}" stroke="#ddd"/>')
        out.append(f'<text x="{L - 8}" y="{y + 4:.1f}" text-anchor="end">{10**e:,}</text>')
    step = 10 ** math.floor(math.log10(xmax))
    if xmax / step < 4:
        step /= 2
    x = 0.0
    while x <= xmax + 1e-9:
        px = sx(x)
        out.append(f'<line x1="{px:.1f}" y1="{T}" x2="{px:.1f}" y2="{T + ph}" stroke="#eee"/>')
        out.append(f'<text x="{px:.1f}" y="{T + ph + 18}" text-anchor="middle">{int(x):,}</text>')
        x += step
    out.append(f'<rect x="{L}" y="{T}" width="{pw}" height="{ph}" fill="none" stroke="#444"/>')
    out.append(f'<text x="{L + pw / 2}" y="{H - 18}" text-anchor="middle">occurrences emitted so far</text>')
    out.append(
        f'<text transform="translate(20,{T + ph / 2}) rotate(-90)" text-anchor="middle">'
        "API writes to events (log scale, apiserver_request_total)</text>"
    )
    # One write per occurrence, for reference.
    ref = " ".join(f"{sx(x):.1f},{sy(x):.1f}" for x in (xmax * (i / 200) ** 2 for i in range(1, 201)))
    out.append(f'<polyline points="{ref}" fill="none" stroke="#999" stroke-dasharray="2,4"/>')
    # Lines.
    ly = T + 10
    for label, _approach, _cols, colour, dashed in SERIES:
        pts = data.get(label)
        if not pts:
            continue
        path = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in pts)
        dash = ' stroke-dasharray="6,4"' if dashed else ""
        out.append(f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="2"{dash}/>')
        final = pts[-1][1]
        out.append(
            f'<line x1="{L + pw + 15}" y1="{ly}" x2="{L + pw + 40}" y2="{ly}" stroke="{colour}" '
            f'stroke-width="2"{dash}/>'
        )
        out.append(f'<text x="{L + pw + 46}" y="{ly + 4}">{esc(label)}</text>')
        out.append(f'<text x="{L + pw + 46}" y="{ly + 18}" fill="#555">{final:,} writes</text>')
        ly += 40
    out.append(
        f'<line x1="{L + pw + 15}" y1="{ly}" x2="{L + pw + 40}" y2="{ly}" stroke="#999" stroke-dasharray="2,4"/>'
    )
    out.append(f'<text x="{L + pw + 46}" y="{ly + 4}">one write per occurrence</text>')
    for i, note in enumerate(
        [
            "Vertical ends at the right: writes after",
            "the storm (recorder flush; event-series",
            "writing each loop Finished).",
        ]
    ):
        out.append(f'<text x="{L + pw + 15}" y="{ly + 40 + 14 * i}" fill="#555" font-size="11">{esc(note)}</text>')
    out.append("</svg>")
    os.makedirs(os.path.dirname(OUTPUT), exist_ok=True)
    with open(OUTPUT, "w") as f:
        f.write("\n".join(out) + "\n")
    print(f"plot: wrote {OUTPUT}")


if __name__ == "__main__":
    main()
