"""The one table of colours every page uses: the static report embeds it (its style and its
SVG lines), and the dashboard is served it (``/static/colours.css`` and ``/static/colours.js``,
made from this module), so that a mode, a severity or a status looks the same everywhere."""

from __future__ import annotations

import json
from collections.abc import Sequence

#: A line's colour by the mode its steps were saved in, where a chart draws each mode once.
MODE_COLOURS = {
    "TRAIN": "#1f77b4",
    "EVAL": "#ff7f0e",
    "PREDICT": "#2ca02c",
    "GLOBAL": "#7f7f7f",
}
#: A finding's colour by its severity (its label, its mark on the curves).
SEVERITY_COLOURS = {"problem": "#b00000", "warning": "#aa6600", "advice": "#666666"}
#: Lines told apart by something else than their mode (several tensors, several runs).
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
BAD = "#d00000"  # NaN / Inf, on every chart
GOOD = "#007000"  # a rule that found nothing, a run that completed
RUNNING = "#224466"  # a run still going


def line_colours(modes: Sequence[str | None]) -> list[str]:
    """The colours of a chart's lines, given each line's mode (None: not known): by mode when
    every line's mode is known and no mode is drawn twice, else the palette in order."""
    known = [m for m in modes if m is not None and m in MODE_COLOURS]
    if len(known) == len(modes) and len(set(known)) == len(known):
        return [MODE_COLOURS[m] for m in known]
    return [PALETTE[i % len(PALETTE)] for i in range(len(modes))]


def css() -> str:
    """The rules' and runs' status and severity labels: a status alone (``IssuesFound``), a
    severity alone (``advice``), or both on one label (``IssuesFound advice``: the severity
    wins)."""
    problem, warning, advice = (SEVERITY_COLOURS[k] for k in ("problem", "warning", "advice"))
    return (
        f".IssuesFound, .Failed, .Error, .problem {{ color: {problem}; font-weight: bold; }}\n"
        f".NoIssuesFound, .Completed, .Ended, .ok {{ color: {GOOD}; font-weight: normal; }}\n"
        f".NoData, .warning, .IssuesFound.warning {{ color: {warning}; font-weight: bold; }}\n"
        f".advice, .IssuesFound.advice {{ color: {advice}; font-weight: normal; }}\n"
        f".InProgress, .Running, .Starting {{ color: {RUNNING}; }}\n"
    )


def script() -> str:
    """The table for the dashboard's script, as ``window.TENSORTAP_COLOURS``."""
    table = {
        "mode": MODE_COLOURS,
        "severity": SEVERITY_COLOURS,
        "palette": list(PALETTE),
        "bad": BAD,
    }
    return f'"use strict";\nwindow.TENSORTAP_COLOURS = Object.freeze({json.dumps(table)});\n'


__all__ = [
    "BAD",
    "MODE_COLOURS",
    "PALETTE",
    "SEVERITY_COLOURS",
    "css",
    "line_colours",
    "script",
]
