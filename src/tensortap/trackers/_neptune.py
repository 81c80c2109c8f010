"""Runs of Neptune's exporter (``neptune-exporter export``): Parquet files, one directory per
project, each run in ``<run id>_part_<n>.parquet`` parts, one row per value:
``project_id``, ``run_id``, ``attribute_path``, ``attribute_type`` (``float_series``,
``float``, ``int``, ``string``, ``bool``, ...), ``step`` (decimal), ``timestamp``, and the
value in ``float_value``, ``int_value``, ``string_value`` or ``bool_value``. Float series are
the tags; ``float``/``int``/``string``/``bool`` attributes the parameters (``sys/`` aside).
Read with pyarrow, in batches, the columns named only."""

from __future__ import annotations

import os
from decimal import Decimal
from pathlib import Path
from typing import Any

from tensortap.exceptions import InvalidConfigError
from tensortap.trackers._scalars import (
    MAX_FILE_BYTES,
    MAX_PARAMS,
    MAX_RUNS,
    Collector,
    ScalarRun,
)

_NEEDED = ("project_id", "run_id", "attribute_path", "attribute_type", "step")
_VALUES = ("float_value", "int_value", "string_value", "bool_value", "timestamp")
_PARAM_TYPES = {"float": "float_value", "int": "int_value", "string": "string_value"}
_PARAM_TYPES["bool"] = "bool_value"


def parquet_files(path: Path) -> list[Path]:
    if path.is_file():
        return [path] if path.suffix == ".parquet" else []
    if not path.is_dir():
        return []
    found: list[Path] = []
    for dirpath, dirnames, files in os.walk(path):
        dirnames.sort()
        found += [Path(dirpath) / f for f in sorted(files) if f.endswith(".parquet")]
        if len(found) > MAX_RUNS * 10:
            break
    return found


def read_export(source: str | os.PathLike[str]) -> list[ScalarRun]:
    """The runs of the Parquet files at ``source`` (a file, or a directory of them)."""
    import pyarrow.parquet as pq

    files = parquet_files(Path(source))
    if not files:
        raise InvalidConfigError(f"{source} holds no Parquet file of Neptune's exporter")
    runs: dict[tuple[str, str], tuple[ScalarRun, Collector]] = {}
    problems: list[str] = []
    for path in files:
        try:
            if path.is_symlink() or path.stat().st_size > MAX_FILE_BYTES:
                raise InvalidConfigError(
                    f"a symbolic link or larger than {MAX_FILE_BYTES} bytes; not read"
                )
            parquet = pq.ParquetFile(path)
            names = set(parquet.schema_arrow.names)
            missing = [c for c in _NEEDED if c not in names]
            if missing:
                raise InvalidConfigError(
                    f"no column {', '.join(missing)}: not a file of Neptune's exporter "
                    f"(its columns: {', '.join(sorted(names)[:12])})"
                )
            columns = [*_NEEDED, *(c for c in _VALUES if c in names)]
            for batch in parquet.iter_batches(batch_size=65536, columns=columns):
                _rows(batch.to_pydict(), runs, str(Path(source)))
        except Exception as exc:  # one bad file is said, never hides the others
            problems.append(f"{path}: not read ({exc})")
    out = [collector.finish() for _, collector in runs.values()]
    if not out:
        raise InvalidConfigError(
            f"no run could be read from {source}: {'; '.join(problems[:5]) or 'no rows'}"
        )
    if problems:
        out[0].problems += problems
    if len({project for project, _ in runs}) > 1:
        for (project, _), (run, _) in runs.items():
            run.name = f"{project}/{run.name}"
    return out


def _rows(
    columns: dict[str, list[Any]],
    runs: dict[tuple[str, str], tuple[ScalarRun, Collector]],
    source: str,
) -> None:
    none: list[Any] = [None] * len(columns["attribute_path"])
    floats, stamps = columns.get("float_value", none), columns.get("timestamp", none)
    strings = columns.get("string_value", none)
    for i, path in enumerate(columns["attribute_path"]):
        project, run_id = str(columns["project_id"][i]), str(columns["run_id"][i])
        key = (project, run_id)
        if key not in runs:
            if len(runs) >= MAX_RUNS:
                continue
            run = ScalarRun(run_id, source, "neptune")
            run.tags["neptune/project"] = project
            runs[key] = (run, Collector(run))
        run, collector = runs[key]
        kind = columns["attribute_type"][i]
        if not isinstance(path, str):
            continue
        if kind == "float_series":
            step = columns["step"][i]
            if isinstance(step, Decimal):
                step = float(step)
            stamp = stamps[i]
            wall = stamp.timestamp() if hasattr(stamp, "timestamp") else None
            collector.add(path, step, floats[i], wall)
        elif kind in _PARAM_TYPES and not path.startswith("sys/"):
            if len(run.params) < MAX_PARAMS:
                value = columns.get(_PARAM_TYPES[kind], none)[i]
                if isinstance(value, str):
                    value = value[:8192]
                run.params[path] = value
        elif path == "sys/name":
            name = strings[i]
            if isinstance(name, str):
                run.tags["sys/name"] = name[:200]
