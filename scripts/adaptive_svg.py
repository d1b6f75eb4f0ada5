#!/usr/bin/env python3
"""Draw scripts/adaptive_demo.py's JSON as an SVG (hand-written, no plotting library).

Usage: python3 scripts/adaptive_svg.py /tmp/adaptive.json docs/concurrency-adaptive.svg

One block per run (none, aimd, vegas, gradient2; two blocks a row), each three panels over
time (s), sampled every 250 ms:
  1. concurrency, log scale: the key's limit, leases held, the backend's in-flight requests
     (queued + in service, abandoned ones included) and its capacity C;
  2. p99 latency (ms) of the 200 answers completed in each 250 ms window, with S and the
     services' deadline;
  3. goodput (200 answers per second) in each window, with the capacity C/S.
The phase with half the capacity is shaded.
"""

from __future__ import annotations

import json
import math
import sys
from html import escape
from typing import Any

WIDTH = 900
COLS = 2
LEFT, RIGHT = 54, 16          # margins of a block's plot area inside its column
H_CONC, H_P99, H_GOOD = 150, 78, 78
GAP = 12                      # between the panels of a block
BLOCK_TOP = 24                # the block's title
BLOCK_BOTTOM = 40             # x tick labels and axis title
HEADER = 74                   # figure title and legend
FOOTER = 24

COLORS = {"limit": "#1f5fbf", "held": "#e07b00", "backend": "#7a7a7a", "capacity": "#000000",
          "p99": "#b8261b", "goodput": "#2a8a3a", "ref": "#555555"}
FONT = 'font-family="DejaVu Sans, Arial, Helvetica, sans-serif"'


class Svg:
    def __init__(self) -> None:
        self.parts: list[str] = []

    def add(self, s: str) -> None:
        self.parts.append(s)

    def text(self, x: float, y: float, s: str, size: int = 11, anchor: str = "start", weight: str = "normal",
             color: str = "#222", rotate: bool = False) -> None:
        tr = f' transform="rotate(-90 {x:.1f} {y:.1f})"' if rotate else ""
        self.add(f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" text-anchor="{anchor}" '
                 f'font-weight="{weight}" fill="{color}"{tr}>{escape(s)}</text>')

    def line(self, x1: float, y1: float, x2: float, y2: float, color: str = "#000", width: float = 1,
             dash: str = "") -> None:
        d = f' stroke-dasharray="{dash}"' if dash else ""
        self.add(f'<line x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}" stroke="{color}" '
                 f'stroke-width="{width}"{d}/>')

    def rect(self, x: float, y: float, w: float, h: float, fill: str = "none", stroke: str = "none") -> None:
        self.add(f'<rect x="{x:.1f}" y="{y:.1f}" width="{w:.1f}" height="{h:.1f}" fill="{fill}" stroke="{stroke}"/>')

    def polyline(self, points: list[tuple[float, float] | None], color: str, width: float = 1.5,
                 dash: str = "") -> None:
        """Points; None breaks the line."""
        run: list[tuple[float, float]] = []
        d = f' stroke-dasharray="{dash}"' if dash else ""

        def flush() -> None:
            if len(run) == 1:
                x, y = run[0]
                self.add(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="1.6" fill="{color}"/>')
            elif run:
                pts = " ".join(f"{x:.1f},{y:.1f}" for x, y in run)
                self.add(f'<polyline points="{pts}" fill="none" stroke="{color}" stroke-width="{width}" '
                         f'stroke-linejoin="round"{d}/>')
            run.clear()

        for p in points:
            if p is None:
                flush()
            else:
                run.append(p)
        flush()

    def render(self, height: float) -> str:
        return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height:.0f}" '
                f'viewBox="0 0 {WIDTH} {height:.0f}" {FONT}>\n<rect width="100%" height="100%" fill="#fff"/>\n'
                + "\n".join(self.parts) + "\n</svg>\n")


def nice_step(span: float, ticks: int = 4) -> float:
    raw = span / ticks
    mag = 10 ** math.floor(math.log10(raw))
    for m in (1, 2, 2.5, 5, 10):
        if raw <= m * mag:
            return m * mag
    return 10 * mag


def step_points(samples: list[dict[str, Any]], key: str, fx: Any, fy: Any) -> list[tuple[float, float] | None]:
    """A step line (the capacity changes at an instant)."""
    pts: list[tuple[float, float] | None] = []
    prev = None
    for s in samples:
        v = s[key]
        if prev is not None and v != prev:
            pts.append((fx(s["t"]), fy(prev)))
        pts.append((fx(s["t"]), fy(v)))
        prev = v
    return pts


def draw(data: dict[str, Any]) -> str:
    cfg = data["config"]
    runs = data["runs"]
    names = list(runs)
    phase_s = cfg["phase_s"]
    duration = 3 * phase_s
    service_ms = cfg["service_ms"]
    deadline = cfg["deadline_ms"]
    cap_rps = cfg["capacity"] / (service_ms / 1000)

    col_w = WIDTH / COLS
    plot_w = col_w - LEFT - RIGHT
    block_h = BLOCK_TOP + H_CONC + GAP + H_P99 + GAP + H_GOOD + BLOCK_BOTTOM
    rows = math.ceil(len(names) / COLS)
    height = HEADER + rows * block_h + FOOTER
    svg = Svg()

    # Common scales: concurrency log 1..10^k, p99 0..deadline (+20%), goodput 0..max.
    conc_max = 1.0
    for run in runs.values():
        for s in run["samples"]:
            for v in (s["limit"], s["held"], s["backend_inflight"], s["capacity"]):
                if v:
                    conc_max = max(conc_max, v)
    log_hi = max(2, math.ceil(math.log10(conc_max)))
    p99_hi = deadline * 1.2
    p99_max_seen = max((s["p99_ms"] or 0) for run in runs.values() for s in run["samples"])
    if p99_max_seen > p99_hi:
        p99_hi = p99_max_seen * 1.05
    good_hi = max(cap_rps * 1.25, max((s["goodput_rps"] or 0) for run in runs.values() for s in run["samples"]))
    good_step = nice_step(good_hi, 3)
    good_hi = math.ceil(good_hi / good_step) * good_step
    p99_step = nice_step(p99_hi, 4)

    svg.text(WIDTH / 2, 20, f"Adaptive concurrency limit on one shared key: backend C = {cfg['capacity']} workers, "
             f"S = {service_ms:g} ms, offered {cfg['load']:g}x capacity", size=14, anchor="middle", weight="bold")
    svg.text(WIDTH / 2, 37, f"2 service instances, {cfg['clients']} open-loop clients, deadline {deadline:g} ms; "
             f"capacity C, then C/2 (shaded), then C again", size=11, anchor="middle", color="#444")
    legend = [("limit", COLORS["limit"], ""), ("leases held", COLORS["held"], ""),
              ("backend in-flight (queued + served)", COLORS["backend"], "4 3"),
              ("capacity C (or C/S)", COLORS["capacity"], "2 2"), ("p99 of 200s", COLORS["p99"], ""),
              ("goodput (200s/s)", COLORS["goodput"], "")]
    x = 24
    for label, color, dash in legend:
        svg.line(x, 55, x + 22, 55, color, 2.2, dash)
        svg.text(x + 27, 59, label, size=11)
        x += 27 + 6.3 * len(label) + 16

    for i, name in enumerate(names):
        run = runs[name]
        samples = run["samples"]
        x0 = (i % COLS) * col_w + LEFT
        y0 = HEADER + (i // COLS) * block_h
        fx = lambda t, x0=x0: x0 + plot_w * t / duration  # noqa: E731
        title = {"none": "none (no limiter)", "aimd": "ADAPTIVE AIMD", "vegas": "ADAPTIVE VEGAS",
                 "gradient2": "ADAPTIVE GRADIENT2"}.get(name, name)
        svg.text(x0 + plot_w / 2, y0 + 16, title, size=13, anchor="middle", weight="bold")

        panels = []
        top = y0 + BLOCK_TOP
        for h in (H_CONC, H_P99, H_GOOD):
            panels.append((top, h))
            top += h + GAP
        # Shading, frame, x grid.
        for pt, ph in panels:
            svg.rect(fx(phase_s), pt, fx(2 * phase_s) - fx(phase_s), ph, fill="#eeeeee")
            t = 0.0
            while t <= duration + 1e-9:
                svg.line(fx(t), pt, fx(t), pt + ph, "#e2e2e2", 0.6)
                t += 5
            svg.rect(x0, pt, plot_w, ph, stroke="#888")
        bottom = panels[-1][0] + panels[-1][1]
        t = 0.0
        while t <= duration + 1e-9:
            svg.line(fx(t), bottom, fx(t), bottom + 4, "#888")
            svg.text(fx(t), bottom + 15, f"{t:g}", size=10, anchor="middle")
            t += 5
        svg.text(x0 + plot_w / 2, bottom + 31, "time (s)", size=11, anchor="middle")

        # 1. Concurrency, log scale.
        pt, ph = panels[0]
        fy = lambda v, pt=pt, ph=ph: pt + ph - ph * math.log10(max(v, 1)) / log_hi  # noqa: E731
        for k in range(log_hi + 1):
            y = fy(10 ** k)
            if 0 < k < log_hi:
                svg.line(x0, y, x0 + plot_w, y, "#e2e2e2", 0.6)
            for m in (2, 5):
                if k < log_hi:
                    svg.line(x0, fy(m * 10 ** k), x0 + 3, fy(m * 10 ** k), "#888", 0.6)
            svg.text(x0 - 5, y + 3.5, f"{10 ** k:,}", size=10, anchor="end")
        svg.text(x0 - 40, pt + ph / 2, "in flight (log)", size=11, anchor="middle", rotate=True)
        svg.polyline([(fx(s["t"]), fy(s["backend_inflight"])) for s in samples], COLORS["backend"], 1.4, "4 3")
        svg.polyline(step_points(samples, "capacity", fx, fy), COLORS["capacity"], 1.6, "2 2")
        if any(s["limit"] is not None for s in samples):
            svg.polyline([(fx(s["t"]), fy(s["held"])) if s["held"] is not None else None for s in samples],
                         COLORS["held"], 1.4)
            svg.polyline([(fx(s["t"]), fy(s["limit"])) if s["limit"] is not None else None for s in samples],
                         COLORS["limit"], 1.8)
        else:
            last = samples[-1]["backend_inflight"]
            svg.text(x0 + plot_w - 6, pt + 14, f"no limiter: backend in-flight reaches {last:,}", size=10,
                     anchor="end", color="#444")

        # 2. p99 of 200s.
        pt, ph = panels[1]
        fy = lambda v, pt=pt, ph=ph: pt + ph - ph * min(v, p99_hi) / p99_hi  # noqa: E731
        v = 0.0
        while v <= p99_hi + 1e-9:
            svg.text(x0 - 5, fy(v) + 3.5, f"{v:g}", size=10, anchor="end")
            if v > 0:
                svg.line(x0, fy(v), x0 + plot_w, fy(v), "#e2e2e2", 0.6)
            v += p99_step
        svg.line(x0, fy(deadline), x0 + plot_w, fy(deadline), COLORS["ref"], 1, "6 3")
        svg.text(x0 + plot_w - 4, fy(deadline) - 3, f"deadline {deadline:g} ms", size=9, anchor="end", color="#444")
        svg.line(x0, fy(service_ms), x0 + plot_w, fy(service_ms), COLORS["ref"], 1, "2 2")
        svg.text(x0 + plot_w - 4, fy(service_ms) - 3, f"S = {service_ms:g} ms", size=9, anchor="end", color="#444")
        svg.text(x0 - 40, pt + ph / 2, "p99 (ms)", size=11, anchor="middle", rotate=True)
        svg.polyline([(fx(s["t"]), fy(s["p99_ms"])) if s["p99_ms"] is not None else None for s in samples],
                     COLORS["p99"], 1.5)
        if all(s["p99_ms"] is None for s in samples if s["t"] > phase_s):
            svg.text(x0 + plot_w / 2 + 40, pt + ph / 2 + 4, "no 200 answers", size=10, anchor="middle", color="#444")

        # 3. Goodput.
        pt, ph = panels[2]
        fy = lambda v, pt=pt, ph=ph: pt + ph - ph * min(v, good_hi) / good_hi  # noqa: E731
        v = 0.0
        while v <= good_hi + 1e-9:
            svg.text(x0 - 5, fy(v) + 3.5, f"{v:g}", size=10, anchor="end")
            if v > 0:
                svg.line(x0, fy(v), x0 + plot_w, fy(v), "#e2e2e2", 0.6)
            v += good_step
        cap_pts = [dict(t=s["t"], c=s["capacity"] / (service_ms / 1000)) for s in samples]
        svg.polyline(step_points(cap_pts, "c", fx, fy), COLORS["capacity"], 1.4, "2 2")
        svg.text(x0 - 40, pt + ph / 2, "200s / s", size=11, anchor="middle", rotate=True)
        svg.polyline([(fx(s["t"]), fy(s["goodput_rps"])) if s["goodput_rps"] is not None else None
                      for s in samples], COLORS["goodput"], 1.4)

    svg.text(WIDTH / 2, height - 8, "Made by scripts/adaptive_demo.py and scripts/adaptive_svg.py; "
             f"{cfg.get('cpus', '?')} CPUs shared by every process; samples every "
             f"{int(cfg['sample_s'] * 1000)} ms.", size=10, anchor="middle", color="#555")
    return svg.render(height)


def main() -> None:
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    with open(sys.argv[1]) as f:
        data = json.load(f)
    with open(sys.argv[2], "w") as f:
        f.write(draw(data))


if __name__ == "__main__":
    main()
