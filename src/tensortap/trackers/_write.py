"""A run another tracker recorded, written as a tensortap trial: the loss as ``vitals/loss``
(TRAIN steps; the validation loss at EVAL steps), every other tag under its own name in the
``metrics`` collection, and the lineage in the trial's configuration (``trial.config()``).

**Steps.** A tensortap trial numbers its steps once across modes (a global step is TRAIN or
EVAL, never both), where trackers log a validation value at the training step it followed. So
each (step, mode) point is given the global step ``max(its step, the previous global step +
1)``, TRAIN before EVAL at one step: a run logged at steps 0, 10, 20 keeps them, and an
evaluation at step 100 lands at 101 (its mode step stays 100, the tracker's own).
"""

from __future__ import annotations

import math
import os
from typing import Any

import numpy as np

from tensortap.core._collections import CollectionKeys, CollectionManager
from tensortap.core._modes import ModeKeys
from tensortap.core._records import F8_NAME, Record, RecordKind, StepBatch
from tensortap.core._vitals import VITALS, Vital
from tensortap.exceptions import StorageError
from tensortap.storage import Store, open_store
from tensortap.trackers._scalars import MAX_PARAMS, Roles, ScalarRun, Series, is_evaluation_tag
from tensortap.writer import TrialWriter

#: Hyperparameters under the names the runs table looks for, from a tracker's usual spellings.
_KNOWN_PARAMS = {
    "learning_rate": ("learning_rate", "lr", "learning-rate", "optimizer/lr", "train/lr"),
    "batch_size": ("batch_size", "bs", "batch-size", "per_device_train_batch_size"),
    "seed": ("seed", "random_seed"),
}


def write_run(
    run: ScalarRun,
    out: str | os.PathLike[str] | Store,
    roles: Roles,
    diagnosis: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Write ``run`` as a trial at ``out``; returns the lineage recorded in its configuration
    (``imported``: source, format, run, which tags were the losses, problems, and
    ``diagnosis`` when given: the verdict at import, which the runs table shows). Raises
    StorageError when the trial could not be written in full."""
    loss, validation, problems = roles.pick(run)
    named: list[tuple[Series, str, ModeKeys]] = []
    for series in run.series:
        if series is loss:
            named.append((series, Vital.LOSS, ModeKeys.TRAIN))
        elif series is validation:
            named.append((series, Vital.LOSS, ModeKeys.EVAL))
        else:
            mode = series.mode or (ModeKeys.EVAL if is_evaluation_tag(series.tag) else None)
            named.append((series, _metric_name(series), mode or ModeKeys.TRAIN))
    lineage: dict[str, Any] = {
        "source": run.source,
        "format": run.format,
        "run": run.name,
        "loss": None if loss is None else loss.tag,
        "validation_loss": None if validation is None else validation.tag,
        "tags": len(run.series),
        "values": int(sum(len(s.values) for s in run.series)),
    }
    problems = [*run.problems, *problems]
    if loss is None and roles.loss is None:
        problems.append(
            f"{run.name}: no tag is a training loss by its name (its tags: "
            f"{', '.join(run.tag_names()[:20]) or 'none'}); name it with --loss TAG"
        )
    histograms = run.histograms_left_out()
    if histograms is not None:
        lineage["histograms_not_imported"] = {
            "tags": len(run.histograms),
            "values": int(sum(run.histograms.values())),
            "said": histograms,
        }
    if problems:
        lineage["problems"] = problems[:100]
    if diagnosis is not None:
        lineage["diagnosis"] = diagnosis
    config: dict[str, Any] = {"imported": lineage}
    if run.params:
        config["hparams"] = _finite(run.params)
        for key, spellings in _KNOWN_PARAMS.items():
            found = next((run.params[s] for s in spellings if s in run.params), None)
            if isinstance(found, (int, float)) and not isinstance(found, bool):
                config[key] = found
    if run.hparam_metrics:
        config["hparam_metrics"] = _finite(run.hparam_metrics)
    if run.tags:
        config["tracker_tags"] = dict(list(run.tags.items())[:MAX_PARAMS])
    batches = _batches(named)
    collections = _collections(named)
    writer = TrialWriter(open_store(out), "worker_0", framework=run.format)
    try:
        writer.note_config(config)
        for i, batch in enumerate(batches):
            if i == 0:
                batch.collections = collections
            writer.submit(batch)
    finally:
        status = writer.close({"converted_from": run.format, "ended": True})
    if status.errors or status.steps_lost or status.steps_dropped:
        raise StorageError(
            f"the trial of {run.name} could not be written in full at {out} ({status.errors} "
            f"errors, {status.steps_lost} steps lost; last: {status.last_error}); free some "
            "space or give another output directory"
        )
    return lineage


def _finite(values: dict[str, Any]) -> dict[str, Any]:
    """At most :data:`MAX_PARAMS` values, a NaN or an infinity as its text (``"nan"``): the
    configuration is strict JSON, and a parameter written as NaN must not fail the import."""
    return {
        key: str(value) if isinstance(value, float) and not math.isfinite(value) else value
        for key, value in list(values.items())[:MAX_PARAMS]
    }


def _metric_name(series: Series) -> str:
    """A tag's name as a tensor name: itself, but never one of tensortap's own (``vitals/``)."""
    tag = series.tag
    return f"imported/{tag}" if tag.startswith(("vitals/", "training_loop/")) else tag


def _batches(named: list[tuple[Series, str, ModeKeys]]) -> list[StepBatch]:
    """One StepBatch per (step, mode), in step order (TRAIN before EVAL at one step), with
    global steps as the module docstring says. The last value logged at a step wins."""
    points: dict[tuple[int, int], dict[str, tuple[float, float]]] = {}
    for series, name, mode in named:
        for step, value, wall in zip(
            series.steps.tolist(), series.values.tolist(), series.walls.tolist(), strict=True
        ):
            points.setdefault((int(step), int(mode)), {})[name] = (value, wall)
    batches: list[StepBatch] = []
    last_global = -1
    last_wall = 0.0
    for (step, mode_value), values in sorted(points.items()):
        global_step = max(step, last_global + 1)
        last_global = global_step
        walls = [w for _, w in values.values() if math.isfinite(w)]
        wall = max(walls) if walls else last_wall
        last_wall = wall
        records = [
            Record(name, RecordKind.TENSOR, F8_NAME, (), np.array(value, dtype=np.float64))
            for name, (value, _) in sorted(values.items())
        ]
        batches.append(StepBatch(global_step, ModeKeys(mode_value), step, wall, records))
    return batches


def _collections(named: list[tuple[Series, str, ModeKeys]]) -> dict[str, Any]:
    manager = CollectionManager()
    metrics = sorted({name for _, name, _ in named if name != Vital.LOSS})
    if any(name == Vital.LOSS for _, name, _ in named):
        manager.get(VITALS).add(Vital.LOSS)
        manager.get(CollectionKeys.LOSSES).add(Vital.LOSS)
    if metrics:
        manager.get(CollectionKeys.METRICS).add(metrics)
        manager.get(CollectionKeys.SCALARS).add(metrics)
    return manager.to_dict()
