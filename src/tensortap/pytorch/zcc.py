"""Moved to :mod:`tensortap.attach.pytorch` (zero code change lives in one package); this name
stays for code that imports it."""

from tensortap.attach.pytorch import enable

__all__ = ["enable"]
