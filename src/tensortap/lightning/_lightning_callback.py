"""The callbacks for ``lightning.pytorch.Trainer`` (``import lightning``)."""

from __future__ import annotations

from lightning.pytorch.callbacks.callback import Callback

from tensortap.lightning._callback import CallbackMixin
from tensortap.lightning._rollback import RollbackMixin


class TensortapCallback(CallbackMixin, Callback):
    __doc__ = CallbackMixin.__doc__


class RollbackCallback(RollbackMixin, Callback):
    __doc__ = RollbackMixin.__doc__
