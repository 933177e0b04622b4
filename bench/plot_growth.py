#!/usr/bin/env python3
"""Draws docs/growth.svg from the newest bench/results/growth/*.json (bench/growth.sh): four panels,
each a measure against a size on a logarithmic axis. Standard library only: the SVG is written by
hand, like docs/economy.svg.

Usage: python3 bench/plot_growth.py [result.json] [output.svg]
"""

import glob
import json
import math
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def newest():
    files = sorted(glob.glob(os.path.join(ROOT, "bench", "results", "growth", "*.json")))
    if not files:
        sys.exit("plot_growth: no bench/results/growth/*.json; run bench/growth.sh first")
    return files[-1]


SOURCE = sys.argv[1] if len(sys.argv) > 1 else newest()
OUTPUT = sys.argv[2] if len(sys.argv) > 2 else os.path.join(ROOT, "docs", "growth.svg")

# (axis, title, x label, [(y label, field, scale, colour, right-hand axis)])
PANELS = [
    (
        "series",
        "against active series",
        "series",
        [
            ("steady RSS (MiB)", "steady_rss_kib", 1 / 1024, "#1f77b4", False),
            ("restart peak RSS (MiB)", "restart_peak_rss_kib", 1 / 1024, "#9467bd", False),
            ("restart (s)", "restart_ms", 1 / 1000, "#d62728", True),
        ],
    ),
    (
        "stored",
        "against stored raw events (1,000 series)",
        "stored raw events",
        [
            ("steady RSS (MiB)", "steady_rss_kib", 1 / 1024, "#1f77b4", False),
            ("restart peak RSS (MiB)", "restart_peak_rss_kib", 1 / 1024, "#9467bd", False),
            ("restart (s)", "restart_ms", 1 / 1000, "#d62728", True),
        ],
    ),
    (
        "namespaces",
        "against namespaces (10,000 series)",
        "namespaces",
        [
            ("steady RSS (MiB)", "steady_rss_kib", 1 / 1024, "#1f77b4", False),
            ("restart peak RSS (MiB)", "restart_peak_rss_kib", 1 / 1024, "#9467bd", False),
            ("restart (s)", "restart_ms", 1 / 1000, "#d62728", True),
        ],
    ),
    (
        "message",
        "CPU per change against message size",
        "message bytes",
        [("CPU per change (µs)", "cpu_us_per_change", 1, "#2ca02c", False)],
    ),
]

PW, PH = 430, 260  # one panel
L, R, T, B = 60, 60, 40, 70


def esc(s):
    return s.replace("&", "&amp;").replace("<", "&lt;")


def nice_max(v):
    if v <= 0:
        return 1
    p = 10 ** math.floor(math.log10(v))
    for m in (1, 2, 5, 10):
        if v <= m * p:
            return m * p
    return 10 * p


def panel(ox, oy, title, xlabel, lines, points):
    out = [
        f'<g transform="translate({ox},{oy})">',
        f'<text x="{PW / 2}" y="18" text-anchor="middle" font-weight="bold">{esc(title)}</text>',
    ]
    if not points:
        out.append(f'<text x="{PW / 2}" y="{PH / 2}" text-anchor="middle">not measured</text></g>')
        return out
    xs = [p["x"] for p in points]
    lo, hi = math.log10(min(xs)), math.log10(max(xs))
    hi = hi if hi > lo else lo + 1
    w, h = PW - L - R, PH - T - B

    def px(x):
        return L + (math.log10(x) - lo) / (hi - lo) * w

    left = [ln for ln in lines if not ln[4]]
    right = [ln for ln in lines if ln[4]]
    scales = {}
    for side, group in (("l", left), ("r", right)):
        top = nice_max(max((p.get(f, 0) or 0) * k for _, f, k, _, _ in group for p in points) if group else 1)
        scales[side] = top
        x = L if side == "l" else L + w
        anchor = "end" if side == "l" else "start"
        dx = -6 if side == "l" else 6
        if group:
            for i in range(5):
                v = top * i / 4
                y = T + h - h * i / 4
                out.append(f'<text x="{x + dx}" y="{y + 4}" text-anchor="{anchor}" font-size="11">{v:g}</text>')
    out.append(f'<rect x="{L}" y="{T}" width="{w}" height="{h}" fill="none" stroke="#999"/>')
    for x in xs:
        out.append(f'<text x="{px(x)}" y="{T + h + 16}" text-anchor="middle" font-size="11">{x:,}</text>')
    out.append(f'<text x="{L + w / 2}" y="{T + h + 34}" text-anchor="middle" font-size="12">{esc(xlabel)}</text>')
    for n, (label, field, k, colour, is_right) in enumerate(lines):
        top = scales["r" if is_right else "l"]
        pts = [(px(p["x"]), T + h - (p.get(field, 0) or 0) * k / top * h) for p in points]
        path = " ".join(f"{x:.1f},{y:.1f}" for x, y in pts)
        dash = ' stroke-dasharray="5,3"' if is_right else ""
        out.append(f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="2"{dash}/>')
        for x, y in pts:
            out.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3" fill="{colour}"/>')
        side = " (right axis)" if is_right else ""
        out.append(f'<text x="{L}" y="{T + h + 50 + 12 * n}" font-size="11" fill="{colour}">{esc(label + side)}</text>')
    out.append("</g>")
    return out


def main():
    with open(SOURCE) as f:
        result = json.load(f)
    by_axis = {}
    for p in result["points"]:
        by_axis.setdefault(p["axis"], []).append(p)
    W, H = 2 * PW, 2 * PH + 60
    svg = [
        (f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">'),
        f'<rect width="{W}" height="{H}" fill="white"/>',
    ]
    for i, (axis, title, xlabel, lines) in enumerate(PANELS):
        pts = sorted(by_axis.get(axis, []), key=lambda p: p["x"])
        svg += panel((i % 2) * PW, (i // 2) * PH, title, xlabel, lines, pts)
    m = result["machine"]
    note = (
        f"bench/results/growth/{os.path.basename(SOURCE)}: commit {result['commit'][:7]}, "
        f"{m['nproc']} cores ({m['cpu']}), load {m['loadavg']}; operator flags {result['flags']}"
    )
    svg.append(f'<text x="10" y="{H - 20}" font-size="11">{esc(note)}</text>')
    svg.append("</svg>")
    with open(OUTPUT, "w") as f:
        f.write("\n".join(svg) + "\n")
    print(f"plot_growth: wrote {OUTPUT} from {SOURCE}")


if __name__ == "__main__":
    main()
