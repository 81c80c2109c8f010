"""Moved to :mod:`tensortap.attach._imports`; this name stays for code that imports it."""

from tensortap.attach._imports import Attachment, when_imported

__all__ = ["Attachment", "when_imported"]
