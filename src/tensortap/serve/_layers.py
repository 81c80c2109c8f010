"""What the dashboard shows of a run's layers: layer health (gradient norms, the share of zero
activations) and embeddings of a layer's output over time.

Layer health comes from the series path alone (the gradients' saved ``l2`` norms) when it can
show everything that way; otherwise, like the embeddings, it reads a few steps of the run's
trial (:func:`~tensortap.serve._data.trial_of`, under ``run.trial_lock``).
"""

from __future__ import annotations

import math
import re
from typing import Any

from tensortap.exceptions import TensortapError
from tensortap.query._embeddings import embeddings_over_time
from tensortap.query._health import (
    HEAT_COLUMNS,
    heat_width,
    layer_names,
    norm_buckets,
    spread,
    step_health,
)
from tensortap.serve._catalog import Run
from tensortap.serve._data import json_number, reader_of, trial_of
from tensortap.serve._meta import saved_names
from tensortap.trials._index import natural_key

HEAT_STEPS = HEAT_COLUMNS  # columns of a layer-health heat map


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
    grads = layer_names(trial, "gradients", natural_key)
    acts = layer_names(trial, "relu_activations", natural_key)
    steps = spread(trial.steps(show_incomplete_steps=True), HEAT_STEPS)
    rows = run.cache.health
    for step in steps:
        if step in rows and step != steps[-1]:
            continue
        norms, shares = step_health(trial.step_block(step), grads, acts)
        rows[step] = ([json_number(norms.get(n)) for n in grads], [shares.get(n) for n in acts])
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
    width = heat_width(range(end), HEAT_STEPS)
    row_of = {name: i for i, name in enumerate(grads)}
    columns: dict[int, list[float]] = {}
    for tensor, by_bucket in norm_buckets(got, 0, width).items():
        for bucket, high in by_bucket.items():
            column = min(end - 1, (bucket + 1) * width - 1)  # the bucket's last step
            columns.setdefault(column, [math.nan] * len(grads))[row_of[tensor]] = high
    steps = sorted(columns)
    return {
        "steps": steps,
        "gradient_names": grads,
        "gradient_norms": [[json_number(columns[s][i]) for s in steps] for i in range(len(grads))],
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
    from tensortap.viz._embeddings import plot_embeddings

    outline = trial_of(run, records=False)  # names and modes: no row per saved value read
    names = sorted(outline.tensor_names(), key=natural_key)
    modes = [m.name for m in outline.modes()]
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
    trial = trial_of(run)  # its saved values: the trial read whole
    steps = trial.tensor(tensor).steps(mode=chosen) if trial.has_tensor(tensor) else []
    steps = spread(steps, EMBEDDING_FRAMES)
    try:
        frames = embeddings_over_time(trial, tensor, labels, mode=chosen, steps=steps)
        out["figure"] = plot_embeddings(frames, title=tensor)
        out["steps"] = [f.step for f in frames]
    except TensortapError as exc:
        out["note"] = str(exc)
    return out


__all__ = ["EMBEDDING_FRAMES", "HEAT_STEPS", "embeddings", "health"]
