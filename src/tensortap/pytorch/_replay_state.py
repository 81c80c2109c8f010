"""What a replay saves and puts back, so that the model, the optimizer and every random number
generator are after it as they were before (see :mod:`tensortap.pytorch._replay`).

:class:`RngState` is the generators' state (the CPU's and the CUDA devices' always; Python's and
NumPy's when asked): taken at each step's start to replay it, and around the replay to put back.
:func:`model_put_back` keeps the model's gradients, buffers (BatchNorm's running statistics) and
train/eval flags across a replay, and refuses a replay that changed the weights.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from tensortap.exceptions import ReplayError


@dataclass
class RngState:
    cpu: torch.Tensor
    cuda: list[torch.Tensor] | None
    python: Any = None
    numpy: Any = None

    @classmethod
    def take(cls, python: bool, numpy: bool) -> RngState:
        cuda = None
        if torch.cuda.is_available() and torch.cuda.is_initialized():  # type: ignore[no-untyped-call]
            cuda = torch.cuda.get_rng_state_all()  # seeds and offsets, on the host
        return cls(
            torch.get_rng_state(),
            cuda,
            random.getstate() if python else None,
            np.random.get_state() if numpy else None,
        )

    def put(self) -> None:
        torch.set_rng_state(self.cpu)
        if self.cuda is not None:
            torch.cuda.set_rng_state_all(self.cuda)
        if self.python is not None:
            random.setstate(self.python)
        if self.numpy is not None:
            np.random.set_state(self.numpy)


@contextmanager
def model_put_back(model: nn.Module, rng: RngState) -> Iterator[None]:
    """Within: the model's gradients start empty. After (raised or not): its gradients, buffers
    and train/eval flags as before, and ``rng`` put back. Then raises
    :class:`~tensortap.exceptions.ReplayError` if a weight changed within."""
    everything = list(model.parameters())
    grads = [p.grad for p in everything]
    buffers = [(name, b, b.detach().clone()) for name, b in model.named_buffers()]
    modes = [(m, m.training) for m in model.modules()]
    versions = [p._version for p in everything]
    try:
        for p in everything:
            p.grad = None
        yield
    finally:
        for p, g in zip(everything, grads, strict=True):
            p.grad = g
        with torch.no_grad():
            for name, original, copy in buffers:
                owner, _, attr = name.rpartition(".")
                module = model.get_submodule(owner)
                if module._buffers.get(attr) is not original:
                    module._buffers[attr] = original  # step_fn replaced it
                original.copy_(copy)
        for module, training in modes:
            module.training = training
        rng.put()
    if any(p._version != v for p, v in zip(everything, versions, strict=True)):
        raise ReplayError(
            "step_fn changed the model's weights during the replay (an optimizer.step() "
            "in it?): it must only run the forward and backward passes"
        )


__all__ = ["RngState", "model_put_back"]
