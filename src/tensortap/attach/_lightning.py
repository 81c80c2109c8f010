"""Zero code change for Lightning: under ``tensortap run`` every Lightning ``Trainer``
(``lightning.pytorch`` or ``pytorch_lightning``) gets a ``TensortapCallback`` (unless the
script gave it one), made from the job's configuration when fitting starts. Its
``ModelCheckpoint`` callbacks (either package's) are guarded too
(:func:`~tensortap.lightning._checkpoint_guard.guard_checkpoints`: a save of non-finite
weights is refused, and ``save_top_k`` never deletes the last good file while saves are
refused) unless ``$TENSORTAP_CHECKPOINT_GUARD`` is ``0`` (``tensortap run
--no-checkpoint-guard``)."""

from __future__ import annotations

import functools
import logging
from types import ModuleType
from typing import Any

from tensortap.attach._import_hooks import when_imported_once
from tensortap.hook._config import HookConfig, checkpoint_guard_on

logger = logging.getLogger(__name__)


def enable(config: HookConfig | None = None) -> None:
    """Add the callback to every Trainer made from now on (once per process); the callback
    reads the configuration itself (``$TENSORTAP_CONFIG``)."""
    for module, patch in _PATCHES.items():
        when_imported_once(module, patch)


def _patch(name: str, module: ModuleType, guard: bool = False) -> None:
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
        if guard and checkpoint_guard_on():
            from tensortap.lightning._checkpoint_guard import guard_checkpoints

            try:
                guard_checkpoints(self)  # no save of NaN weights; the last good file kept
            except Exception as exc:  # never stop training for it
                logger.warning("tensortap: the checkpoints are not guarded: %r", exc)

    cls.__init__ = init


#: Each Trainer's module, and the patch that gives its Trainers their package's callback.
_PATCHES = {
    "lightning.pytorch.trainer.trainer": functools.partial(_patch, "TensortapCallback", guard=True),
    "pytorch_lightning.trainer.trainer": functools.partial(
        _patch, "PLTensortapCallback", guard=True
    ),
}
