"""Shared by DeadRelu and SaturatedActivation: the share of units that are (almost) never active."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from tensortap.rules.builtin._common import has_raw, unit_activity
from tensortap.rules.rule import Rule


def raw_matching(rule: Rule, regexes: list[str], step: int) -> list[str]:
    """Tensors matching any of ``regexes`` saved raw at ``step``."""
    found: set[str] = set()
    for regex in regexes:
        found.update(rule.base_trial.tensor_names(step=step, regex=regex))
    return sorted(n for n in found if has_raw(rule.base_trial.tensor(n), step))


def judge_layers(
    rule: Rule,
    names: list[str],
    step: int,
    inactive: Callable[[str, np.ndarray], np.ndarray],
    threshold_inactivity: float,
    threshold_layer: float,
    what: str,
) -> bool:
    """A unit counts as ``what`` (dead, saturated) when it is active in less than
    ``threshold_inactivity`` percent of the samples; a layer fires when more than
    ``threshold_layer`` percent of its units are. Explains the worst layer."""
    if not names:
        raise rule.skip("no matching activation saved at this step")
    worst: tuple[float, str, int, int] | None = None
    for name in names:
        values = rule.base_trial.tensor(name).value(step)
        if values.size == 0:
            continue
        activity = unit_activity(values, ~inactive(name, values))
        bad = int(np.count_nonzero(activity < threshold_inactivity))
        percent = 100.0 * bad / activity.size
        if worst is None or percent > worst[0]:
            worst = (percent, name, bad, activity.size)
    if worst is None:
        raise rule.skip("the matching activations are empty at this step")
    percent, name, bad, units = worst
    fired = percent > threshold_layer
    rule.explain(
        f"{percent:.3g}% of the units of {name} are {what} ({bad} of {units} active in less "
        f"than {threshold_inactivity:g}% of samples); limit {threshold_layer:g}%",
        tensors=[name],
        value=percent,
        threshold=threshold_layer,
    )
    return fired
