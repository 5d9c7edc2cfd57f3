"""Plots drawn on the server as SVG: no chart library, no JavaScript, no CDN.

>>> svg = bars([date(2026, 1, 1), date(2026, 1, 2)], [3, None], "failures")
>>> svg.startswith("<svg") and "<rect" in svg
True
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import date
from html import escape

WIDTH, HEIGHT = 640, 180
LEFT, RIGHT, TOP, BOTTOM = 48, 10, 18, 24


def _frame(
    title: str, top: float, label: Callable[[float], str], days: Sequence[date]
) -> list[str]:
    inner_h = HEIGHT - TOP - BOTTOM
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" '
        f'role="img" aria-label="{escape(title)}">',
        f'<text x="{LEFT}" y="12" class="t">{escape(title)}</text>',
    ]
    for frac in (0.0, 0.5, 1.0):
        y = TOP + inner_h * (1 - frac)
        parts.append(
            f'<line x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{y:.1f}" y2="{y:.1f}" class="g"/>'
        )
        parts.append(
            f'<text x="{LEFT - 4}" y="{y + 4:.1f}" class="y">{escape(label(top * frac))}</text>'
        )
    if days:
        for i in (0, len(days) // 2, len(days) - 1):
            x = LEFT + (WIDTH - LEFT - RIGHT) * (i + 0.5) / len(days)
            parts.append(f'<text x="{x:.1f}" y="{HEIGHT - 6}" class="x">{days[i]:%b %d}</text>')
    return parts


def bars(
    days: Sequence[date],
    values: Sequence[float | None],
    title: str,
    label: Callable[[float], str] = lambda v: f"{v:,.0f}" if v == int(v) else f"{v:,.1f}",
) -> str:
    """One bar per day; ``None`` draws nothing (no data, not zero)."""
    top = max((v for v in values if v), default=0.0) or 1.0
    parts = _frame(title, top, label, days)
    inner_w, inner_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    step = inner_w / max(len(values), 1)
    for i, value in enumerate(values):
        if value is None:
            continue
        h = inner_h * value / top
        x = LEFT + i * step + step * 0.15
        parts.append(
            f'<rect x="{x:.1f}" y="{TOP + inner_h - h:.1f}" width="{step * 0.7:.1f}" '
            f'height="{h:.1f}"><title>{days[i]:%Y-%m-%d}: {escape(label(value))}</title></rect>'
        )
    parts.append("</svg>")
    return "".join(parts)


def line(
    days: Sequence[date],
    values: Sequence[float | None],
    title: str,
    top: float = 1.0,
    label: Callable[[float], str] = lambda v: f"{v:.0%}",
) -> str:
    """A line through the days that have a value, a dot on each."""
    parts = _frame(title, top, label, days)
    inner_w, inner_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    points = [
        (LEFT + inner_w * (i + 0.5) / len(values), TOP + inner_h * (1 - v / top), days[i], v)
        for i, v in enumerate(values)
        if v is not None
    ]
    if len(points) > 1:
        path = " ".join(f"{x:.1f},{y:.1f}" for x, y, _, _ in points)
        parts.append(f'<polyline points="{path}" class="l"/>')
    for x, y, day, v in points:
        parts.append(
            f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3"><title>{day:%Y-%m-%d}: '
            f"{escape(label(v))}</title></circle>"
        )
    parts.append("</svg>")
    return "".join(parts)
