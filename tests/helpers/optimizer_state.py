"""An optimizer's state dict as JSON values and back, and checkpoint functions that keep a
model's and its optimizer's state in memory that way (sharing no tensor with what goes on
training)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import torch


def state_to_json(state: dict[str, Any]) -> Any:
    """``state`` (``optimizer.state_dict()``) as JSON values: each tensor as ``{"__tensor__":
    its values}``, anything else JSON cannot hold as its ``str``."""
    return json.loads(json.dumps(state, default=_listed))


def state_from_json(value: Any) -> Any:
    """What :func:`state_to_json` made, back as a state dict ``load_state_dict`` takes (tensors
    again, parameter ids as ints)."""
    if isinstance(value, dict):
        if set(value) == {"__tensor__"}:
            return torch.tensor(value["__tensor__"])
        return {(int(k) if k.isdigit() else k): state_from_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [state_from_json(v) for v in value]
    return value


def in_memory(
    model: torch.nn.Module, optimizer: torch.optim.Optimizer
) -> tuple[Callable[[int], None], Callable[[int], None]]:
    """``save(step)`` and ``load(step)`` for ``FunctionCheckpoints``: the model's state dict
    (cloned) and the optimizer's (as JSON values), kept in memory by step."""
    saved: dict[int, dict[str, Any]] = {}

    def save(step: int) -> None:
        saved[step] = {
            "model": {k: v.clone() for k, v in model.state_dict().items()},
            "optim": state_to_json(optimizer.state_dict()),
        }

    def load(step: int) -> None:
        model.load_state_dict(saved[step]["model"])
        optimizer.load_state_dict(state_from_json(saved[step]["optim"]))

    return save, load


def _listed(value: object) -> object:
    return {"__tensor__": value.tolist()} if isinstance(value, torch.Tensor) else str(value)
