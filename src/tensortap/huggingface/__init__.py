"""tensortap for Hugging Face ``transformers``: :class:`TensortapCallback`, also available as
``TrainingArguments(report_to="tensortap")`` once this module is imported (the name is given to
transformers when it loads its integrations: see :mod:`tensortap.huggingface._report_to`); and
:class:`RollbackCallback`, :class:`HuggingFaceCheckpoints`, :class:`BatchStream` and
:func:`train_with_rollback`, which roll training back to its last good checkpoint (see
:mod:`tensortap.huggingface._rollback`); :class:`CheckpointGuardCallback`,
:func:`last_good_checkpoint` and :func:`verify_checkpoint` keep NaN weights out of its
checkpoints and its resumes (see :mod:`tensortap.huggingface._checkpoint_guard`). Names load
at first use, as the framework faces' (see :mod:`tensortap._faces`)."""

from typing import TYPE_CHECKING

from tensortap._faces import face
from tensortap.huggingface._report_to import offer_report_to

if TYPE_CHECKING:  # `X as X`: re-exported for type checkers (no static __all__ here)
    from tensortap.huggingface._callback import TensortapCallback as TensortapCallback
    from tensortap.huggingface._checkpoint_guard import (
        CheckpointGuardCallback as CheckpointGuardCallback,
    )
    from tensortap.huggingface._checkpoint_guard import (
        last_good_checkpoint as last_good_checkpoint,
    )
    from tensortap.huggingface._checkpoint_guard import verify_checkpoint as verify_checkpoint
    from tensortap.huggingface._rollback import BatchStream as BatchStream
    from tensortap.huggingface._rollback import HuggingFaceCheckpoints as HuggingFaceCheckpoints
    from tensortap.huggingface._rollback import RollbackCallback as RollbackCallback
    from tensortap.huggingface._rollback import train_with_rollback as train_with_rollback

offer_report_to()

__all__, __getattr__, __dir__ = face(__name__)
