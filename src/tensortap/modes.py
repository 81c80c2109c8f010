"""``tensortap.modes``: TRAIN, EVAL, PREDICT, GLOBAL (as in smdebug)."""

from tensortap.core._modes import EVAL, GLOBAL, PREDICT, TRAIN, ModeKeys, parse_mode

__all__ = ["EVAL", "GLOBAL", "PREDICT", "TRAIN", "ModeKeys", "parse_mode"]
