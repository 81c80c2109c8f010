"""Moved to :mod:`tensortap.attach.huggingface` (zero code change lives in one package); this name
stays for code that imports it."""

from tensortap.attach.huggingface import enable, offer_report_to

__all__ = ["enable", "offer_report_to"]
