"""Zero code change for Hugging Face: under ``tensortap run`` every ``transformers.Trainer`` gets
a :class:`~tensortap.huggingface.TensortapCallback` (unless the script gave it one), made from the
job's configuration, and its checkpoints are guarded
(:func:`~tensortap.huggingface._checkpoint_guard.guard_trainer`: a save of non-finite weights is
refused, a resume from the newest checkpoint takes the newest good one) unless
``$TENSORTAP_CHECKPOINT_GUARD`` is ``0`` (``tensortap run --no-checkpoint-guard``). The patch is
applied when the script imports ``transformers.trainer``.

:func:`~tensortap.huggingface._report_to.offer_report_to` (called by ``import
tensortap.huggingface``) lets ``TrainingArguments(report_to="tensortap")`` name the callback."""

from __future__ import annotations

import functools
import logging
from types import ModuleType
from typing import Any

from tensortap.attach._import_hooks import when_imported_once
from tensortap.hook._config import HookConfig, checkpoint_guard_on
from tensortap.huggingface._report_to import offer_report_to

__all__ = ["enable", "offer_report_to"]

logger = logging.getLogger(__name__)


def enable(config: HookConfig | None = None) -> None:
    """Add the callback to every Trainer made from now on (once per process); the callback
    reads the configuration itself (``$TENSORTAP_CONFIG``)."""
    when_imported_once("transformers.trainer", _patch)


def _patch(module: ModuleType) -> None:
    from tensortap.huggingface._callback import TensortapCallback
    from tensortap.huggingface._checkpoint_guard import guard_trainer
    from tensortap.huggingface._outcome import patch_label_smoother
    from tensortap.pytorch._events import classification_loss

    patch_label_smoother(classification_loss)  # the outcome of a Trainer smoothing its labels

    cls = module.Trainer
    original = cls.__init__

    @functools.wraps(original)
    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        if not any(isinstance(c, TensortapCallback) for c in self.callback_handler.callbacks):
            self.add_callback(TensortapCallback())
        if checkpoint_guard_on():
            try:
                guard_trainer(self)  # no save of NaN weights, no resume from one
            except Exception as exc:  # never stop training for it
                logger.warning("tensortap: the checkpoints are not guarded: %r", exc)

    cls.__init__ = init
