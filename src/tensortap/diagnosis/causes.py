"""The causes a diagnosis names: moved to :mod:`tensortap.rules.causes` (the verdict is built
below the jobs that record it); kept here for old imports."""

from tensortap.rules.causes import (
    CAUSES,
    DYNAMICS_TIER,
    RULE_CAUSES,
    SETUP_TIER,
    Cause,
    cause_of,
)

__all__ = ["CAUSES", "DYNAMICS_TIER", "RULE_CAUSES", "SETUP_TIER", "Cause", "cause_of"]
