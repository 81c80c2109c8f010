"""tensortap for Hugging Face ``transformers``: :class:`TensortapCallback`, also available as
``TrainingArguments(report_to="tensortap")`` once this module is imported."""

from __future__ import annotations

from tensortap.huggingface.callback import TensortapCallback


def _register_report_to() -> None:
    """Let ``report_to="tensortap"`` name the callback (transformers looks names up here)."""
    try:
        from transformers.integrations import integration_utils
    except ImportError:  # pragma: no cover - an old or partial transformers
        return
    integration_utils.INTEGRATION_TO_CALLBACK.setdefault("tensortap", TensortapCallback)


_register_report_to()

__all__ = ["TensortapCallback"]
