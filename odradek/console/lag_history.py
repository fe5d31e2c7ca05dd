"""Consumer lag over time: a bounded in-memory history the console samples periodically, drawn
as an inline SVG line chart (no JavaScript).

Bounds: at most :data:`MAX_GROUPS` groups are tracked (the first by name), each with the last
``max_samples`` samples; a sample holds the total lag and the lag of at most :data:`MAX_TOPICS`
topics. A group that disappears from the cluster is forgotten.
"""

from __future__ import annotations

import asyncio
import collections
import html
import logging
import time
from dataclasses import dataclass

from odradek.console.client import ConsoleClient, ConsoleError
from odradek.console.groups import describe_group, list_groups

log = logging.getLogger(__name__)

MAX_GROUPS = 100
MAX_TOPICS = 6
DEFAULT_MAX_SAMPLES = 360
COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2")
TOTAL_COLOR = "#222222"


@dataclass(frozen=True)
class Sample:
    time_s: float
    total: int
    by_topic: tuple[tuple[str, int], ...]


class LagHistory:
    def __init__(self, max_samples: int = DEFAULT_MAX_SAMPLES) -> None:
        self.max_samples = max_samples
        self._groups: dict[str, collections.deque[Sample]] = {}
        self.last_error: str | None = None
        self.last_sample_s: float | None = None

    def record(self, group: str, total: int, by_topic: dict[str, int], now_s: float | None = None) -> None:
        if group not in self._groups:
            if len(self._groups) >= MAX_GROUPS:
                return
            self._groups[group] = collections.deque(maxlen=self.max_samples)
        topics = tuple(sorted(by_topic.items())[:MAX_TOPICS])
        self._groups[group].append(Sample(time.time() if now_s is None else now_s, total, topics))

    def retain(self, groups: set[str]) -> None:
        for g in [g for g in self._groups if g not in groups]:
            del self._groups[g]

    def samples(self, group: str) -> list[Sample]:
        return list(self._groups.get(group, ()))

    async def sample(self, client: ConsoleClient) -> None:
        """One round: every group's lag (at most :data:`MAX_GROUPS`)."""
        listings, errors = await list_groups(client)
        names = [g.group_id for g in listings][:MAX_GROUPS]
        self.retain(set(names))
        for name in names:
            try:
                d = await describe_group(client, name)
            except ConsoleError as e:
                errors.append(f"group {name}: {e}")
                continue
            self.record(name, d.total_lag, d.lag_by_topic())
        self.last_sample_s = time.time()
        self.last_error = "; ".join(errors) or None

    async def run(self, client: ConsoleClient, interval_s: float) -> None:
        """Sample every ``interval_s`` until cancelled; a cluster that is away is logged, not fatal."""
        while True:
            try:
                await self.sample(client)
            except ConsoleError as e:
                self.last_error = str(e)
                log.warning("lag sampling failed: %s", e)
            except Exception:  # keep sampling whatever one round hit
                log.exception("lag sampling failed")
            await asyncio.sleep(interval_s)


def _nice_max(v: int) -> int:
    if v <= 10:
        return 10
    step = 10 ** (len(str(v)) - 1)
    return ((v + step - 1) // step) * step


def lag_chart_svg(samples: list[Sample], width: int = 720, height: int = 240) -> str:
    """An SVG line chart of the total lag (and each topic's when there are several)."""
    left, right, top, bottom = 60, 150, 10, 30
    pw, ph = width - left - right, height - top - bottom
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="lag-chart" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="consumer lag over time">',
        f'<rect x="{left}" y="{top}" width="{pw}" height="{ph}" fill="#fafafa" stroke="#ccc"/>',
    ]
    if not samples:
        parts.append(f'<text x="{left + 10}" y="{top + ph // 2}" font-size="13">no samples yet</text></svg>')
        return "".join(parts)
    t0, t1 = samples[0].time_s, samples[-1].time_s
    span = max(t1 - t0, 1e-9)
    ymax = _nice_max(max(s.total for s in samples))

    def xy(i: int, t: float, v: int) -> str:
        x = left + (pw * (t - t0) / span if len(samples) > 1 else pw / 2)
        y = top + ph - ph * v / ymax
        return f"{x:.1f},{y:.1f}"

    for frac in (0, 0.5, 1):
        y = top + ph - ph * frac
        parts.append(f'<line x1="{left}" y1="{y:.1f}" x2="{left + pw}" y2="{y:.1f}" stroke="#e0e0e0"/>')
        parts.append(f'<text x="{left - 6}" y="{y + 4:.1f}" font-size="11" text-anchor="end">{int(ymax * frac)}</text>')
    parts.append(f'<text x="{left}" y="{height - 8}" font-size="11">{time.strftime("%H:%M:%S", time.localtime(t0))}</text>')
    parts.append(f'<text x="{left + pw}" y="{height - 8}" font-size="11" text-anchor="end">'
                 f'{time.strftime("%H:%M:%S", time.localtime(t1))}</text>')
    topics = sorted({name for s in samples for name, _ in s.by_topic})[:MAX_TOPICS]
    series: list[tuple[str, str, list[int]]] = [("total", TOTAL_COLOR, [s.total for s in samples])]
    if len(topics) > 1:
        for i, name in enumerate(topics):
            series.append((name, COLORS[i % len(COLORS)], [dict(s.by_topic).get(name, 0) for s in samples]))
    for n, (label, color, values) in enumerate(series):
        points = " ".join(xy(i, s.time_s, v) for i, (s, v) in enumerate(zip(samples, values, strict=True)))
        width_px = 2.5 if n == 0 else 1.5
        if len(samples) == 1:
            cx, cy = points.split(",")
            parts.append(f'<circle cx="{cx}" cy="{cy}" r="3" fill="{color}"/>')
        else:
            parts.append(f'<polyline fill="none" stroke="{color}" stroke-width="{width_px}" points="{points}"/>')
        ly = top + 14 + 16 * n
        parts.append(f'<line x1="{left + pw + 10}" y1="{ly - 4}" x2="{left + pw + 28}" y2="{ly - 4}" '
                     f'stroke="{color}" stroke-width="{width_px}"/>')
        parts.append(f'<text x="{left + pw + 32}" y="{ly}" font-size="11">{html.escape(label[:18])} '
                     f'{values[-1]}</text>')
    parts.append("</svg>")
    return "".join(parts)
