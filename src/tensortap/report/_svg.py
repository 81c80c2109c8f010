"""Small inline SVG charts: a report that opens offline needs no plotting library or script."""

from __future__ import annotations

import html
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from tensortap.core._downsample import Series, minmax_buckets
from tensortap.query._curves import LINE_BUCKETS
from tensortap.report._colours import BAD, PALETTE, SEVERITY_COLOURS, line_colours

W, H, LEFT, RIGHT, TOP, BOTTOM = 560, 260, 64, 16, 24, 36
MARK = SEVERITY_COLOURS["problem"]  # where a rule's gravest finding is
MOST_POINTS = LINE_BUCKETS  # buckets of a long series (each kept as its min and max)


def _fmt(value: float) -> str:
    if value == 0 or not math.isfinite(value):
        return f"{value:g}"
    return f"{value:.3g}"


def _step(value: float) -> str:
    """A step number written whole (1e+03 would hide which step)."""
    return str(int(value)) if float(value).is_integer() else _fmt(value)


def _short(name: str, most: int) -> str:
    """``name`` in at most ``most`` characters, keeping its start and its end."""
    if len(name) <= most:
        return name
    keep = most - 1
    return name[: keep // 2] + "…" + name[-(keep - keep // 2) :]


#: A mark's label: its font size, the lanes below the plot's top edge it may stand in, a lane's
#: height and the least room between two labels in one lane (pixels).
FLAG_SIZE, FLAG_LANES, FLAG_LANE, FLAG_GAP = 10, 4, 13, 6
#: Widths of a sans-serif font's characters in ems, generous (DejaVu Sans, the widest of the
#: usual defaults): narrow, wide, capitals and digits, the rest lower case.
_NARROW, _WIDE = set("iljtfI.,:;'!|()[] "), set("mwMW@%")


def text_width(text: str, size: float = FLAG_SIZE) -> float:
    """A generous estimate of ``text``'s width in pixels at font size ``size`` (the report
    opens offline and cannot measure it): a label laid out by it never runs into the next."""
    ems = 0.0
    for c in text:
        if c in _NARROW:
            ems += 0.36
        elif c in _WIDE:
            ems += 1.0
        elif c.isupper() or c.isdigit():
            ems += 0.76
        else:
            ems += 0.64
    return ems * size


@dataclass(frozen=True)
class Flag:
    """A mark's label as laid out: at pixel ``x``, in ``lane`` (0 at the top), to the right of
    its line (``anchor`` "left") or to the left of it near the plot's right edge, ``text`` its
    label (with how many more marks it stands for) and ``title`` every mark's whole label."""

    x: float
    lane: int
    anchor: str
    text: str
    title: str


def flag_lanes(marks: Sequence[tuple[float, str, str]], right: float) -> list[Flag]:
    """The labels of ``marks`` (pixel x, short label, whole label) laid out so that no two
    overprint: each in the first of :data:`FLAG_LANES` lanes where it clears the labels already
    there (set to the left of its line where it would pass ``right``); a mark that finds no lane
    free joins the label nearest it, which counts it ("LossSpike +2") and names it in its
    title. Every mark is on some label."""
    ends = [-math.inf] * FLAG_LANES
    placed: list[tuple[float, int, str, list[tuple[str, str]]]] = []
    for x, short, whole in sorted(marks, key=lambda m: m[0]):
        width = text_width(f"{short} +99") + 3  # room for the count it may gain
        start, end, anchor = x, x + width, "left"
        if end > right:
            start, end, anchor = x - width, x, "right"
        lane = next((k for k, e in enumerate(ends) if e + FLAG_GAP <= start), None)
        if lane is None and placed:
            min(placed, key=lambda p: abs(p[0] - x))[3].append((short, whole))
            continue
        lane = lane or 0
        ends[lane] = end
        placed.append((x, lane, anchor, [(short, whole)]))
    return [
        Flag(
            x,
            lane,
            anchor,
            members[0][0] + (f" +{len(members) - 1}" if len(members) > 1 else ""),
            "; ".join(whole for _, whole in members),
        )
        for x, lane, anchor, members in placed
    ]


def nice_ticks(low: float, high: float, most: int = 6) -> list[float]:
    """Round tick values (1, 2 or 5 times a power of ten) covering ``low..high``."""
    if not (math.isfinite(low) and math.isfinite(high)) or high <= low:
        return [low]
    raw = (high - low) / max(1, most - 1)
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    first = math.ceil(low / step - 1e-9) * step
    count = math.floor((high - first) / step + 1e-9) + 1
    return [round(first + i * step, 12) for i in range(max(count, 0))]


_GAP_TEXT = {"nan": "NaN", "inf": "+Inf", "-inf": "-Inf"}


def _segments(
    xs: np.ndarray, ys: np.ndarray, gaps: Sequence[tuple[float, float, str]]
) -> list[tuple[np.ndarray, np.ndarray]]:
    """The finite points split where a non-finite run lies between two of them (a line never
    bridges a NaN)."""
    cuts = sorted({int(np.searchsorted(xs, first)) for first, _, _ in gaps})
    cuts = [c for c in cuts if 0 < c < len(xs)]
    return list(zip(np.split(xs, cuts), np.split(ys, cuts), strict=True))


def line_chart(
    series: Mapping[str, tuple[Sequence[float] | np.ndarray, Sequence[float] | np.ndarray]],
    title: str,
    xlabel: str,
    marks: Mapping[float, str] | None = None,
    modes: Mapping[str, str] | None = None,
) -> str:
    """One line per series (x values, y values), with the legend below it, whole names; marks
    draws a dashed vertical line with a label at each x (where a rule fired, say). ``modes``
    gives each series' mode: where each mode is drawn once, a line has its mode's colour (as
    on the dashboard, :func:`~tensortap.report._colours.line_colours`). NaN and Inf
    are drawn as red bands with their name and first step (a line never bridges them), a
    series of one point as a dot; a long series keeps every bucket's min and max."""
    shrunk = {
        name: minmax_buckets(np.asarray(xs, dtype=np.float64), np.asarray(ys), MOST_POINTS)
        for name, (xs, ys) in series.items()
        if len(xs)
    }
    return shrunk_line_chart(shrunk, title, xlabel, marks, modes)


def shrunk_line_chart(
    shrunk: Mapping[str, Series],
    title: str,
    xlabel: str,
    marks: Mapping[float, str] | None = None,
    modes: Mapping[str, str] | None = None,
) -> str:
    """:func:`line_chart` of lines already shrunk to at most :data:`MOST_POINTS` buckets
    (:func:`~tensortap.query._curves.shrunk_mode_lines`, which never holds a long line)."""
    every_x = [
        v for s in shrunk.values() for v in (*s.x, *(g[0] for g in s.gaps), *(g[1] for g in s.gaps))
    ]
    if not every_x:
        return f"<p>{html.escape(title)}: no data.</p>"
    finite_y = [float(v) for s in shrunk.values() for v in s.y]
    x0, x1 = float(min(every_x)), float(max(every_x))
    y0, y1 = (min(finite_y), max(finite_y)) if finite_y else (0.0, 1.0)
    if x1 == x0:
        x0, x1 = x0 - 1, x1 + 1
    if y1 == y0:
        pad = abs(y0) * 0.1 or 1.0
        y0, y1 = y0 - pad, y1 + pad
    else:
        pad = (y1 - y0) * 0.04
        y0, y1 = y0 - pad, y1 + pad
    plot_w, plot_h = W - LEFT - RIGHT, H - TOP - BOTTOM

    def sx(x: float) -> float:
        return LEFT + (x - x0) / (x1 - x0) * plot_w

    def sy(y: float) -> float:
        return TOP + (1 - (y - y0) / (y1 - y0)) * plot_h

    colours = line_colours([(modes or {}).get(name) for name in shrunk])
    legend = [(name, colours[i], s) for i, (name, s) in enumerate(shrunk.items())]
    height = H + 16 * len(legend) + 6
    parts = [_frame(title, xlabel, (x0, x1, sx), (y0, y1, sy))]
    if not finite_y:
        parts.append(
            f'<text x="{LEFT + plot_w / 2}" y="{TOP + plot_h / 2}" text-anchor="middle" '
            f'fill="{BAD}" font-weight="bold">no finite value</text>'
        )
    shown = sorted((x, label) for x, label in (marks or {}).items() if x0 <= x <= x1)
    parts.extend(
        f'<line x1="{sx(x):.1f}" y1="{TOP}" x2="{sx(x):.1f}" y2="{H - BOTTOM}" '
        f'stroke="{MARK}" stroke-dasharray="4 3"/>'
        for x, _ in shown
    )
    for flag in flag_lanes([(sx(x), _short(label, 40), label) for x, label in shown], W - RIGHT):
        at, anchor = (flag.x + 3, "start") if flag.anchor == "left" else (flag.x - 3, "end")
        parts.append(
            f'<text class="flag" x="{at:.1f}" y="{TOP + 10 + FLAG_LANE * flag.lane}" '
            f'text-anchor="{anchor}" font-size="{FLAG_SIZE}" fill="{MARK}" '
            # a white halo: readable over the marks' dashed lines
            'stroke="#fff" stroke-width="3" stroke-linejoin="round" paint-order="stroke">'
            f"<title>{html.escape(flag.title)}</title>{html.escape(flag.text)}</text>"
        )
    for row, (name, color, s) in enumerate(legend):
        for first, last, kind in s.gaps:
            left, right = sx(first) - 2, sx(last) + 2
            parts.append(
                f'<rect class="nonfinite" x="{left:.1f}" y="{TOP}" width="{right - left:.1f}" '
                f'height="{plot_h}" fill="{BAD}" fill-opacity="0.18"><title>{html.escape(name)}: '
                f"{_GAP_TEXT[kind]} at steps {_fmt(first)} to {_fmt(last)}</title></rect>"
            )
        for xs, ys in _segments(s.x, s.y, s.gaps):
            coords = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in zip(xs, ys, strict=True))
            if len(xs) > 1:
                parts.append(
                    f'<polyline fill="none" stroke="{color}" stroke-width="2" points="{coords}"/>'
                )
            if len(xs) == 1 or len(s.x) <= 40:
                parts.extend(
                    f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="2.5" fill="{color}"/>'
                    for x, y in zip(xs, ys, strict=True)
                )
        note = ""
        if s.gaps:
            first, _, kind = s.gaps[0]
            note = f" — {_GAP_TEXT[kind]} from step {_fmt(first)}"
            parts.append(
                f'<text x="{min(sx(first) + 3, W - RIGHT - 60):.1f}" '
                f'y="{H - BOTTOM - 6 - 12 * row}" '
                f'font-size="10" font-weight="bold" fill="{BAD}">{_GAP_TEXT[kind]}</text>'
            )
        ly = H + 16 * row + 4
        parts.append(
            f'<rect x="{LEFT}" y="{ly}" width="10" height="10" fill="{color}"/>'
            f'<text x="{LEFT + 16}" y="{ly + 9}" font-size="11">{html.escape(name)}'
            f'<tspan fill="{BAD}" font-weight="bold">{html.escape(note)}</tspan></text>'
        )
    return _svg("".join(parts), title, height)


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


def _frame(
    title: str,
    xlabel: str,
    xs: tuple[float, float, Callable[[float], float]],
    ys: tuple[float, float, Callable[[float], float]],
) -> str:
    """Axes, round ticks with light grid lines, the title and the x label."""
    bottom, right = H - BOTTOM, W - RIGHT
    parts = [
        f'<text x="{(LEFT + right) / 2}" y="16" text-anchor="middle" font-weight="bold">'
        f"{html.escape(title)}</text>"
    ]
    (x0, x1, sx), (y0, y1, sy) = xs, ys
    for y in nice_ticks(y0, y1):
        parts.append(
            f'<line x1="{LEFT}" y1="{sy(y):.1f}" x2="{right}" y2="{sy(y):.1f}" stroke="#eee"/>'
            f'<text x="{LEFT - 4}" y="{sy(y) + 3:.1f}" text-anchor="end" font-size="10">'
            f"{_fmt(y)}</text>"
        )
    for x in nice_ticks(x0, x1):
        parts.append(
            f'<line x1="{sx(x):.1f}" y1="{bottom}" x2="{sx(x):.1f}" y2="{bottom + 4}" '
            f'stroke="#444"/><text x="{sx(x):.1f}" y="{bottom + 14}" text-anchor="middle" '
            f'font-size="10">{_fmt(x)}</text>'
        )
    parts.append(
        f'<line x1="{LEFT}" y1="{bottom}" x2="{right}" y2="{bottom}" stroke="#444"/>'
        f'<line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{bottom}" stroke="#444"/>'
        f'<text x="{(LEFT + right) / 2}" y="{bottom + 28}" text-anchor="middle" font-size="11">'
        f"{html.escape(xlabel)}</text>"
    )
    return "".join(parts)


def _svg(body: str, title: str, height: int = H) -> str:
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{height}" '
        f'viewBox="0 0 {W} {height}" role="img" aria-label="{html.escape(title)}">{body}</svg>'
    )


def _blend(low: str, high: str, t: float) -> str:
    a = [int(low[i : i + 2], 16) for i in (1, 3, 5)]
    b = [int(high[i : i + 2], 16) for i in (1, 3, 5)]
    return "#" + "".join(f"{round(p + (q - p) * t):02x}" for p, q in zip(a, b, strict=True))


def heatmap(
    matrix: Sequence[Sequence[float]],
    rows: Sequence[str],
    columns: Sequence[float],
    title: str,
    low: str = "#fff7ec",
    high: str = "#7f0000",
    scale: tuple[float, float] | None = None,
    percent: bool = False,
    zero: str | None = None,
    spans: Sequence[Sequence[float]] | None = None,
) -> str:
    """Rows x columns of cells shaded from ``low`` to ``high`` over ``scale`` (default: the
    range of the finite values), with a colour bar; blank where a value is missing. ``zero``:
    cells holding ``-inf`` (the log of an exact zero, say) are drawn in that colour and named
    in the legend, never left blank. ``percent`` writes values as percentages. ``columns``
    are the steps of the columns; ``spans``, where a column stands for a bucket of steps,
    its (first, last) step, named in each cell's tooltip."""
    values = [v for row in matrix for v in row if math.isfinite(v)]
    zeros = zero is not None and any(v == -math.inf for row in matrix for v in row)
    if not (values or zeros) or not rows or not columns:
        return f"<p>{html.escape(title)}: no data.</p>"
    v0, v1 = scale if scale is not None else (min(values or [0.0]), max(values or [0.0]))

    def text(value: float) -> str:
        return f"{value * 100:.0f}%" if percent else _fmt(value)

    left, cell_h = 190, 14
    cell_w = max(2.0, (W - left - 20) / len(columns))
    bottom = TOP + cell_h * len(rows)
    height = bottom + 62
    parts = [
        f'<text x="{W / 2}" y="16" text-anchor="middle" font-weight="bold">'
        f"{html.escape(title)}</text>"
    ]
    for r, (name, row) in enumerate(zip(rows, matrix, strict=True)):
        y = TOP + cell_h * r
        parts.append(
            f'<text x="{left - 4}" y="{y + 11}" text-anchor="end" font-size="10">'
            f"<title>{html.escape(name)}</title>{html.escape(_short(name, 32))}</text>"
        )
        for c, value in enumerate(row):
            if zeros and value == -math.inf:
                color, shown = str(zero), "exactly 0"
            elif math.isfinite(value):
                t = 0.0 if v1 == v0 else min(1.0, max(0.0, (value - v0) / (v1 - v0)))
                color, shown = _blend(low, high, t), text(value)
            else:
                continue
            where = (
                f"step {_step(columns[c])}"
                if spans is None or spans[c][0] == spans[c][1]
                else f"steps {_step(spans[c][0])} to {_step(spans[c][1])}"
            )
            parts.append(
                f'<rect x="{left + c * cell_w:.1f}" y="{y}" width="{cell_w + 0.5:.1f}" '
                f'height="{cell_h}" fill="{color}"><title>{html.escape(name)} at '
                f"{where}: {shown}</title></rect>"
            )
    span = columns[-1] - columns[0] or 1
    for step in nice_ticks(columns[0], columns[-1]):
        x = left + (step - columns[0]) / span * cell_w * (len(columns) - 1) + cell_w / 2
        parts.append(
            f'<text x="{x:.1f}" y="{bottom + 13}" text-anchor="middle" font-size="10">'
            f"{_fmt(step)}</text>"
        )
    parts.append(
        f'<text x="{left - 4}" y="{bottom + 13}" text-anchor="end" font-size="10">step</text>'
    )
    bar_y, bar_w = bottom + 24, 160  # the colour bar, with its two ends written out
    parts.append(
        f'<defs><linearGradient id="g{low[1:]}{high[1:]}"><stop offset="0" stop-color="{low}"/>'
        f'<stop offset="1" stop-color="{high}"/></linearGradient></defs>'
        f'<rect class="colorbar" x="{left}" y="{bar_y}" width="{bar_w}" height="10" '
        f'fill="url(#g{low[1:]}{high[1:]})" stroke="#888"/>'
        f'<text x="{left}" y="{bar_y + 22}" font-size="10">{text(v0)}</text>'
        f'<text x="{left + bar_w}" y="{bar_y + 22}" text-anchor="end" font-size="10">'
        f"{text(v1)}</text>"
    )
    if zeros:
        parts.append(
            f'<rect x="{left + bar_w + 24}" y="{bar_y}" width="10" height="10" fill="{zero}"/>'
            f'<text x="{left + bar_w + 38}" y="{bar_y + 9}" font-size="10">exactly 0</text>'
        )
    return _svg("".join(parts), title, height)
