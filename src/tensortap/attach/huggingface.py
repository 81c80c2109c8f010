"""Zero code change for Hugging Face: under ``tensortap run`` every ``transformers.Trainer`` gets
a :class:`~tensortap.huggingface.TensortapCallback` (unless the script gave it one), made from the
job's configuration. The patch is applied when the script imports ``transformers.trainer``.

:func:`offer_report_to` (called by ``import tensortap.huggingface``) lets
``TrainingArguments(report_to="tensortap")`` name the callback: the name is added to transformers'
integrations when transformers loads them (at once if it has), so importing tensortap's face
imports no transformers."""

from __future__ import annotations

import functools
from types import ModuleType
from typing import Any

from tensortap.attach._imports import when_imported_once
from tensortap.hook_config import HookConfig


def enable(config: HookConfig | None = None) -> None:
    """Add the callback to every Trainer made from now on (once per process); the callback
    reads the configuration itself (``$TENSORTAP_CONFIG``)."""
    when_imported_once("transformers.trainer", _patch)


def offer_report_to() -> None:
    """Let ``report_to="tensortap"`` name the callback (once per process)."""
    when_imported_once("transformers.integrations.integration_utils", _register_report_to)


def _register_report_to(integration_utils: ModuleType) -> None:
    """transformers looks ``report_to`` names up in ``INTEGRATION_TO_CALLBACK``."""
    from tensortap.huggingface.callback import TensortapCallback

    integration_utils.INTEGRATION_TO_CALLBACK.setdefault("tensortap", TensortapCallback)


def _patch(module: ModuleType) -> None:
    from tensortap.huggingface.callback import TensortapCallback

    cls = module.Trainer
    original = cls.__init__

    @functools.wraps(original)
    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        if not any(isinstance(c, TensortapCallback) for c in self.callback_handler.callbacks):
            self.add_callback(TensortapCallback())

    cls.__init__ = init
