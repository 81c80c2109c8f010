"""Build a small, real trial step by step from NumPy values, without a training framework.

The trial is written by the real writer in the real format, so a rule tested on it reads
exactly what it would read from training::

    builder = TrialBuilder(tmp_path)
    for step in range(20):
        builder.step({"gradient/fc1.weight": grads[step], "loss": losses[step]})
    trial = builder.close()
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any

from tensortap.core._collections import CollectionKeys
from tensortap.core._reduction_config import ReductionConfig
from tensortap.core._save_config import SaveConfig
from tensortap.hook._hook import Hook
from tensortap.storage._base import Store
from tensortap.trials._trial import Trial, create_trial
from tensortap.writer._options import WriterOptions

_BY_PATTERN: tuple[tuple[str, str], ...] = (
    ("gradient", CollectionKeys.GRADIENTS),
    ("loss", CollectionKeys.LOSSES),
    ("label", "labels"),
    ("prediction", "predictions"),
    ("relu", "relu_activations"),
    ("tanh", "relu_activations"),
    ("sigmoid", "relu_activations"),
)


def infer_collections(name: str) -> list[str]:
    """The collections a name suggests: ``gradient/x`` is a gradient, ``x.weight`` a weight..."""
    lower = name.lower()
    found = [coll for pattern, coll in _BY_PATTERN if pattern in lower]
    if not found:
        if lower.endswith(("weight", "weights")):
            found.append(CollectionKeys.WEIGHTS)
        elif lower.endswith(("bias", "biases")):
            found.append(CollectionKeys.BIASES)
    if "_input_" in lower:
        found.append(CollectionKeys.INPUTS)
    if "_output_" in lower:
        found.append(CollectionKeys.OUTPUTS)
    return found or [CollectionKeys.DEFAULT]


class TrialBuilder:
    """Writes a trial at ``path``: each :meth:`step` call is one saved step."""

    def __init__(
        self,
        path: str | os.PathLike[str] | Store,
        reduction_config: ReductionConfig | None = None,
        worker: str | int | None = None,
        num_workers: int = 1,
        writer_options: WriterOptions | None = None,
    ) -> None:
        self.hook = Hook(
            path,
            save_config=SaveConfig(save_interval=1),
            reduction_config=reduction_config,
            include_collections=[],
            worker=worker,
            num_workers=num_workers,
            writer_options=writer_options,
        )
        self.path = self.hook.out_dir
        self._included: set[str] = set()

    def step(
        self,
        tensors: Mapping[str, Any],
        mode: Any = "train",
        collections: Mapping[str, str | Iterable[str]] | None = None,
    ) -> int:
        """Save ``tensors`` (name -> value) as the next step of ``mode``; returns its global step.

        Collections come from ``collections`` (name -> collection names) or are inferred from
        the names (see :func:`infer_collections`).
        """
        self.hook.set_mode(mode)
        for name, value in tensors.items():
            given = (collections or {}).get(name)
            names = [given] if isinstance(given, str) else list(given or infer_collections(name))
            for coll in names:
                if coll not in self._included:
                    self.hook.include_collection(coll)
                    self._included.add(coll)
            self.hook.save_tensor(name, value, names)
        step = self.hook.step
        self.hook.next_step()
        return step

    def skip(self, count: int = 1, mode: Any = "train") -> None:
        """Advance ``count`` steps of ``mode`` without saving anything."""
        self.hook.set_mode(mode)
        for _ in range(count):
            self.hook.next_step()

    def flush(self) -> None:
        """Publish every step so far (the trial stays open, as during training)."""
        self.hook.flush()

    def close(self) -> Trial:
        """End the trial (as training's end does) and open it for reading."""
        self.hook.close()
        return create_trial(self.path)

    def trial(self) -> Trial:
        """Open the trial for reading while it is still being written."""
        self.flush()
        return create_trial(self.path)
