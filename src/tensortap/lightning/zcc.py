"""Moved to :mod:`tensortap.attach.lightning` (zero code change lives in one package); this name
stays for code that imports it."""

from tensortap.attach.lightning import enable

__all__ = ["enable"]
