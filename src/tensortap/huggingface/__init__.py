"""tensortap for Hugging Face ``transformers``: :class:`TensortapCallback`, also available as
``TrainingArguments(report_to="tensortap")`` once this module is imported (the name is given to
transformers when it loads its integrations: see :mod:`tensortap.huggingface.report_to`). Names load
at first use, as the framework faces' (see :mod:`tensortap._faces`)."""

from typing import TYPE_CHECKING

from tensortap._faces import face
from tensortap.huggingface.report_to import offer_report_to

if TYPE_CHECKING:  # `X as X`: re-exported for type checkers (no static __all__ here)
    from tensortap.huggingface.callback import TensortapCallback as TensortapCallback

offer_report_to()

__all__, __getattr__, __dir__ = face(__name__)
