"""Training modes. Each saved step has a global step number and a step number within its mode."""

from __future__ import annotations

from enum import IntEnum

from tensortap.exceptions import InvalidConfigError


class ModeKeys(IntEnum):
    """The phase of a job a step belongs to; values match smdebug's for familiarity."""

    TRAIN = 1
    EVAL = 2
    PREDICT = 3
    GLOBAL = 4


TRAIN = ModeKeys.TRAIN
EVAL = ModeKeys.EVAL
PREDICT = ModeKeys.PREDICT
GLOBAL = ModeKeys.GLOBAL
ALL_MODES = tuple(ModeKeys)


def parse_mode(value: object) -> ModeKeys:
    """Turn a ModeKeys, its name (any case) or its number into a ModeKeys, or fail clearly."""
    if isinstance(value, ModeKeys):
        return value
    if isinstance(value, str):
        try:
            return ModeKeys[value.strip().upper()]
        except KeyError:
            pass
    elif isinstance(value, int) and not isinstance(value, bool):
        try:
            return ModeKeys(value)
        except ValueError:
            pass
    raise InvalidConfigError(
        f"unknown mode {value!r}: expected one of modes.TRAIN, modes.EVAL, modes.PREDICT, "
        "modes.GLOBAL (or their names 'TRAIN', 'EVAL', 'PREDICT', 'GLOBAL')"
    )
