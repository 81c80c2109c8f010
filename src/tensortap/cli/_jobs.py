"""``tensortap jobs``: the runs table, one row per job within the terminal's width (at most
100 columns), sortable, filterable and groupable; ``--json`` for scripts, with every field.

The rows are :mod:`tensortap.jobs._runs`'s; this module only lays them out.
"""

from __future__ import annotations

import argparse
import json
import math
import shlex
import shutil
import sys
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tensortap.exceptions import InvalidConfigError
from tensortap.jobs._record import JobRecord
from tensortap.jobs._runs import (
    COLUMNS,
    Group,
    RunRow,
    filter_rows,
    group_rows,
    parse_where,
    read_rows,
    sort_rows,
)

#: The widest a row is drawn, whatever the terminal.
MAX_WIDTH = 100
#: The narrowest: a terminal narrower than this gets rows this wide, each cut at its end.
MIN_WIDTH = 40
GAP = "  "


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--sort",
        metavar="COLUMN",
        help="sort by a column (name, verdict, status, steps, duration, loss, best, started, "
        "command) or a hyperparameter (lr, batch_size, optimizer, seed, any key of the run's "
        "configuration); -COLUMN for descending (default: by start)",
    )
    parser.add_argument(
        "--filter", metavar="TEXT", help="only jobs whose name, verdict, status or command hold it"
    )
    parser.add_argument(
        "--where",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="only jobs whose hyperparameter (or verdict, status, name) is VALUE: "
        "--where lr=0.01 --where verdict=problem (repeat to combine)",
    )
    parser.add_argument(
        "--group-by",
        metavar="HYPERPARAMETER",
        help="one line per value: jobs, verdicts, mean and spread of the last loss",
    )
    parser.add_argument(
        "--json", action="store_true", help="every field of every job (or group) as JSON"
    )


def jobs(ns: argparse.Namespace) -> int:
    root = Path(ns.runs)
    records = (
        [JobRecord(p) for p in sorted(root.iterdir()) if (p / "job.json").is_file()]
        if root.is_dir()
        else []
    )
    if not records:
        print("[]" if ns.json else f"no jobs in {root}")
        return 0
    where = [parse_where(text) for text in ns.where]
    rows = read_rows(records)
    for key in [k for k, _ in where] + [k for k in (ns.sort, ns.group_by) if k]:
        _check_key(rows, key.lstrip("-"))
    rows = filter_rows(rows, ns.filter, where)
    if ns.sort:
        rows = sort_rows(rows, ns.sort)
    width = terminal_width()
    if ns.group_by:
        groups = group_rows(rows, ns.group_by)
        if ns.json:
            print(json.dumps([g.to_dict() for g in groups], indent=1, default=_nonfinite))
        else:
            _print(group_table(groups, ns.group_by, width))
        return 0
    if ns.json:
        print(json.dumps([r.to_dict() for r in rows], indent=1, default=_nonfinite))
    elif not rows:
        print(f"no job in {root} matches")
    else:
        _print(runs_table(rows, width))
    return 0


def _print(lines: list[str]) -> None:
    """The lines, with what the output's encoding cannot write (``…``, a name's characters
    on a Latin-1 terminal) as ``?``: a listing never fails on a job's name."""
    text = "\n".join(lines)
    encoding = getattr(sys.stdout, "encoding", None) or "utf-8"
    print(text.encode(encoding, "replace").decode(encoding, "replace"))


def _nonfinite(value: Any) -> Any:
    return str(value)


def _check_key(rows: Sequence[RunRow], key: str) -> None:
    """A key no job has, and no column is: say what there is instead of an empty answer."""
    if (
        key.lower() in COLUMNS
        or key.lower() == "verdict"
        or any(r.value(key) is not None for r in rows)
    ):
        return
    seen = sorted({k for r in rows for k, v in r.config.items() if _is_scalar(v)})
    raise InvalidConfigError(
        f"no job has a value for {key!r}: give a column ({', '.join(COLUMNS)}) or a "
        f"hyperparameter the jobs recorded (lr, batch_size, optimizer, seed"
        + (f", {', '.join(seen)}" if seen else "")
        + ", or a dotted path such as trainer.arguments.seed)"
    )


def _is_scalar(value: Any) -> bool:
    return isinstance(value, (str, int, float, bool))


def terminal_width() -> int:
    """The terminal's width (100 when it is not a terminal), at most :data:`MAX_WIDTH`."""
    columns = shutil.get_terminal_size((MAX_WIDTH, 24)).columns
    return max(MIN_WIDTH, min(columns, MAX_WIDTH))


# -- cells --


def text_width(text: str) -> int:
    """Columns ``text`` takes in a terminal: wide (CJK) characters two, combining ones none."""
    return sum(_char_width(c) for c in text)


def _char_width(char: str) -> int:
    if unicodedata.combining(char):
        return 0
    return 2 if unicodedata.east_asian_width(char) in ("W", "F") else 1


def clean(text: str) -> str:
    """One line of printable characters (a name or command may hold anything)."""
    return "".join(c if c.isprintable() else "?" for c in text)


def cut(text: str, width: int) -> str:
    """``text`` in at most ``width`` columns, ending with ``…`` where cut."""
    if text_width(text) <= width:
        return text
    out, used = [], 0
    for char in text:
        w = _char_width(char)
        if used + w > width - 1:
            break
        out.append(char)
        used += w
    return "".join(out) + "…" if width >= 1 else ""


def cut_middle(text: str, width: int) -> str:
    """``text`` in at most ``width`` columns, its middle replaced by ``…`` where cut (a
    job's name keeps its start and its id)."""
    if text_width(text) <= width or width < 5:
        return cut(text, width)
    tail = cut(text[::-1], (width - 1) // 2 + 1)[:-1][::-1]
    return cut(text, width - text_width(tail)) + tail


def _pad(text: str, width: int, right: bool) -> str:
    space = " " * max(width - text_width(text), 0)
    return space + text if right else text + space


def number(value: float | None, digits: int = 4) -> str:
    if value is None:
        return "-"
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return f"{value:.{digits}g}"


def count(value: int | None) -> str:
    if value is None:
        return "-"
    if value < 10_000:
        return str(value)
    if value < 10_000_000:
        return f"{value / 1000:.0f}k"
    return f"{value / 1_000_000:.0f}M"


def duration(seconds: float | None) -> str:
    """``45s``, ``4m12s``, ``1h03m``, ``2d04h``."""
    if seconds is None:
        return "-"
    s = int(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


def hyper(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return number(value, 2)
    return str(value)


# -- laying out --


@dataclass
class Column:
    """A column: its header, its cells, right-aligned or not, the narrowest it may be cut
    to (None: never cut), the widest it is drawn, and whether it is left out when empty."""

    header: str
    cells: list[str]
    right: bool = False
    least: int | None = None
    most: int = MAX_WIDTH
    optional: bool = False  # left out when no row has a value
    middle: bool = False  # cut in the middle (a job's name: its start and its id kept)

    def natural(self) -> int:
        return min(max(text_width(c) for c in [self.header, *self.cells]), self.most)


#: A step of fitting a table: cut a column down to a width, or drop it.
Fit = tuple[str, str, int]


def layout(
    columns: list[Column], width: int, steps: Sequence[Fit], grow: Sequence[str] = ()
) -> list[str]:
    """The header and rows, each at most ``width`` columns: ``steps`` are taken in order while
    the table is too wide (``("cut", header, least)`` cuts a column down to ``least``,
    ``("drop", header, 0)`` leaves it out); what a drop freed goes back to the columns cut,
    those in ``grow`` first; a line still too wide is cut at its end."""
    columns = [c for c in columns if not c.optional or any(cell != "-" for cell in c.cells)]
    natural = {c.header: c.natural() for c in columns}
    widths = dict(natural)

    def total() -> int:
        return sum(widths[c.header] for c in columns) + len(GAP) * (len(columns) - 1)

    for kind, name, least in steps:
        over = total() - width
        if over <= 0:
            break
        if name not in widths or all(c.header != name for c in columns):
            continue
        if kind == "drop":
            columns = [c for c in columns if c.header != name]
        else:
            widths[name] = max(min(least, natural[name]), widths[name] - over)
    order = [*grow, *(c.header for c in columns)]
    for name in (n for n in order if any(c.header == n for c in columns)):
        spare = width - total()  # give back what a drop freed
        if spare <= 0:
            break
        widths[name] = min(natural[name], widths[name] + spare)
    lines = []
    for i in range(-1, len(columns[0].cells) if columns else 0):
        cells = []
        for c in columns:
            text, w = c.header if i < 0 else c.cells[i], widths[c.header]
            cells.append(_pad((cut_middle if c.middle else cut)(text, w), w, c.right))
        lines.append(cut(GAP.join(cells).rstrip(), width))
    return lines


def runs_table(rows: Sequence[RunRow], width: int = MAX_WIDTH) -> list[str]:
    """One line per job (and under a damaged one, its reason), a header first; every line at
    most ``width`` columns."""
    hyper_columns = [
        ("LR", "learning_rate"),
        ("BATCH", "batch_size"),
        ("OPTIMIZER", "optimizer"),
    ]
    columns = [
        Column("JOB", [clean(r.name) for r in rows], middle=True),
        Column("VERDICT", [clean(r.verdict_text) for r in rows], most=34),
        Column("STATUS", [clean(r.status) for r in rows]),
        Column("STEPS", [count(r.steps) for r in rows], right=True),
        Column("TIME", [duration(r.duration) for r in rows], right=True),
        Column("LOSS", [number(r.last_loss) for r in rows], right=True),
        Column("BEST VAL", [_best(r) for r in rows], least=10, most=20, optional=True),
        *(
            Column(
                header,
                [clean(hyper(r.hyperparameters.get(key))) for r in rows],
                most=10,
                optional=True,
            )
            for header, key in hyper_columns
        ),
        Column("COMMAND", [clean(short_command(r.command)) or "-" for r in rows]),
    ]
    lines = layout(columns, width, _RUNS_FIT, _RUNS_GROW)
    out = lines[:1]
    for row, line in zip(rows, lines[1:], strict=True):
        out.append(line)
        if row.problems:
            more = f" (and {len(row.problems) - 1} more)" if len(row.problems) > 1 else ""
            out.append(cut(f"  ! {clean(row.problems[0])}{more}", width))
    return out


#: How the runs table is fitted: the command and the metric cut first, then the verdict and
#: the job's name (to what still tells runs apart), then the least needed columns dropped.
_RUNS_FIT: tuple[Fit, ...] = (
    ("cut", "COMMAND", 16),
    ("cut", "BEST VAL", 14),
    ("drop", "OPTIMIZER", 0),
    ("drop", "BATCH", 0),
    ("cut", "VERDICT", 24),
    ("cut", "JOB", 20),
    ("drop", "COMMAND", 0),
    ("cut", "VERDICT", 16),
    ("cut", "BEST VAL", 10),
    ("cut", "JOB", 14),
    ("drop", "BEST VAL", 0),
    ("drop", "LR", 0),
    ("drop", "TIME", 0),
    ("drop", "STEPS", 0),
)
#: Which columns get back, in order, what a drop freed.
_RUNS_GROW = ("VERDICT", "JOB", "BEST VAL", "COMMAND")


def short_command(command: str) -> str:
    """The command with each path shortened to its file name (the whole one is in
    ``--json``): ``python train.py --lr 0.1``."""
    try:
        words = shlex.split(command)
    except ValueError:
        return command
    return shlex.join(
        w.rsplit("/", 1)[-1] if "/" in w and not w.startswith("-") else w for w in words
    )


def _best(row: RunRow) -> str:
    best = row.best
    if best is None:
        return "-"
    name = best.name.rsplit("/", 1)[-1]
    for prefix in ("val_", "eval_"):
        name = name.removeprefix(prefix)
    if best.name == "vitals/loss":
        name = "loss"
    return clean(f"{name} {number(best.value, 3)}")


def group_table(groups: Sequence[Group], key: str, width: int = MAX_WIDTH) -> list[str]:
    """One line per group: its value, how many jobs, their verdicts, and the mean and sample
    standard deviation of their last losses; every line at most ``width`` columns."""
    columns = [
        Column(clean(key.upper()), [clean(hyper(g.value)) for g in groups], least=8),
        Column("JOBS", [str(g.runs) for g in groups], right=True),
        Column(
            "VERDICTS",
            [", ".join(f"{n} {v}" for v, n in sorted(g.verdicts.items())) for g in groups],
            least=12,
        ),
        Column("LOSS MEAN", [number(g.loss_mean) for g in groups], right=True),
        Column("LOSS SD", [number(g.loss_sd, 2) for g in groups], right=True),
    ]
    return layout(
        columns,
        width,
        (("cut", "VERDICTS", 12), ("cut", columns[0].header, 8), ("drop", "LOSS SD", 0)),
    )


__all__ = ["add_arguments", "group_table", "jobs", "runs_table", "terminal_width", "text_width"]
