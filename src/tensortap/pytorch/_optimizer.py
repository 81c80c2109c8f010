"""What an optimizer holds, as named tensors for the ``optimizer_variables`` collection.

Numeric hyperparameters of each param group (``optimizer/group_0/lr``, ``.../betas``) and every
tensor or number in the optimizer's state (``optimizer/state/fc1.weight/exp_avg``).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import torch


def _as_tensor(value: Any) -> torch.Tensor | None:
    if isinstance(value, torch.Tensor):
        return value
    if isinstance(value, bool) or value is None:
        return None
    numbers = value if isinstance(value, (tuple, list)) else (value,)
    if numbers and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in numbers):
        return torch.tensor(value, dtype=torch.float64)
    return None


def optimizer_tensors(
    prefix: str, optimizer: torch.optim.Optimizer, param_names: Mapping[int, str]
) -> Iterator[tuple[str, torch.Tensor]]:
    """``(name, tensor)`` for the hyperparameters and state of ``optimizer``."""
    for gi, group in enumerate(optimizer.param_groups):
        for key, value in group.items():
            tensor = None if key == "params" else _as_tensor(value)
            if tensor is not None:
                yield f"{prefix}/group_{gi}/{key}", tensor
        for param in group["params"]:
            state = optimizer.state.get(param)
            if not state:
                continue
            pname = param_names.get(id(param), f"param_{id(param):x}")
            for key, value in state.items():
                tensor = _as_tensor(value)
                if tensor is not None:
                    yield f"{prefix}/state/{pname}/{key}", tensor
