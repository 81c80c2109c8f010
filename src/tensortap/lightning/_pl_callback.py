"""The callback for ``pytorch_lightning.Trainer`` (the older spelling of the same Trainer)."""

from __future__ import annotations

from pytorch_lightning.callbacks.callback import Callback

from tensortap.lightning._callback import CallbackMixin


class PLTensortapCallback(CallbackMixin, Callback):
    __doc__ = CallbackMixin.__doc__
