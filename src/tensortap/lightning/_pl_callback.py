"""The callbacks for ``pytorch_lightning.Trainer`` (the older spelling of the same Trainer)."""

from __future__ import annotations

from pytorch_lightning.callbacks.callback import Callback

from tensortap.lightning._callback import CallbackMixin
from tensortap.lightning._rollback import RollbackMixin


class PLTensortapCallback(CallbackMixin, Callback):
    __doc__ = CallbackMixin.__doc__


class PLRollbackCallback(RollbackMixin, Callback):
    __doc__ = RollbackMixin.__doc__
