"""CheckInputImages: input images that were not normalised."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from tensortap.rules._finding import Severity
from tensortap.rules._rule import Rule
from tensortap.rules.builtin._common import fire_nonfinite, has_raw, names_in
from tensortap.rules.builtin._samples import ConfigFact, normalised_in_model

#: A channel mean beyond this is off order 1 (raw pixels): a problem on its own.
FAR_MEAN = 1.0


class CheckInputImages(Rule):
    """Accumulates the per-channel mean of the input images (axis ``channel``) over the steps
    seen; once ``threshold_samples`` images were seen, fires when some channel's mean is
    further than ``threshold_mean`` from 0 (normalised inputs are centred on 0).

    Inputs: tensors matching ``regex``, else the model's input: the first tensor of the
    ``inputs`` collection the hook saved at the step (forward order), when it has 4 dimensions
    (batch, channel and two spatial axes); a 4-D tensor deeper in the model (an attention
    mask) is not an image. Tensors of fewer than 3 axes are not images and are
    not judged (tabular features normalised with one global mean are fine), so a trial of
    tabular inputs ends ``NoData`` rather than with a false alarm. Images holding NaN or inf
    are a problem (non-finite).

    A mean off order 1 (beyond :data:`FAR_MEAN`: raw pixels, 0-255 or 0-16) is a problem. A mean
    past ``threshold_mean`` but within it is common practice (images scaled to [0, 1], or
    ``Normalize(0.5, 0.5)`` of mostly dark digits: mean -0.39, in a run that reached 99.6%
    accuracy): the rule fires as smdebug's did, but as evidence that needs harm
    (``details["needs_harm"]``, a warning), a problem only where the run is harmed in a way
    unnormalised inputs explain.
    """

    collections_needed = ("inputs",)

    @classmethod
    def check_values(cls, params: Mapping[str, Any]) -> None:
        threshold_mean = params["threshold_mean"]
        threshold_samples = params["threshold_samples"]
        channel = params["channel"]
        cls.check_param("threshold_mean", threshold_mean, threshold_mean >= 0, "a number >= 0")
        cls.check_param(
            "threshold_samples", threshold_samples, threshold_samples >= 1, "an integer >= 1"
        )
        cls.check_param("channel", channel, channel >= 1, "the channel axis (>= 1)")

    def __init__(
        self,
        base_trial: Any,
        threshold_mean: float = 0.2,
        threshold_samples: int = 500,
        regex: str | None = None,
        channel: int = 1,
    ) -> None:
        super().__init__(base_trial)
        self.threshold_mean = threshold_mean
        self.threshold_samples = threshold_samples
        self.regex = regex
        self.channel = channel
        self._sums: dict[str, np.ndarray] = {}
        self._counts: dict[str, int] = {}
        self._samples: dict[str, int] = {}
        # the model's own normalisation
        self._normaliser = ConfigFact(base_trial, normalised_in_model)

    def _names(self, step: int) -> list[str]:
        trial = self.base_trial
        if self.regex:
            names = trial.tensor_names(step=step, regex=self.regex)
        else:
            # the model's own input (the first in forward order), when it is images: a 4-D
            # tensor deeper in the model (a BERT's attention mask) is no image
            inputs = set(names_in(trial, "inputs", step))
            first = [n for n in trial.saved_order(step) if n in inputs][:1]
            names = [n for n in first if len(trial.tensor(n).shape(step)) == 4]
        return [n for n in names if has_raw(trial.tensor(n), step)]

    def invoke_at_step(self, step: int) -> bool:
        names = self._names(step)
        if not names:
            raise self.skip("no input images saved at this step")
        worst: tuple[float, str, int] | None = None
        judged = 0
        for name in names:
            images = self.base_trial.tensor(name).value(step).astype(np.float64)
            if images.ndim < 3 or images.ndim <= self.channel:
                continue  # tabular features (batch, features) are not images: not judged
            judged += 1
            if not np.isfinite(images).all():
                return fire_nonfinite(self, [name], "the input")
            axes = tuple(a for a in range(images.ndim) if a != self.channel)
            sums = images.sum(axis=axes)
            count = images.size // sums.size
            self._sums[name] = self._sums.get(name, 0) + sums
            self._counts[name] = self._counts.get(name, 0) + count
            self._samples[name] = self._samples.get(name, 0) + images.shape[0]
            if self._samples[name] < self.threshold_samples:
                continue
            means = self._sums[name] / self._counts[name]
            c = int(np.abs(means).argmax())
            if worst is None or abs(means[c]) > abs(worst[0]):
                worst = (float(means[c]), name, c)
        if not judged:
            raise self.skip(
                f"no input with image axes (batch, channel, ...) and channel axis {self.channel}"
            )
        if worst is None:
            seen = max(self._samples.values())
            raise self.skip(f"{seen} of {self.threshold_samples} images seen; not judged yet")
        mean, name, c = worst
        normaliser = self._normaliser()
        if normaliser is not None:
            self.explain(
                f"{normaliser}: channel {c} of {name} has mean {mean:.3g}, which it expects",
                tensors=[name],
            )
            return False
        fired = abs(mean) > self.threshold_mean
        near = fired and abs(mean) <= max(FAR_MEAN, self.threshold_mean)
        extra: dict[str, Any] = {}
        if near:  # within order 1: evidence where harm is seen, not a fault on its own
            extra = {"severity": Severity.WARNING, "needs_harm": True}
        self.explain(
            f"channel {c} of {name} has mean {mean:.3g} over {self._samples[name]} images "
            f"({'further' if fired else 'no further'} than {self.threshold_mean:g} from 0"
            f"{'; normalise the inputs' if fired else ''}"
            f"{f', though within {FAR_MEAN:g} of it' if near else ''})",
            tensors=[name],
            value=mean,
            threshold=self.threshold_mean,
            cause="unnormalised_input",
            **extra,
        )
        return fired
