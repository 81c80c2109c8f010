"""Moved to :mod:`tensortap.attach.xgboost` (zero code change lives in one package); this name
stays for code that imports it."""

from tensortap.attach.xgboost import enable

__all__ = ["enable"]
