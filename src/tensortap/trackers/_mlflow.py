"""Runs of MLflow's file store (``mlruns/``): ``<experiment id>/<run id>/`` holds
``meta.yaml``, ``metrics/<key>`` (one line per value: ``timestamp value step``, the timestamp in
milliseconds; a key with ``/`` is a subdirectory), ``params/<key>`` and ``tags/<key>`` (a file
holding the value). The source may be the store, one experiment's directory or one run's.
``meta.yaml`` is read with ``yaml.safe_load`` only."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from tensortap.exceptions import InvalidConfigError, StorageError
from tensortap.storage._descriptors import read_regular
from tensortap.trackers._scalars import (
    MAX_FILE_BYTES,
    MAX_PARAMS,
    MAX_RUNS,
    MAX_TAGS,
    Collector,
    ScalarRun,
    add_param,
    as_number,
)

_SMALL = 1024 * 1024  # meta.yaml, a param or a tag


def is_run_dir(path: Path) -> bool:
    return (path / "meta.yaml").is_file() and (path / "metrics").is_dir()


def is_store(path: Path) -> bool:
    """A run, an experiment (runs below) or a store (experiments below)."""
    if not path.is_dir():
        return False
    if is_run_dir(path):
        return True
    for depth_one in _subdirs(path):
        if is_run_dir(depth_one) or any(is_run_dir(d) for d in _subdirs(depth_one)):
            return True
    return False


def _subdirs(path: Path) -> list[Path]:
    try:
        found = sorted(p for p in path.iterdir() if p.is_dir() and not p.is_symlink())
    except OSError:
        return []
    return found[:MAX_RUNS]


def read_store(source: str | os.PathLike[str]) -> list[ScalarRun]:
    """The runs under ``source`` (a store, an experiment or a run directory)."""
    root = Path(source)
    if is_run_dir(root):
        run_dirs = [root]
    else:
        run_dirs = [d for d in _subdirs(root) if is_run_dir(d)]
        for experiment in _subdirs(root):
            run_dirs += [d for d in _subdirs(experiment) if is_run_dir(d)]
    if not run_dirs:
        raise InvalidConfigError(
            f"{source} holds no MLflow run (a directory with meta.yaml and metrics/); give "
            "the mlruns directory, an experiment's or a run's"
        )
    return [_read_run(d, root) for d in run_dirs[:MAX_RUNS]]


def _text(path: Path, inside: Path, limit: int = _SMALL) -> str:
    data = read_regular(path, inside, limit + 1)
    if len(data) > limit:
        raise StorageError(f"{path} holds more than {limit} bytes; not read")
    return data.decode("utf-8", errors="replace")


def _files(top: Path) -> list[tuple[str, Path]]:
    """``(key, path)`` of the files under ``top`` (a key with ``/`` is a subdirectory)."""
    out: list[tuple[str, Path]] = []
    if not top.is_dir():
        return out
    for dirpath, dirnames, files in os.walk(top):
        dirnames.sort()
        for name in sorted(files):
            path = Path(dirpath) / name
            out.append((path.relative_to(top).as_posix(), path))
            if len(out) > MAX_TAGS:
                return out
    return out


def _read_run(run_dir: Path, root: Path) -> ScalarRun:
    import yaml

    run = ScalarRun(run_dir.name, str(run_dir), "mlflow")
    try:
        meta = yaml.safe_load(_text(run_dir / "meta.yaml", run_dir))
    except (yaml.YAMLError, StorageError, OSError, RecursionError) as exc:
        run.problems.append(f"{run_dir / 'meta.yaml'}: not read ({exc})")
        meta = None
    meta = meta if isinstance(meta, dict) else {}
    for key, path in _files(run_dir / "tags"):
        try:
            run.tags[key] = _text(path, run_dir)[:8192]
        except (StorageError, OSError) as exc:
            run.problems.append(f"{path}: not read ({exc})")
    params = _files(run_dir / "params")
    left_out = max(0, len(params) - MAX_PARAMS)
    for key, path in params[:MAX_PARAMS]:
        try:
            text = _text(path, run_dir)
        except (StorageError, OSError) as exc:
            run.problems.append(f"{path}: not read ({exc})")
            continue
        number = as_number(text)
        if not add_param(run, key, text if number is None else _int_if_whole(number, text)):
            left_out += 1
    if left_out:
        more = "+" if len(params) > MAX_TAGS else ""
        run.problems.append(
            f"{run_dir / 'params'}: {left_out}{more} parameters left out (more than "
            f"{MAX_PARAMS}, or a name empty, unprintable or longer than 1000 characters)"
        )
    name = run.tags.get("mlflow.runName") or meta.get("run_name")
    run_id = str(meta.get("run_id") or run_dir.name)
    run.name = f"{name}-{run_id[:8]}" if isinstance(name, str) and name else run_id
    collector = Collector(run)
    for key, path in _files(run_dir / "metrics"):
        try:
            text = _text(path, run_dir, MAX_FILE_BYTES)
        except (StorageError, OSError) as exc:
            run.problems.append(f"{path}: not read ({exc})")
            continue
        bad = 0
        for number, line in enumerate(text.splitlines(), 1):
            parts = line.split()
            if not parts:
                continue
            if len(parts) not in (2, 3):
                bad += 1
                if bad == 1:
                    run.problems.append(
                        f"{path}:{number}: expected 'timestamp value step', got {line[:80]!r}"
                    )
                continue
            stamp = as_number(parts[0])
            step = parts[2] if len(parts) == 3 else 0
            collector.add(key, step, parts[1], None if stamp is None else stamp / 1000.0)
    return collector.finish()


def _int_if_whole(number: float, text: str) -> Any:
    stripped = text.strip()
    return int(stripped) if stripped.lstrip("-").isdigit() and len(stripped) < 19 else number
