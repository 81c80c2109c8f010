"""CheckInputImages: input images that were not normalised."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from tensortap.rules._finding import Severity
from tensortap.rules._rule import Rule
from tensortap.rules.builtin._common import fire_nonfinite, has_raw, names_in
from tensortap.rules.builtin._samples import ConfigFact, input_rescaling, normalised_in_model

#: A channel mean beyond this is off order 1 (raw pixels): a problem on its own.
FAR_MEAN = 1.0
#: Images whose every value lies within [-CONVENTION, CONVENTION] are scaled as the frameworks'
#: guides scale them ([0, 1], or [-1, 1] after ``Normalize(0.5, 0.5)``): normalised, whatever
#: their mean (a little float rounding above 1 allowed).
CONVENTION = 1.0 + 1e-6
#: A 4-D input whose last axis is at most this long while its axis 1 is longer is channels-last
#: (Keras and TensorFlow's default, NHWC): its channels are its last axis.
MOST_CHANNELS = 4


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

    Images whose every value lies within [-1, 1] are normalised as the frameworks' guides
    normalise them (scaled to [0, 1], or to [-1, 1] by ``Normalize(0.5, 0.5)``: mostly dark
    digits then have mean -0.39, in a run that reached 99.6% accuracy), whatever their mean:
    nothing is found (naming them once put "the inputs are not normalised" before labels
    shuffled apart from their images, whose run learned nothing). Otherwise a mean off order 1
    (beyond :data:`FAR_MEAN`: raw pixels, 0-255 or 0-16) is a problem; a mean past
    ``threshold_mean`` but within it fires as smdebug's did, but as evidence that needs harm
    (``details["needs_harm"]``, a warning), a problem only where the run is harmed in a way
    unnormalised inputs explain.

    With the default ``channel`` (1), a 4-D input whose last axis is short (at most 4) while
    its axis 1 is longer is channels-last (NHWC, Keras' default): its channels are its last axis.
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
        self._ranges: dict[str, tuple[float, float]] = {}  # the smallest and largest value seen
        # the model's own normalisation
        self._normaliser = ConfigFact(base_trial, normalised_in_model)
        self._rescaling = ConfigFact(base_trial, input_rescaling)

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
            rescaling = self._rescaling()
            if rescaling is not None:  # what the model's first layer (Keras' Rescaling) makes
                images = images * rescaling[0] + rescaling[1]
            if images.ndim < 3 or images.ndim <= self.channel:
                continue  # tabular features (batch, features) are not images: not judged
            judged += 1
            if not np.isfinite(images).all():
                return fire_nonfinite(self, [name], "the input")
            channel = self._channel_axis(images.shape)
            axes = tuple(a for a in range(images.ndim) if a != channel)
            low, high = self._ranges.get(name, (np.inf, -np.inf))
            self._ranges[name] = (min(low, float(images.min())), max(high, float(images.max())))
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
        low, high = self._ranges[name]
        rescaled = " rescaled by the model's first layer" if self._rescaling() is not None else ""
        if low >= -CONVENTION and high <= CONVENTION:
            self.explain(
                f"channel {c} of {name} has mean {mean:.3g} over {self._samples[name]} images"
                f"{rescaled}, "
                f"every value within [{low:.3g}, {high:.3g}]: scaled to [0, 1] or [-1, 1], as "
                "images are normalised",
                tensors=[name],
            )
            return False
        fired = abs(mean) > self.threshold_mean
        near = fired and abs(mean) <= max(FAR_MEAN, self.threshold_mean)
        extra: dict[str, Any] = {}
        if near:  # within order 1: evidence where harm is seen, not a fault on its own
            extra = {"severity": Severity.WARNING, "needs_harm": True}
        self.explain(
            f"channel {c} of {name} has mean {mean:.3g} over {self._samples[name]} images"
            f"{rescaled} "
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

    def _channel_axis(self, shape: tuple[int, ...]) -> int:
        """``channel``, or the last axis of a channels-last batch of images (see the class)."""
        if (
            self.channel == 1
            and len(shape) == 4
            and shape[-1] <= MOST_CHANNELS
            and shape[1] > shape[-1]
        ):
            return len(shape) - 1
        return self.channel
