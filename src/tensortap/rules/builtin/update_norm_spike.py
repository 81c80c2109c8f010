"""UpdateNormSpike: the weight update jumped far above its recent baseline (a leading indicator)."""

from __future__ import annotations

import functools
import math

import numpy as np

from tensortap.core._collections import CollectionKeys
from tensortap.core._modes import ModeKeys
from tensortap.rules.builtin._common import (
    NOT_TRAINING,
    fire_nonfinite,
    names_in,
    nonfinite_names,
    step_mode,
    training_step,
)
from tensortap.rules.builtin._spike import SpikeRule

_FIX = (
    ": loss spikes tend to follow (Marin 32B); lower the learning rate or clip gradients, look "
    "for the batch of this step, or skip such updates (tensortap.pytorch.Guard)"
)
_NO_WEIGHTS = "no weights saved at this step; include 'weights' in the hook's collections"


class UpdateNormSpike(SpikeRule):
    """The norm of the weight update between consecutive saved TRAIN (or GLOBAL) steps,
    ``||w_t - w_prev||`` over every tensor in ``weights``, against the median of its last
    ``window`` values: a **leading indicator** of loss spikes. The Marin 32B retrospective
    (marin.community, 2025) observed that spikes of the update norm precede the loss spikes
    they cause; here the update of step t shows at step t, the loss it spoils at step t + 1.

    Reads the raw weights (``weights`` saved with the hook's default reduction config, raw);
    the hook's default collections do not include them. Where a weight has only its ``l2``
    norm saved, ``| ||w_t|| - ||w_prev|| |`` (a lower bound of its update's norm, by the
    triangle inequality) stands in for it, and ``details["lower_bound"]`` says so. Save the
    weights at a fixed interval: the update between saved steps spans the steps between them.
    A spike is more than ``z_threshold`` robust deviations and ``min_ratio`` times above the
    median (:class:`~tensortap.core._baseline.RobustBaseline`, as GradientNormSpike and
    LossSpike), judged after ``warmup`` updates. Findings name ``details["cause"] =
    "update_spike"``. **Severity:** warning (the loss may absorb it); NaN or infinite weights
    are a problem. Not in the recommended set: a run with a learning-rate warm-up or a
    schedule restart grows its updates on purpose.
    """

    collections_needed = (CollectionKeys.WEIGHTS,)
    cause = "update_spike"
    lasting_is_problem = False

    # no __init__ of its own: the rule takes SpikeRule's parameters as they are
    @functools.cached_property
    def _previous(self) -> dict[ModeKeys, tuple[dict[str, np.ndarray], dict[str, float]]]:
        """The weights at the last judged step of each mode: raw arrays, or l2 norms."""
        return {}

    def invoke_at_step(self, step: int) -> bool:
        training = training_step(self.base_trial, step)
        if training is None:
            mode = step_mode(self.base_trial, step)[0]
            self.explain(NOT_TRAINING.format(mode=mode.name), judged=False)
            return False
        mode = training[0]
        names = names_in(self.base_trial, CollectionKeys.WEIGHTS, step)
        if not names:
            raise self.skip(_NO_WEIGHTS)
        bad = nonfinite_names(self.base_trial, names, step)
        if bad:
            self._previous.pop(mode, None)
            return fire_nonfinite(self, bad, "the weight")
        block = self.base_trial.step_block(step)
        raw, reduced = block.split_raw(names)
        arrays = {n: block.value(n).astype(np.float64, copy=False) for n in raw}
        with_l2 = [n for n in reduced if ("l2", False) in block.saved_reductions(n)]
        norms = dict(zip(with_l2, block.reduce(with_l2, "l2").tolist(), strict=True))
        before = self._previous.get(mode)
        self._previous[mode] = (arrays, norms)
        if before is None:
            self.explain(
                "the first saved weights: the update is measured from the next saved step on",
                judged=False,
            )
            return False
        squares, used, bound = 0.0, [], False
        for name, now in arrays.items():
            was = before[0].get(name)
            if was is not None and was.shape == now.shape:
                squares += float(np.sum((now - was) ** 2))
                used.append(name)
        for name, now_norm in norms.items():
            was_norm = before[1].get(name)
            if was_norm is not None:
                squares += (now_norm - was_norm) ** 2
                used.append(name)
                bound = True
        if not used:
            raise self.skip("no weight saved (raw, or with its l2 norm) at the previous step too")
        what = "weight update norm" + (" (a lower bound, from saved l2 norms)" if bound else "")
        fired = self.judge_value("global", math.sqrt(squares), what, used)
        said = self._explanation
        if fired and said is not None and not said.details.get("nonfinite"):
            said.message += _FIX
            said.details["lower_bound"] = bound
        return fired
