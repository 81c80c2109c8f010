"""The background writer: turns step batches into published segments on a Store."""

from tensortap.writer._compaction import Merge, compact_trial, compact_worker
from tensortap.writer._options import WriterOptions
from tensortap.writer._sessions import SessionStart
from tensortap.writer._status import WriterStatus
from tensortap.writer._trial_writer import TrialWriter

__all__ = [
    "Merge",
    "SessionStart",
    "TrialWriter",
    "WriterOptions",
    "WriterStatus",
    "compact_trial",
    "compact_worker",
]
