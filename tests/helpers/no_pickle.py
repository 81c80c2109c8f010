"""For the rank helpers: tensortap's agreement of ranks must not pickle (issue 46). Calls of
``torch.distributed``'s object collectives (which pickle) made from tensortap's code raise;
torch's own (``torch.distributed.checkpoint`` plans with them) go through."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any

import torch.distributed as dist

_OBJECT_COLLECTIVES = (
    "all_gather_object",
    "gather_object",
    "broadcast_object_list",
    "scatter_object_list",
    "send_object_list",
    "recv_object_list",
)


def forbid_pickling_collectives() -> None:
    """Make tensortap's calls of the object collectives raise."""
    for name in _OBJECT_COLLECTIVES:
        original = getattr(dist, name, None)
        if original is not None:
            setattr(dist, name, _refusing(name, original))


def _refusing(name: str, original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def call(*args: Any, **kwargs: Any) -> Any:
        caller = str(sys._getframe(1).f_globals.get("__name__", ""))
        if caller.startswith("tensortap"):
            raise AssertionError(f"{caller} called torch.distributed.{name}, which pickles")
        return original(*args, **kwargs)

    return call
