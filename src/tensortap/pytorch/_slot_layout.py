"""What a row of slots means: the slots, which reductions they give, the hook's checks of
``statistics="slots"`` at setup, and :func:`derive` (a row to a reduction, on the writer
thread, NumPy only). The rows are computed in :mod:`tensortap.pytorch._slot_kernels` and
merged in :mod:`tensortap.pytorch._slots`, whose docstring tells the whole path.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from tensortap.core._recorder import StepRecorder
from tensortap.exceptions import InvalidConfigError

SLOTS = (
    "numel",
    "nonfinite",
    "zeros",
    "sum",
    "sum_abs",
    "sum_sq",
    "sum_4th",
    "max_abs",
    "max",
    "neg_min",
)
#: Slots ``[0, SUMMED)`` add up across ranks; the others take the maximum.
SUMMED = 7
NUMEL, NONFINITE, ZEROS, SUM, SUM_ABS, SUM_SQ, SUM_4TH, MAX_ABS, MAX, NEG_MIN = range(len(SLOTS))

#: (reduction, on the absolute value) pairs the slots give exactly.
DERIVABLE = frozenset(
    [
        *((name, False) for name in ("min", "max", "mean", "std", "variance", "sum")),
        *((name, False) for name in ("l1", "l2", "nonfinite")),
        *((name, True) for name in ("max", "mean", "std", "variance", "sum", "l1", "l2")),
    ]
)
#: The collection of the gradients of saved module outputs (``gradient/<output name>``).
ACTIVATION_GRADIENTS = "activation_gradients"
STATISTICS_CHOICES = ("per_tensor", "slots")


def check_statistics(statistics: object) -> str:
    """The ``statistics`` option of the hook, validated."""
    if statistics not in STATISTICS_CHOICES:
        raise InvalidConfigError(
            f"statistics must be one of {', '.join(map(repr, STATISTICS_CHOICES))}, got "
            f"{statistics!r}: 'per_tensor' computes each reduction of each tensor (the default), "
            "'slots' one row of mergeable statistics per tensor"
        )
    return str(statistics)


def not_derivable(specs: tuple[tuple[str, bool], ...]) -> list[str]:
    """The reductions of ``specs`` the slots cannot give (``abs_`` marks absolute ones)."""
    return [
        ("abs_" if on_abs else "") + name
        for name, on_abs in specs
        if (name, on_abs) not in DERIVABLE
    ]


def refuse_not_derivable(where: str, specs: tuple[tuple[str, bool], ...]) -> None:
    """Setup check: every reduction asked for must come from the slots."""
    missing = not_derivable(specs)
    if missing:
        raise InvalidConfigError(
            f"statistics='slots' cannot compute {missing} (asked for by {where}): the slots give "
            "min, max, mean, sum, std, variance, l1, l2 and nonfinite, and max, mean, sum, std, "
            "variance, l1 and l2 of the absolute value. Leave those reductions out, or use "
            "statistics='per_tensor' for this hook"
        )


def refuse_collections(recorder: StepRecorder) -> None:
    """Setup check of the included collections' own reduction configs (see above)."""
    for name in sorted(recorder.include_collections):
        config = recorder.collections.get(name).reduction_config
        if config is not None:
            refuse_not_derivable(f"collection {name!r}", config.reduction_specs)


def derive(row: np.ndarray[Any, Any], name: str, on_abs: bool) -> float:
    """One reduction of a tensor from its (merged) row of slots, as the core computes it."""
    n = float(row[NUMEL])
    if n == 0:
        return {"sum": 0.0, "l1": 0.0, "l2": 0.0, "nonfinite": 0.0}.get(name, math.nan)
    with np.errstate(all="ignore"):
        if name == "nonfinite":
            return float(row[NONFINITE])
        if name == "l1":
            return float(row[SUM_ABS])
        if name == "l2":
            return float(np.sqrt(row[SUM_SQ]))
        total = row[SUM_ABS] if on_abs else row[SUM]
        if name == "sum":
            return float(total)
        if name == "mean":
            return float(total / n)
        if name in ("std", "variance"):
            mean = total / n
            variance = row[SUM_SQ] / n - mean * mean
            if np.isfinite(variance):
                variance = max(float(variance), 0.0)
            return float(variance if name == "variance" else np.sqrt(variance))
        if name == "max":
            return float(row[MAX_ABS] if on_abs else row[MAX])
        if name == "min" and not on_abs:
            return float(-row[NEG_MIN])
    raise InvalidConfigError(f"the slots cannot give {'abs ' if on_abs else ''}{name!r}")


__all__ = [
    "ACTIVATION_GRADIENTS",
    "DERIVABLE",
    "SLOTS",
    "STATISTICS_CHOICES",
    "SUMMED",
    "check_statistics",
    "derive",
    "not_derivable",
    "refuse_collections",
    "refuse_not_derivable",
]
