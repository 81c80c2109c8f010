"""What the dashboard shows of a run's layers: layer health (gradient norms, the share of zero
activations) and embeddings of a layer's output over time.

Layer health comes from the series path alone (the gradients' saved ``l2`` norms) when it can
show everything that way; otherwise, like the embeddings, it reads a few steps of the run's
trial (:func:`~tensortap.serve.data.trial_of`, under ``run.trial_lock``).
"""

from __future__ import annotations

import math
import re
from typing import Any

import numpy as np

from tensortap.exceptions import MissingCollectionFiles, TensortapError
from tensortap.serve.catalog import Run
from tensortap.serve.data import reader_of, trial_of
from tensortap.serve.meta import saved_names
from tensortap.trials.index import natural_key
from tensortap.trials.trial import Trial

HEAT_STEPS = 160  # columns of a layer-health heat map


def _names(trial: Trial, collection: str) -> list[str]:
    try:
        return sorted(trial.tensor_names(collection=collection), key=natural_key)
    except MissingCollectionFiles:
        return []


def health(run: Run) -> dict[str, Any]:
    """Layer health over up to :data:`HEAT_STEPS` steps spread over the run (the newest
    always among them): the L2 norm of every gradient (exact zeros kept: a dead layer) and
    the share of exact zeros of every ReLU activation saved in full. From the series path
    alone (no trial index opened: a huge run's index is gigabytes) when no activation was
    saved and every gradient's norm was (then each column is a bucket of steps, its norm the
    bucket's largest)."""
    quick = _health_from_series(run)
    if quick is not None:
        return quick
    trial = trial_of(run)
    grads, acts = _names(trial, "gradients"), _names(trial, "relu_activations")
    steps = trial.steps(show_incomplete_steps=True)
    if len(steps) > HEAT_STEPS:
        picks = np.unique(np.linspace(0, len(steps) - 1, HEAT_STEPS).round().astype(int))
        steps = [steps[i] for i in picks]
    rows = run.cache.health
    for step in steps:
        if step in rows and step != steps[-1]:
            continue
        block = trial.step_block(step)
        present = [n for n in grads if n in block]
        norms = (
            dict(zip(present, block.reduce(present, "l2").tolist(), strict=True)) if present else {}
        )
        raw = [n for n in acts if block.has_raw(n)]
        shares: dict[str, float] = {}
        if raw:
            counted = block.count_where(raw, lambda x: x == 0) / np.maximum(block.sizes(raw), 1)
            shares = dict(zip(raw, counted.tolist(), strict=True))
        rows[step] = ([_number(norms.get(n)) for n in grads], [shares.get(n) for n in acts])
    steps = [s for s in steps if any(v is not None for v in (*rows[s][0], *rows[s][1]))]
    return {  # steps holding neither (an EVAL step, say) are left out: no blank columns
        "steps": steps,
        "gradient_names": grads,
        "gradient_norms": [[rows[s][0][i] for s in steps] for i in range(len(grads))],
        "activation_names": acts,
        "zero_share": [[rows[s][1][i] for s in steps] for i in range(len(acts))],
    }


def _health_from_series(run: Run) -> dict[str, Any] | None:
    """:func:`health` from the collections documents and the gradients' saved ``l2`` series;
    None when that cannot show it all (activations, or a gradient saved without its norm)."""
    with run.lock:
        reader = reader_of(run)
        saved = saved_names(reader.store, ("gradients", "relu_activations"))
        if saved is None or saved["relu_activations"]:
            return None
        grads = sorted(saved["gradients"], key=natural_key)
        empty = {"steps": [], "gradient_names": grads, "gradient_norms": [[] for _ in grads]}
        if not grads:
            return {**empty, "activation_names": [], "zero_share": []}
        with_norm = {k.tensor for k in reader.keys() if k.statistic == "l2"}  # noqa: SIM118
        if not set(grads) <= with_norm:
            return None
        end = reader.last_step + 1
        got = reader.buckets(grads, statistic="l2", start=0, end=end, count=HEAT_STEPS)
    width = max(1, -(-end // HEAT_STEPS))
    row_of = {name: i for i, name in enumerate(grads)}
    columns: dict[int, list[float]] = {}
    done: set[tuple[str, str]] = set()
    # a norm saved by several workers: the first worker's, as the trial's reads answer
    for key, part in sorted(got.groups(), key=lambda g: natural_key(g[0].worker)):
        if (key.tensor, key.mode.name) in done:
            continue
        done.add((key.tensor, key.mode.name))
        for first, high in zip(part["first_step"].tolist(), part["max"].tolist(), strict=True):
            column = min(end - 1, (first // width + 1) * width - 1)  # the bucket's last step
            row = columns.setdefault(column, [math.nan] * len(grads))
            old = row[row_of[key.tensor]]
            row[row_of[key.tensor]] = high if math.isnan(old) else max(old, high)
    steps = sorted(columns)
    return {
        "steps": steps,
        "gradient_names": grads,
        "gradient_norms": [[_number(columns[s][i]) for s in steps] for i in range(len(grads))],
        "activation_names": [],
        "zero_share": [],
    }


EMBEDDING_FRAMES = 20  # steps drawn, spread over the run
_FEATURES = re.compile(r"bottleneck|embed|hidden|feature|latent", re.IGNORECASE)
_LABELS = re.compile(r"label|target", re.IGNORECASE)


def embeddings(
    run: Run, tensor: str | None, labels: str | None, mode: str | None
) -> dict[str, Any]:
    """An animated 2-D embedding (PCA) of ``tensor``'s samples coloured by ``labels``, over up
    to :data:`EMBEDDING_FRAMES` steps of ``mode`` spread over the run. Without names, a
    bottleneck/embedding-like tensor and a label-like one are guessed; ``figure`` is None
    (with a ``note`` saying why) when there is nothing to draw."""
    from tensortap.viz.embeddings import embeddings_over_time, plot_embeddings

    trial = trial_of(run)
    names = sorted(trial.tensor_names(), key=natural_key)
    modes = [m.name for m in trial.modes()]
    chosen = mode or ("EVAL" if "EVAL" in modes else (modes[0] if modes else "TRAIN"))
    tensor = tensor or next((n for n in names if _FEATURES.search(n)), None)
    labels = labels or next((n for n in names if _LABELS.search(n) and n != tensor), None)
    out: dict[str, Any] = {
        "names": names,
        "modes": modes,
        "tensor": tensor,
        "labels": labels,
        "mode": chosen,
        "figure": None,
        "note": "",
    }
    if tensor is None or labels is None:
        out["note"] = "choose the tensor to embed and the tensor of its labels"
        return out
    steps = trial.tensor(tensor).steps(mode=chosen) if trial.has_tensor(tensor) else []
    if len(steps) > EMBEDDING_FRAMES:
        picks = np.unique(np.linspace(0, len(steps) - 1, EMBEDDING_FRAMES).round().astype(int))
        steps = [steps[i] for i in picks]
    try:
        frames = embeddings_over_time(trial, tensor, labels, mode=chosen, steps=steps)
        out["figure"] = plot_embeddings(frames, title=tensor)
        out["steps"] = [f.step for f in frames]
    except TensortapError as exc:
        out["note"] = str(exc)
    return out


def _number(value: float | None) -> float | str | None:
    """JSON has no NaN: a non-finite value travels as "nan", "inf" or "-inf"."""
    if value is None or math.isfinite(value):
        return value
    return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")


__all__ = ["EMBEDDING_FRAMES", "HEAT_STEPS", "embeddings", "health"]
