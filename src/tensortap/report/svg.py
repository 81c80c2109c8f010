"""Small inline SVG charts: a report that opens offline needs no plotting library or script."""

from __future__ import annotations

import html
import math
from collections.abc import Mapping, Sequence

PALETTE = (
    "#1f77b4",
    "#d62728",
    "#2ca02c",
    "#ff7f0e",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#7f7f7f",
    "#bcbd22",
    "#17becf",
)
W, H, LEFT, RIGHT, TOP, BOTTOM = 560, 260, 60, 150, 24, 36


def _fmt(value: float) -> str:
    if value == 0 or not math.isfinite(value):
        return f"{value:g}"
    return f"{value:.3g}"


def _short(name: str, most: int) -> str:
    """``name`` in at most ``most`` characters, keeping its start and its end."""
    if len(name) <= most:
        return name
    keep = most - 1
    return name[: keep // 2] + "…" + name[-(keep - keep // 2) :]


def line_chart(
    series: Mapping[str, tuple[Sequence[float], Sequence[float]]],
    title: str,
    xlabel: str,
    marks: Mapping[float, str] | None = None,
) -> str:
    """One line per series (x values, y values), with a legend on the right; ``marks`` draws a
    dashed vertical line with a label at each x (where a rule fired, say)."""
    points = [
        (x, y)
        for xs, ys in series.values()
        for x, y in zip(xs, ys, strict=True)
        if math.isfinite(y)
    ]
    if not points:
        return f"<p>{html.escape(title)}: no data.</p>"
    x0, x1 = min(p[0] for p in points), max(p[0] for p in points)
    y0, y1 = min(p[1] for p in points), max(p[1] for p in points)
    if x1 == x0:
        x1 = x0 + 1
    if y1 == y0:
        y1 = y0 + abs(y0) * 0.1 + 1e-12
    plot_w, plot_h = W - LEFT - RIGHT, H - TOP - BOTTOM

    def sx(x: float) -> float:
        return LEFT + (x - x0) / (x1 - x0) * plot_w

    def sy(y: float) -> float:
        return TOP + (1 - (y - y0) / (y1 - y0)) * plot_h

    parts = [_frame(title, xlabel, x0, x1, y0, y1)]
    for i, (x, label) in enumerate(sorted((marks or {}).items())):
        if x0 <= x <= x1:
            parts.append(
                f'<line x1="{sx(x):.1f}" y1="{TOP}" x2="{sx(x):.1f}" y2="{H - BOTTOM}" '
                f'stroke="#b00" stroke-dasharray="4 3"/><text x="{sx(x) + 3:.1f}" '
                f'y="{TOP + 10 + 11 * (i % 4)}" font-size="10" fill="#b00">'
                f"{html.escape(label[:30])}</text>"
            )
    for i, (name, (xs, ys)) in enumerate(series.items()):
        color = PALETTE[i % len(PALETTE)]
        coords = " ".join(
            f"{sx(x):.1f},{sy(y):.1f}" for x, y in zip(xs, ys, strict=True) if math.isfinite(y)
        )
        parts.append(f'<polyline fill="none" stroke="{color}" stroke-width="2" points="{coords}"/>')
        ly = TOP + 14 * i + 8
        parts.append(
            f'<rect x="{W - RIGHT + 10}" y="{ly - 8}" width="10" height="10" fill="{color}"/>'
            f'<text x="{W - RIGHT + 24}" y="{ly + 1}" font-size="11">'
            f"{html.escape(_short(name, 20))}</text>"
        )
    return _svg("".join(parts), title)


def bar_chart(values: Mapping[str, float], title: str) -> str:
    """Horizontal bars, largest first."""
    items = sorted(values.items(), key=lambda kv: kv[1], reverse=True)
    if not items:
        return f"<p>{html.escape(title)}: no data.</p>"
    top = max(abs(v) for _, v in items) or 1.0
    height = TOP + 18 * len(items) + 10
    parts = [
        f'<text x="{W / 2}" y="16" text-anchor="middle" font-weight="bold">'
        f"{html.escape(title)}</text>"
    ]
    for i, (name, value) in enumerate(items):
        y = TOP + 18 * i
        width = abs(value) / top * (W - 260)
        parts.append(
            f'<text x="150" y="{y + 12}" text-anchor="end" font-size="11">'
            f"{html.escape(name[:24])}</text>"
            f'<rect x="156" y="{y + 2}" width="{width:.1f}" height="13" fill="{PALETTE[0]}"/>'
            f'<text x="{160 + width:.1f}" y="{y + 12}" font-size="11">{_fmt(value)}</text>'
        )
    return _svg("".join(parts), title, height)


def _frame(title: str, xlabel: str, x0: float, x1: float, y0: float, y1: float) -> str:
    bottom, right = H - BOTTOM, W - RIGHT
    return (
        f'<text x="{(LEFT + right) / 2}" y="16" text-anchor="middle" font-weight="bold">'
        f"{html.escape(title)}</text>"
        f'<line x1="{LEFT}" y1="{bottom}" x2="{right}" y2="{bottom}" stroke="#444"/>'
        f'<line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{bottom}" stroke="#444"/>'
        f'<text x="{LEFT - 4}" y="{TOP + 4}" text-anchor="end" font-size="10">{_fmt(y1)}</text>'
        f'<text x="{LEFT - 4}" y="{bottom}" text-anchor="end" font-size="10">{_fmt(y0)}</text>'
        f'<text x="{LEFT}" y="{bottom + 14}" font-size="10">{_fmt(x0)}</text>'
        f'<text x="{right}" y="{bottom + 14}" text-anchor="end" font-size="10">{_fmt(x1)}</text>'
        f'<text x="{(LEFT + right) / 2}" y="{bottom + 28}" text-anchor="middle" font-size="11">'
        f"{html.escape(xlabel)}</text>"
    )


def _svg(body: str, title: str, height: int = H) -> str:
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{height}" '
        f'viewBox="0 0 {W} {height}" role="img" aria-label="{html.escape(title)}">{body}</svg>'
    )


def heatmap(
    matrix: Sequence[Sequence[float]],
    rows: Sequence[str],
    columns: Sequence[float],
    title: str,
    low: str = "#fff7ec",
    high: str = "#7f0000",
) -> str:
    """Rows x columns of cells shaded from ``low`` to ``high`` over the finite values (blank
    where a value is missing), with the range in the title."""
    values = [v for row in matrix for v in row if math.isfinite(v)]
    if not values or not rows or not columns:
        return f"<p>{html.escape(title)}: no data.</p>"
    v0, v1 = min(values), max(values)
    left, cell_h = 170, 14
    cell_w = max(2.0, (W - left - 20) / len(columns))
    height = TOP + cell_h * len(rows) + 30
    a = [int(low[i : i + 2], 16) for i in (1, 3, 5)]
    b = [int(high[i : i + 2], 16) for i in (1, 3, 5)]
    parts = [
        f'<text x="{W / 2}" y="16" text-anchor="middle" font-weight="bold">'
        f"{html.escape(title)}: {_fmt(v0)} to {_fmt(v1)}</text>"
    ]
    for r, (name, row) in enumerate(zip(rows, matrix, strict=True)):
        y = TOP + cell_h * r
        parts.append(
            f'<text x="{left - 4}" y="{y + 11}" text-anchor="end" font-size="10">'
            f"{html.escape(name[-28:])}</text>"
        )
        for c, value in enumerate(row):
            if not math.isfinite(value):
                continue
            t = 0.0 if v1 == v0 else (value - v0) / (v1 - v0)
            color = "#" + "".join(
                f"{round(p + (q - p) * t):02x}" for p, q in zip(a, b, strict=True)
            )
            parts.append(
                f'<rect x="{left + c * cell_w:.1f}" y="{y}" width="{cell_w + 0.5:.1f}" '
                f'height="{cell_h}" fill="{color}"><title>{html.escape(name)} at '
                f"{_fmt(columns[c])}: {_fmt(value)}</title></rect>"
            )
    bottom = TOP + cell_h * len(rows)
    parts.append(
        f'<text x="{left}" y="{bottom + 14}" font-size="10">step {_fmt(columns[0])}</text>'
        f'<text x="{left + cell_w * len(columns)}" y="{bottom + 14}" text-anchor="end" '
        f'font-size="10">step {_fmt(columns[-1])}</text>'
    )
    return _svg("".join(parts), title, height)
