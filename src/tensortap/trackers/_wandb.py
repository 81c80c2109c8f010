"""Runs W&B wrote to disk, and a CSV export of a run's history.

A run directory (``wandb/run-<time>-<id>/``, or its ``files/``) holds
``wandb-history.jsonl`` (one JSON object per logged step: ``_step``, ``_timestamp``, and the
values logged), ``wandb-summary.json`` and ``config.yaml`` (``{key: {value: ...}}``, read with
``yaml.safe_load`` only). A source may be one run directory or a ``wandb/`` directory of them.
A CSV (``run.history().to_csv()`` or the UI's export) needs a ``_step`` or ``step`` column;
its other numeric columns are the tags (``__MIN``/``__MAX`` band columns left out), one run
per file, named by the file.
"""

from __future__ import annotations

import csv
import io
import os
from pathlib import Path

from tensortap.exceptions import InvalidConfigError, StorageError
from tensortap.jobs._documents import JobDocumentError, parse_json
from tensortap.storage._descriptors import read_regular
from tensortap.trackers._scalars import (
    MAX_FILE_BYTES,
    MAX_PARAMS,
    MAX_RUNS,
    Collector,
    ScalarRun,
)

HISTORY = "wandb-history.jsonl"
CONFIG = "config.yaml"
_STEP_COLUMNS = ("_step", "step", "Step")


def _files_dir(path: Path) -> Path | None:
    """Where a run directory keeps its files: ``files/`` or itself."""
    for place in (path / "files", path):
        if (place / HISTORY).is_file():
            return place
    return None


def is_run_source(path: Path) -> bool:
    if not path.is_dir():
        return False
    if _files_dir(path) is not None:
        return True
    return any(_files_dir(p) is not None for p in _children(path))


def _children(path: Path) -> list[Path]:
    try:
        return sorted(p for p in path.iterdir() if p.is_dir() and not p.is_symlink())[:MAX_RUNS]
    except OSError:
        return []


def read_runs(source: str | os.PathLike[str]) -> list[ScalarRun]:
    root = Path(source)
    dirs = [root] if _files_dir(root) is not None else _children(root)
    runs = [_read_run(d) for d in dirs if _files_dir(d) is not None]
    if not runs:
        raise InvalidConfigError(
            f"{source} holds no W&B run (a directory with {HISTORY}, or its files/); give "
            "a run directory or the wandb/ directory"
        )
    return runs


def _bytes(path: Path, inside: Path, limit: int) -> bytes:
    data = read_regular(path, inside, limit + 1)
    if len(data) > limit:
        raise StorageError(f"{path} holds more than {limit} bytes; not read")
    return data


def _read_run(run_dir: Path) -> ScalarRun:
    import yaml

    files = _files_dir(run_dir) or run_dir
    name = run_dir.name
    if name.startswith("run-") and name.count("-") >= 2:
        name = name.rsplit("-", 1)[-1]  # run-20240101_120000-<id>: the run's id
    run = ScalarRun(name, str(run_dir), "wandb")
    config_file = files / CONFIG
    if config_file.is_file():
        try:
            config = yaml.safe_load(_bytes(config_file, files, 1024 * 1024))
        except (yaml.YAMLError, StorageError, OSError, RecursionError) as exc:
            run.problems.append(f"{config_file}: not read ({exc})")
            config = None
        if isinstance(config, dict):
            for key, entry in list(config.items())[:MAX_PARAMS]:
                if not isinstance(key, str) or key.startswith("_"):
                    continue  # _wandb: W&B's own
                value = entry.get("value") if isinstance(entry, dict) else entry
                if isinstance(value, (str, int, float, bool)) or value is None:
                    run.params[key] = value
    collector = Collector(run)
    history = files / HISTORY
    try:
        data = _bytes(history, files, MAX_FILE_BYTES)
    except (StorageError, OSError) as exc:
        run.problems.append(f"{history}: not read ({exc})")
        return collector.finish()
    bad = 0
    for number, line in enumerate(data.splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = parse_json(line, f"{history}:{number}")
            if not isinstance(row, dict):
                raise JobDocumentError(f"{history}:{number} is not a JSON object")
        except JobDocumentError as exc:
            bad += 1
            if bad <= 3:
                run.problems.append(f"{exc} (the line was left out)")
            continue
        step = row.get("_step", number - 1)
        wall = row.get("_timestamp")
        for key, value in row.items():
            if not isinstance(key, str) or key.startswith("_") or isinstance(value, dict):
                continue  # W&B's own keys; media and histograms ({"_type": ...})
            collector.add(key, step, value, wall)
    if bad > 3:
        run.problems.append(f"{history}: {bad} lines in all were not JSON objects")
    return collector.finish()


def is_csv(path: Path) -> bool:
    return path.is_file() and path.suffix.lower() == ".csv"


def read_csv(source: str | os.PathLike[str]) -> list[ScalarRun]:
    path = Path(source)
    run = ScalarRun(path.stem, str(path), "wandb")
    data = _bytes(path, path.parent, MAX_FILE_BYTES)
    reader = csv.reader(io.StringIO(data.decode("utf-8", errors="replace")))
    header = next(reader, None)
    if not header:
        raise InvalidConfigError(f"{path} is empty; expected a CSV with a header row")
    step_column = next((header.index(c) for c in _STEP_COLUMNS if c in header), None)
    if step_column is None:
        raise InvalidConfigError(
            f"{path} has no step column (expected one of {', '.join(_STEP_COLUMNS)}; got "
            f"{', '.join(header[:10])}); export the run's history with its steps"
        )
    columns = [
        (i, name)
        for i, name in enumerate(header)
        if i != step_column
        and not name.startswith("_")
        and not name.endswith(("__MIN", "__MAX"))
        and name
    ]
    collector = Collector(run)
    for row in reader:
        if len(row) <= step_column:
            continue
        step = row[step_column]
        for i, name in columns:
            if i < len(row) and row[i].strip():
                collector.add(name, step, row[i])
    return [collector.finish()]
