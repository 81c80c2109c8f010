"""``TrainingArguments(report_to="tensortap")``: the name is added to transformers'
integrations when transformers loads them (at once if it has), so importing tensortap's face
imports no transformers."""

from __future__ import annotations

from types import ModuleType

from tensortap.attach._import_hooks import when_imported_once


def offer_report_to() -> None:
    """Let ``report_to="tensortap"`` name the callback (once per process)."""
    when_imported_once("transformers.integrations.integration_utils", _register_report_to)


def _register_report_to(integration_utils: ModuleType) -> None:
    """transformers looks ``report_to`` names up in ``INTEGRATION_TO_CALLBACK``."""
    from tensortap.huggingface._callback import TensortapCallback

    integration_utils.INTEGRATION_TO_CALLBACK.setdefault("tensortap", TensortapCallback)
