"""Trials written by SageMaker Debugger (smdebug 1.0): read through the same Trial API (see
:mod:`tensortap.smdebug._convert`)."""

from __future__ import annotations

from tensortap.smdebug._convert import convert
from tensortap.smdebug._reader import SmdebugReader, is_smdebug_trial

__all__ = ["SmdebugReader", "convert", "is_smdebug_trial"]
