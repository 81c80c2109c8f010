"""Zero code change for Lightning: under ``tensortap run`` every Lightning ``Trainer``
(``lightning.pytorch`` or ``pytorch_lightning``) gets a ``TensortapCallback`` (unless the
script gave it one), made from the job's configuration when fitting starts."""

from __future__ import annotations

import functools
from types import ModuleType
from typing import Any

from tensortap.attach._imports import when_imported
from tensortap.hook_config import HookConfig

_PACKAGES = {
    "lightning.pytorch.trainer.trainer": "TensortapCallback",
    "pytorch_lightning.trainer.trainer": "PLTensortapCallback",
}
_enabled = False


def enable(config: HookConfig | None = None) -> None:
    """Add the callback to every Trainer made from now on (once per process); the callback
    reads the configuration itself (``$TENSORTAP_CONFIG``)."""
    global _enabled
    if not _enabled:
        _enabled = True
        for module, name in _PACKAGES.items():
            when_imported(module, functools.partial(_patch, name))


def _patch(name: str, module: ModuleType) -> None:
    import tensortap.lightning as tl
    from tensortap.lightning.callback import CallbackMixin

    callback_class = getattr(tl, name)
    cls = module.Trainer
    original = cls.__init__

    @functools.wraps(original)
    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        if not any(isinstance(c, CallbackMixin) for c in self.callbacks):
            self.callbacks.append(callback_class())

    cls.__init__ = init
