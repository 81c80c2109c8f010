"""Runs other trackers recorded, imported as tensortap trials: a TensorBoard logdir, MLflow's
file store, W&B run directories or a CSV of a run's history, and the Parquet of Neptune's
exporter (``tensortap import SOURCE -o OUT``). Each run lands as a trial in its own
directory under ``OUT`` (the dashboard shows them beside tensortap's runs), its loss as
``vitals/loss`` so the rules of losses and the diagnosis judge it, its lineage and parameters
in the trial's configuration. See docs/visualisation.md, "Opening runs of other trackers".
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tensortap.exceptions import InvalidConfigError, TensortapError
from tensortap.trackers._follow import FOLLOW_SECS, FollowChanges, FollowedImport
from tensortap.trackers._scalars import (
    TRAIN_LOSS_TAGS,
    VALIDATION_LOSS_TAGS,
    Roles,
    ScalarRun,
    Series,
    is_evaluation_tag,
)
from tensortap.trackers._write import write_run


def _read_tensorboard(source: Path) -> list[ScalarRun]:
    from tensortap.trackers._tensorboard import read_logdir

    return read_logdir(source)


def _read_mlflow(source: Path) -> list[ScalarRun]:
    from tensortap.trackers._mlflow import read_store

    return read_store(source)


def _read_wandb(source: Path) -> list[ScalarRun]:
    from tensortap.trackers._wandb import is_csv, read_csv, read_runs

    return read_csv(source) if is_csv(source) else read_runs(source)


def _read_neptune(source: Path) -> list[ScalarRun]:
    from tensortap.trackers._neptune import read_export

    return read_export(source)


#: The formats, each with its reader (registered once; the CLI's choices are derived).
READERS: dict[str, Callable[[Path], list[ScalarRun]]] = {
    "tensorboard": _read_tensorboard,
    "mlflow": _read_mlflow,
    "wandb": _read_wandb,
    "neptune": _read_neptune,
}


def detect_format(source: str | os.PathLike[str]) -> str:
    """The format of ``source``, from what it holds (see :data:`READERS`)."""
    from tensortap.trackers import _mlflow, _neptune, _tensorboard, _wandb

    path = Path(source)
    if not path.exists():
        raise InvalidConfigError(f"{source} does not exist; give a logdir, a run or an export")
    if _wandb.is_csv(path) or _wandb.is_run_source(path):
        return "wandb"
    if _neptune.parquet_files(path) and (path.is_file() or not _tensorboard.is_logdir(path)):
        return "neptune"
    if _mlflow.is_store(path):
        return "mlflow"
    if _tensorboard.is_logdir(path):
        return "tensorboard"
    raise InvalidConfigError(
        f"{source} holds none of the formats tensortap imports: a TensorBoard logdir (event "
        "files), MLflow's mlruns/, a W&B run directory (wandb-history.jsonl) or CSV, or "
        "Neptune's exporter Parquet; name the format with --format"
    )


def read_runs(source: str | os.PathLike[str], format: str | None = None) -> list[ScalarRun]:
    """The runs at ``source`` with their scalars, read as ``format`` (detected when None)."""
    chosen = format or detect_format(source)
    reader = READERS.get(chosen)
    if reader is None:
        raise InvalidConfigError(f"unknown format {chosen!r}; expected one of {', '.join(READERS)}")
    return reader(Path(source))


def judge(run: ScalarRun, roles: Roles) -> dict[str, Any]:
    """The diagnosis of ``run`` (its trial written in memory first, judged by the recommended
    rules of imported runs), as its lineage keeps it: ``verdict``, ``cause`` (the root
    cause's title), ``headline`` and ``warnings`` (how many)."""
    from tensortap.diagnosis import diagnose
    from tensortap.storage._memory import MemoryStore
    from tensortap.trials._trial import create_trial

    store = MemoryStore(f"import-{id(run)}")
    write_run(run, store, roles)
    with create_trial(store) as trial:
        found = diagnose(trial)
    return {
        "verdict": found.verdict,
        "cause": None if found.cause is None else found.cause.title,
        "headline": found.headline(),
        "warnings": len(found.warnings),
    }


@dataclass
class ImportedRun:
    """One run imported: its name, where its trial is, and its lineage (None: it failed, with
    ``error`` saying why); ``digest``: what was read of it (:meth:`ScalarRun.digest`)."""

    name: str
    trial: str
    lineage: dict[str, Any] | None = None
    error: str | None = None
    digest: str | None = None


@dataclass
class ImportResult:
    """What one import did."""

    source: str
    format: str
    runs: list[ImportedRun] = field(default_factory=list)

    @property
    def failed(self) -> list[ImportedRun]:
        return [r for r in self.runs if r.error is not None]


_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")


def trial_dir_name(run_name: str, taken: set[str]) -> str:
    """A directory name for a run's trial: its name's safe characters (``/`` as ``-``),
    unique among ``taken``."""
    base = _UNSAFE.sub("_", run_name.replace("/", "-")).strip("._-")[:100] or "run"
    if base[0] in "._-":
        base = f"run{base}"
    name, n = base, 1
    while name in taken:
        n += 1
        name = f"{base}-{n}"
    taken.add(name)
    return name


def import_runs(
    source: str | os.PathLike[str],
    out: str | os.PathLike[str],
    format: str | None = None,
    loss: str | None = None,
    validation_loss: str | None = None,
) -> ImportResult:
    """Import every run at ``source`` into a trial under ``out`` (one directory per run);
    ``loss``/``validation_loss`` name the tags of the losses where the documented names do
    not (see :mod:`tensortap.trackers._scalars`). A run that cannot be written is listed with
    its error; the others are still imported. Existing trials under ``out`` are never
    written into: a run whose directory exists is refused."""
    chosen = format or detect_format(source)
    runs = read_runs(source, chosen)
    root = Path(out)
    root.mkdir(parents=True, exist_ok=True)
    taken = {p.name for p in root.iterdir()}
    roles = Roles(loss, validation_loss)
    result = ImportResult(str(source), chosen)
    for run in runs:
        target = root / trial_dir_name(run.name, taken)
        try:
            lineage = write_run(run, target, roles, judge(run, roles))
            result.runs.append(ImportedRun(run.name, str(target), lineage, digest=run.digest()))
        except TensortapError as exc:
            result.runs.append(ImportedRun(run.name, str(target), error=str(exc)))
    return result


__all__ = [
    "FOLLOW_SECS",
    "READERS",
    "TRAIN_LOSS_TAGS",
    "VALIDATION_LOSS_TAGS",
    "FollowChanges",
    "FollowedImport",
    "ImportResult",
    "ImportedRun",
    "Roles",
    "ScalarRun",
    "Series",
    "detect_format",
    "import_runs",
    "is_evaluation_tag",
    "judge",
    "read_runs",
    "trial_dir_name",
]
