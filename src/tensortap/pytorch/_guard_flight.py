"""The guard's flight recorder: raw copies of the last steps' parameters and gradients, kept
within a byte budget, and the trial a trip writes.

The copies go into host buffers allocated once (pinned, and copied without blocking, from a
CUDA device), one slot per step in a ring. The ring has ``MAX_LAG + 1`` slots more than the
steps it keeps, because the decision that a step tripped is read a few steps later on the
guard's reader thread; the training thread never runs more than ``MAX_LAG`` decisions ahead of
it, so a slot is never written while the reader may still need it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

log = logging.getLogger(__name__)

MAX_LAG = 4  #: decisions the training thread may run ahead of the guard's reader thread


@dataclass
class FlightStep:
    """One remembered step: its statistics and, within the budget, its raw tensors."""

    step: int
    scalars: dict[str, float]
    tensors: dict[str, torch.Tensor] = field(default_factory=dict)


class FlightRing:
    """The last ``keep`` steps' chosen parameters and gradients, in host buffers of at most
    ``budget_bytes`` in all; fewer steps (or none) when they do not fit."""

    def __init__(
        self,
        names: dict[int, str],
        keep_name: Callable[[str], Any],
        keep: int,
        budget_bytes: int,
    ) -> None:
        self._names, self._keep_name = names, keep_name
        self.keep, self.budget_bytes = keep, budget_bytes
        self.steps_kept = -1  #: steps of raw tensors kept (-1: not sized yet)
        self.step_bytes = 0  #: bytes of one step's copies
        self._slots: list[dict[str, torch.Tensor]] = []
        self._slot_step: list[int] = []
        self.nbytes = 0  #: bytes of host memory the ring holds

    def _size(self, chosen: list[tuple[str, torch.Tensor]]) -> None:
        self.step_bytes = sum(
            p.numel() * p.element_size() * (2 if p.requires_grad else 1) for _, p in chosen
        )
        fits = self.budget_bytes // self.step_bytes - MAX_LAG - 1 if self.step_bytes else 0
        self.steps_kept = max(0, min(self.keep, fits))
        if self.steps_kept < self.keep:
            log.warning(
                "tensortap guard: the flight recorder keeps raw tensors of %d of the last %d "
                "steps (%d bytes a step, flight_budget_bytes=%d); the others have their "
                "statistics only",
                self.steps_kept,
                self.keep,
                self.step_bytes,
                self.budget_bytes,
            )
        count = self.steps_kept + MAX_LAG + 1 if self.steps_kept else 0
        self._slots = [{} for _ in range(count)]
        self._slot_step = [-1] * count

    def remember(self, step: int, params: list[torch.Tensor]) -> None:
        """On the training thread, before the update: copy this step's tensors into its slot."""
        chosen = [
            (name, p)
            for p in params
            if (name := self._names.get(id(p))) is not None and self._keep_name(name)
        ]
        if self.steps_kept < 0:
            self._size(chosen)
        if not self._slots:
            return
        index = step % len(self._slots)
        slot = self._slots[index]
        self._slot_step[index] = -1
        for name, p in chosen:
            for key, tensor in ((name, p), (f"gradient/{name}", p.grad)):
                if tensor is None:
                    slot.pop(key, None)
                    continue
                buffer = slot.get(key)
                if buffer is None or (buffer.shape, buffer.dtype) != (tensor.shape, tensor.dtype):
                    if buffer is not None:
                        self.nbytes -= buffer.numel() * buffer.element_size()
                    buffer = slot[key] = torch.empty(
                        tensor.shape, dtype=tensor.dtype, pin_memory=tensor.is_cuda
                    )
                    self.nbytes += buffer.numel() * buffer.element_size()
                buffer.copy_(tensor.detach(), non_blocking=tensor.is_cuda)
        self._slot_step[index] = step

    def take(self, step: int, tripped: int) -> dict[str, torch.Tensor]:
        """On the reader thread, once the decision of step ``tripped`` is read: copies of
        ``step``'s tensors, or nothing when they were not kept (older than the last
        ``steps_kept`` steps before ``tripped``)."""
        if not self._slots or step <= tripped - self.steps_kept:
            return {}
        index = step % len(self._slots)
        if self._slot_step[index] != step:
            return {}
        return {key: t.clone() for key, t in self._slots[index].items()}


def write_recording(where: str, steps: list[FlightStep], rank: int, ranks: int) -> int:
    """The remembered steps as a trial of their own at ``where``: one trial step per training
    step (oldest first; the scalar ``training_step`` says which), under ``torch.distributed``
    one worker per rank. Returns the bytes written; raises when the writer failed."""
    from tensortap.core._save_config import SaveConfig
    from tensortap.hook._hook import Hook

    hook = Hook(
        where,
        save_config=SaveConfig(save_interval=1),
        include_regex=".*",
        worker=rank,
        num_workers=ranks,
    )
    for remembered in steps:
        hook.save_scalar("training_step", float(remembered.step))
        for name, value in remembered.scalars.items():
            if name == "loss":
                hook.save_tensor("loss", np.asarray(value, np.float32), collections="losses")
            else:
                hook.save_scalar(name, value)
        for name, tensor in remembered.tensors.items():
            kind = "gradients" if name.startswith("gradient/") else "weights"
            if tensor.dtype == torch.bfloat16:  # NumPy has no bfloat16
                tensor = tensor.float()
            hook.save_tensor(name, tensor.numpy(), collections=kind)
        hook.next_step()
    status = hook.close()
    if not status.healthy:
        raise RuntimeError(f"its writer reported {status.writer.last_error}")
    return int(status.writer.bytes_written)


__all__ = ["MAX_LAG", "FlightRing", "FlightStep", "write_recording"]
