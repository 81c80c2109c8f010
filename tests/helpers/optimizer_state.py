"""An optimizer's state dict as JSON values and back: what the tests' checkpoint functions keep,
so that a saved state shares no tensor with the optimizer that goes on training."""

from __future__ import annotations

import json
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


def _listed(value: object) -> object:
    return {"__tensor__": value.tolist()} if isinstance(value, torch.Tensor) else str(value)
