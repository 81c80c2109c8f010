"""tensortap for Lightning: :class:`TensortapCallback` for ``lightning.pytorch.Trainer``, and
:class:`PLTensortapCallback` for the ``pytorch_lightning`` spelling of the same Trainer (each
Trainer accepts only its own package's ``Callback``). A name is None when its package is not
installed."""

from __future__ import annotations

import importlib
from typing import Any

from tensortap.lightning.callback import CallbackMixin


def _callback_class(package: str, name: str) -> Any:
    try:
        base = importlib.import_module(package).Callback
    except ImportError:
        return None
    doc = CallbackMixin.__doc__
    return type(name, (CallbackMixin, base), {"__doc__": doc, "__module__": __name__})


TensortapCallback: Any = _callback_class("lightning.pytorch", "TensortapCallback")
PLTensortapCallback: Any = _callback_class("pytorch_lightning", "PLTensortapCallback")

__all__ = ["CallbackMixin", "PLTensortapCallback", "TensortapCallback"]
