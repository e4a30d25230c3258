"""Time series as inline SVG line charts, rendered on the server (no JavaScript plotting).

A chart has a title, a y axis with a few round ticks, an x axis with the time of its
first and last points (UTC, HH:MM:SS), and one polyline per series. Up to
``POINT_MARKERS_MAX`` points of each series carry a marker whose ``<title>`` (a
tooltip, read by screen readers too) and ``data-label`` give the series, the value and
the time; the console's script shows the hovered one under the chart. Everything in it that
came from the cluster (a series' name) is escaped here, since the SVG goes into the page
as markup.
"""

from __future__ import annotations

import datetime
import math
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

from markupsafe import Markup

WIDTH = 640
HEIGHT = 220
MARGIN_LEFT = 64
MARGIN_RIGHT = 16
MARGIN_TOP = 28
MARGIN_BOTTOM = 32
TICKS = 4
COLOURS = ("#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2")
"""Line colours, one per series in turn."""
POINT_MARKERS_MAX = 60
"""Points per series given a hover marker (value and time in its title); evenly spread,
the newest always among them, so a page of long series stays light."""


@dataclass(frozen=True, slots=True)
class Series:
    """One line: its name and its (time in s since the epoch, value) points, in time order."""

    name: str
    points: Sequence[tuple[float, float]]


def nice_ceiling(value: float) -> float:
    """The smallest 1, 2 or 5 times a power of ten at or above ``value`` (1 for 0)."""
    if value <= 0:
        return 1.0
    power = 10 ** math.floor(math.log10(value))
    for step in (1, 2, 5, 10):
        if value <= step * power:
            return float(step * power)
    raise AssertionError("unreachable")


def format_number(value: float) -> str:
    """A tick label: whole numbers plainly, large ones with k or M."""
    if abs(value) >= 1_000_000:
        return f"{value / 1_000_000:g}M"
    if abs(value) >= 10_000:
        return f"{value / 1000:g}k"
    if value == int(value):
        return str(int(value))
    return f"{value:.3g}"


def _clock(time_s: float) -> str:
    return datetime.datetime.fromtimestamp(time_s, tz=datetime.UTC).strftime("%H:%M:%S")


def marked_points(points: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    """At most ``POINT_MARKERS_MAX`` of ``points``, evenly spread, the last included."""
    if len(points) <= POINT_MARKERS_MAX:
        return list(points)
    step = len(points) / POINT_MARKERS_MAX
    last = len(points) - 1
    return [points[last - int(i * step)] for i in reversed(range(POINT_MARKERS_MAX))]


def line_chart(
    series: Sequence[Series],
    *,
    title: str,
    y_label: str,
    width: int = WIDTH,
    height: int = HEIGHT,
) -> Markup:
    """An SVG line chart of ``series``; a chart saying "no data yet" when no series has
    two points."""
    plot_width = width - MARGIN_LEFT - MARGIN_RIGHT
    plot_height = height - MARGIN_TOP - MARGIN_BOTTOM
    parts = [
        f'<svg class="chart" role="img" xmlns="http://www.w3.org/2000/svg" '
        f'width="{width}" height="{height}" viewBox="0 0 {width} {height}">',
        f"<title>{escape(title)}</title>",
        f'<text x="{MARGIN_LEFT}" y="18" class="chart-title">{escape(title)}</text>',
    ]
    points = [point for one in series for point in one.points]
    if len(points) < 2:
        parts.append(
            f'<text x="{width / 2:.0f}" y="{height / 2:.0f}" text-anchor="middle" '
            'class="chart-empty">no data yet: the console samples every few seconds</text>'
        )
        parts.append("</svg>")
        return Markup("".join(parts))
    start = min(t for t, _ in points)
    end = max(t for t, _ in points)
    span = max(end - start, 1e-9)
    top = nice_ceiling(max(v for _, v in points))

    def x(time_s: float) -> float:
        return MARGIN_LEFT + (time_s - start) / span * plot_width

    def y(value: float) -> float:
        return MARGIN_TOP + plot_height - max(value, 0.0) / top * plot_height

    for tick in range(TICKS + 1):
        value = top * tick / TICKS
        at = y(value)
        parts.append(
            f'<line x1="{MARGIN_LEFT}" x2="{width - MARGIN_RIGHT}" y1="{at:.1f}" '
            f'y2="{at:.1f}" class="chart-grid"/>'
            f'<text x="{MARGIN_LEFT - 6}" y="{at + 4:.1f}" text-anchor="end" '
            f'class="chart-tick">{format_number(value)}</text>'
        )
    baseline = MARGIN_TOP + plot_height
    parts.append(
        f'<text x="{MARGIN_LEFT}" y="{baseline + 18}" class="chart-tick">{_clock(start)}</text>'
        f'<text x="{width - MARGIN_RIGHT}" y="{baseline + 18}" text-anchor="end" '
        f'class="chart-tick">{_clock(end)} UTC</text>'
        f'<text transform="translate(14 {MARGIN_TOP + plot_height / 2:.0f}) rotate(-90)" '
        f'text-anchor="middle" class="chart-label">{escape(y_label)}</text>'
    )
    for index, one in enumerate(series):
        if not one.points:
            continue
        colour = COLOURS[index % len(COLOURS)]
        coordinates = " ".join(f"{x(t):.1f},{y(v):.1f}" for t, v in one.points)
        parts.append(
            f'<polyline fill="none" stroke="{colour}" stroke-width="2" points="{coordinates}">'
            f"<title>{escape(one.name)}</title></polyline>"
        )
        for t, v in marked_points(one.points):
            label = escape(f"{one.name}: {format_number(round(v, 3))} {y_label} at {_clock(t)} UTC")
            parts.append(
                f'<circle class="chart-point" cx="{x(t):.1f}" cy="{y(v):.1f}" r="4" '
                f'fill="{colour}" data-label="{label}"><title>{label}</title></circle>'
            )
    if len(series) > 1:
        for index, one in enumerate(series[: len(COLOURS)]):
            colour = COLOURS[index % len(COLOURS)]
            legend_x = MARGIN_LEFT + 8 + index * 110
            parts.append(
                f'<rect x="{legend_x}" y="{MARGIN_TOP + 4}" width="10" height="10" '
                f'fill="{colour}"/><text x="{legend_x + 14}" y="{MARGIN_TOP + 13}" '
                f'class="chart-tick">{escape(one.name[:14])}</text>'
            )
    parts.append("</svg>")
    return Markup("".join(parts))
