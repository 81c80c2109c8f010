"""The background writer: turns step batches into published segments on a Store."""

from tensortap.writer.options import WriterOptions
from tensortap.writer.sessions import SessionStart
from tensortap.writer.status import WriterStatus
from tensortap.writer.trial_writer import TrialWriter

__all__ = ["SessionStart", "TrialWriter", "WriterOptions", "WriterStatus"]
