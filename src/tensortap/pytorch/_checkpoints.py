"""Where a rollback's checkpoints go: the user's own save and load functions, or
``torch.distributed.checkpoint`` for a model's and an optimizer's state (see
:mod:`tensortap.pytorch._rollback`).

A checkpoint of step ``s`` holds the state *before* step ``s`` trains (after steps 0 to s-1),
with ``extra``: a small JSON-able dict the rollback keeps beside it (where the batch stream was).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

from tensortap.exceptions import InvalidConfigError


@runtime_checkable
class Checkpoints(Protocol):
    """What :class:`~tensortap.pytorch.Rollback` saves and restores through."""

    def save(self, step: int, extra: dict[str, Any]) -> None:
        """Save the training state as the checkpoint of ``step`` (every rank calls it)."""

    def load(self, step: int) -> dict[str, Any]:
        """Restore the checkpoint of ``step``; returns the ``extra`` saved with it."""

    def steps(self) -> list[int]:
        """The steps that have a checkpoint, oldest first."""

    def forget(self, step: int) -> None:
        """Drop the checkpoint of ``step`` from :meth:`steps` (it belongs to an abandoned
        branch); its files may stay."""


class FunctionCheckpoints:
    """Checkpoints through your own functions: ``save(step)`` writes the state (model,
    optimizer, scheduler, ...) and ``load(step)`` restores it in place. The ``extra`` of each
    checkpoint is kept in memory (add ``batches.state_dict()`` to your own checkpoint to resume
    the batch stream after a restart of the process)."""

    def __init__(self, save: Callable[[int], object], load: Callable[[int], object]) -> None:
        if not callable(save) or not callable(load):
            raise InvalidConfigError(
                "FunctionCheckpoints needs save(step) and load(step) functions, got "
                f"save={save!r}, load={load!r}"
            )
        self._save, self._load = save, load
        self._extras: dict[int, dict[str, Any]] = {}

    def save(self, step: int, extra: dict[str, Any]) -> None:
        self._save(step)
        self._extras[step] = dict(extra)

    def load(self, step: int) -> dict[str, Any]:
        self._load(step)
        return dict(self._extras.get(step, {}))

    def steps(self) -> list[int]:
        return sorted(self._extras)

    def forget(self, step: int) -> None:
        self._extras.pop(step, None)


class DistributedCheckpoints:
    """The model's and the optimizer's state dicts through ``torch.distributed.checkpoint``
    (``get_state_dict``/``set_state_dict``, so DDP and FSDP2 models save and load sharded),
    one directory per step under ``directory`` (``step-<s>``), with the ``extra`` as
    ``rollback.json`` beside (written by rank 0). Works in one process without a process
    group too."""

    def __init__(self, directory: str | os.PathLike[str], model: Any, optimizer: Any) -> None:
        self.directory = os.fspath(directory)
        self.model, self.optimizer = model, optimizer
        self._steps: set[int] = set()

    def path(self, step: int) -> str:
        """The directory of the checkpoint of ``step``."""
        return os.path.join(self.directory, f"step-{step}")

    def save(self, step: int, extra: dict[str, Any]) -> None:
        import torch.distributed as dist
        from torch.distributed.checkpoint.state_dict import get_state_dict
        from torch.distributed.checkpoint.state_dict_saver import save

        model_state, optim_state = get_state_dict(self.model, self.optimizer)
        path = self.path(step)
        save({"model": model_state, "optim": optim_state}, checkpoint_id=path)
        if not dist.is_initialized() or dist.get_rank() == 0:
            tmp = os.path.join(path, "rollback.json.tmp")
            with open(tmp, "w", encoding="utf-8") as f:
                json.dump(extra, f)
            os.replace(tmp, os.path.join(path, "rollback.json"))
        if dist.is_initialized():
            dist.barrier()  # the extra is there before any rank may load it
        self._steps.add(step)

    def load(self, step: int) -> dict[str, Any]:
        from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
        from torch.distributed.checkpoint.state_dict_loader import load

        model_state, optim_state = get_state_dict(self.model, self.optimizer)
        path = self.path(step)
        # loaded in place into the tensors of these dicts, then handed back to the objects
        load({"model": model_state, "optim": optim_state}, checkpoint_id=path)
        set_state_dict(
            self.model, self.optimizer, model_state_dict=model_state, optim_state_dict=optim_state
        )
        with open(os.path.join(path, "rollback.json"), encoding="utf-8") as f:
            extra = json.load(f)
        return extra if isinstance(extra, dict) else {}

    def steps(self) -> list[int]:
        return sorted(self._steps)

    def forget(self, step: int) -> None:
        self._steps.discard(step)
