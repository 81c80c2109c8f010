"""Moved to :mod:`tensortap.attach.keras` (zero code change lives in one package); this name
stays for code that imports it."""

from tensortap.attach.keras import enable

__all__ = ["enable"]
