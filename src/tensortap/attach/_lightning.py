"""Zero code change for Lightning: under ``tensortap run`` every Lightning ``Trainer``
(``lightning.pytorch`` or ``pytorch_lightning``) gets a ``TensortapCallback`` (unless the
script gave it one), made from the job's configuration when fitting starts."""

from __future__ import annotations

import functools
from types import ModuleType
from typing import Any

from tensortap._hook_config import HookConfig
from tensortap._import_hooks import when_imported_once


def enable(config: HookConfig | None = None) -> None:
    """Add the callback to every Trainer made from now on (once per process); the callback
    reads the configuration itself (``$TENSORTAP_CONFIG``)."""
    for module, patch in _PATCHES.items():
        when_imported_once(module, patch)


def _patch(name: str, module: ModuleType) -> None:
    import tensortap.lightning as tl
    from tensortap.lightning._callback import CallbackMixin

    callback_class = getattr(tl, name)
    cls = module.Trainer
    original = cls.__init__

    @functools.wraps(original)
    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        if not any(isinstance(c, CallbackMixin) for c in self.callbacks):
            self.callbacks.append(callback_class())

    cls.__init__ = init


#: Each Trainer's module, and the patch that gives its Trainers their package's callback.
_PATCHES = {
    "lightning.pytorch.trainer.trainer": functools.partial(_patch, "TensortapCallback"),
    "pytorch_lightning.trainer.trainer": functools.partial(_patch, "PLTensortapCallback"),
}
