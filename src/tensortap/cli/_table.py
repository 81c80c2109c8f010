"""``tensortap export TRIAL... --parquet DIR`` and ``tensortap query "SQL" --data DIR``: saved
statistics as a Parquet dataset, and SQL over it (DuckDB)."""

from __future__ import annotations

import argparse
import csv
import json
import sys
from typing import Any


def add_parsers(sub: Any) -> None:
    export = sub.add_parser(
        "export",
        help="write the saved reductions and scalars of trials as Parquet (one run each); "
        "run again to append what they published since",
    )
    export.add_argument(
        "trials", nargs="+", help="trials (directories or s3:// URLs) or job directories"
    )
    export.add_argument(
        "-o",
        "--parquet",
        required=True,
        metavar="DIR",
        help="the dataset (a directory or s3:// URL)",
    )
    export.add_argument(
        "--run",
        action="append",
        dest="runs",
        metavar="NAME",
        help="the run name of each trial, in order (default: the trial's directory name)",
    )
    export.add_argument(
        "--wait",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="how long to wait for another export of the same run to finish before giving up "
        "(default 60; one exporter per run at a time)",
    )
    query = sub.add_parser(
        "query", help="run SQL over an exported dataset (DuckDB); the table is named stats"
    )
    query.add_argument(
        "sql",
        help="e.g. \"SELECT run, tensor, min(value) FROM stats WHERE collection='losses' "
        'GROUP BY run, tensor"',
    )
    query.add_argument("--data", required=True, metavar="DIR", help="the dataset to query")
    query.add_argument(
        "--run", action="append", dest="runs", metavar="NAME", help="only these runs (repeat)"
    )
    query.add_argument("--format", choices=["table", "csv", "json"], default="table")


def export(ns: argparse.Namespace) -> int:
    from tensortap.table import export_parquet

    for done in export_parquet(ns.trials, ns.parquet, ns.runs, wait=ns.wait):
        what = f"{done.rows} rows from {done.segments} new segments" if done.part else "nothing new"
        if done.pending:
            what += (
                f"; {done.pending} segments unreadable now, left pending (the next export "
                "tries them again)"
            )
        print(f"{done.run}: {what}")
    return 0


def query(ns: argparse.Namespace) -> int:
    import duckdb

    from tensortap.exceptions import InvalidConfigError
    from tensortap.table import query as run_query

    try:
        table = run_query(ns.sql, ns.data, ns.runs)
    except duckdb.Error as exc:  # the user's SQL: say why in one line
        raise InvalidConfigError(f"the query failed: {exc}") from None
    rows = table.to_pylist()
    names = table.column_names
    if ns.format == "json":
        for row in rows:
            print(json.dumps(row, default=str))
    elif ns.format == "csv":
        writer = csv.writer(sys.stdout)
        writer.writerow(names)
        writer.writerows([row[n] for n in names] for row in rows)
    else:
        _print_table(names, rows)
    return 0


def _print_table(names: list[str], rows: list[dict[str, Any]]) -> None:
    cells = [[_cell(row[n]) for n in names] for row in rows]
    widths = [max([len(n), *(len(c[i]) for c in cells)]) for i, n in enumerate(names)]
    print("  ".join(n.ljust(w) for n, w in zip(names, widths, strict=True)))
    for row in cells:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)))
    print(f"({len(rows)} rows)")


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    return "" if value is None else str(value)
