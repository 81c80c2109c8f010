"""The callback for ``lightning.pytorch.Trainer`` (``import lightning``)."""

from __future__ import annotations

from lightning.pytorch.callbacks.callback import Callback

from tensortap.lightning._callback import CallbackMixin


class TensortapCallback(CallbackMixin, Callback):
    __doc__ = CallbackMixin.__doc__
