"""UnnormalisedInput: the model's inputs are far from order 1 (raw pixels, raw tabular units)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from tensortap.rules._finding import Severity
from tensortap.rules._rule import Rule
from tensortap.rules.builtin._common import (
    NOT_TRAINING,
    fire_nonfinite,
    step_mode,
    training_step,
)
from tensortap.rules.builtin._samples import (
    ConfigFact,
    input_rescaling,
    model_input,
    normalised_in_model,
    raw_input_reaches,
)

#: Inputs small everywhere: a root mean square below this, with no value reaching WEAK_LARGEST.
WEAK_RMS, WEAK_LARGEST = 0.1, 0.5
#: Inputs nearly constant: a standard deviation below this share of their root mean square.
FLAT_SHARE = 0.05
#: Features far from centred: the median feature's standard deviation below this share of its
#: root mean square (standardised features: 1; the healthy runs of the development split: 0.66
#: at least; raw diabetes rows scaled to unit length: 0.17).
OFFSET_SHARE = 0.4
#: Features whose scales are two orders of magnitude apart (largest standard deviation over the
#: median's, among dense columns): a problem on its own, not evidence that needs harm. A first
#: weight layer gives every input the same scale of weights, so a feature 100 times narrower
#: than the widest brings 1/10,000 of its variance to every unit, and plain SGD moves its
#: weights 100 times less: the model sees the widest feature alone. Standardised features beside
#: binary ones spread 3 at most (a flag set in 1% of rows: 10); raw breast cancer measurements
#: scaled to unit rows or divided by their largest value spread 300 to 8,000.
DOMINATED_SPREAD = 100.0
#: A column counts as dense when it is non-zero in at least this share of the rows seen: a rare
#: flag or one-hot column is narrow because it is sparse, not because of its units, so it never
#: sets the median that DOMINATED_SPREAD is judged against.
DENSE_SHARE = 0.5
#: Features that barely vary around their own means: the input's standard deviation about each
#: feature's mean under this share of its root mean square (over 99% of its mean square a fixed
#: offset, the same for every sample): a problem on its own. Every unit of a first weight layer
#: then sees 99% the same pre-activation whatever the sample, and SGD spends its steps on the
#: offset. Standardised features: 1; features scaled to [0, 1] by their range 0.3 to 0.55; images
#: scaled to [0, 1] about 0.6; raw diabetes measurements scaled to unit rows 0.13 (evidence, by
#: OFFSET_SHARE); their logarithms, or rows standardised across their features, 0.05 to 0.1.
CONSTANT_SHARE = 0.1


class UnnormalisedInput(Rule):
    """Accumulates the root mean square and the largest absolute value of the model's input
    over the TRAIN steps seen; once ``threshold_samples`` samples were seen, fires when the
    root mean square exceeds ``threshold_rms``, or when no value reached ``threshold_small``.

    Normalised inputs (standardised features, images scaled to [0, 1] or standardised) have a
    root mean square of about 1; raw pixels (0-255: ~120) or features in their own units
    (thousands) are far above it, and a network's first layers saturate or its first updates
    are huge. The default, 5, is over 3x the largest value among the 110 healthy runs of the
    generated benchmark's development split (all at most 1.6), and under the smallest among
    its unnormalised ones (raw 0-16 digits, 7.7). The input is the first floating-point tensor
    of the ``inputs`` collection saved at a step (forward order: the model's own input);
    integer inputs (token ids) are not judged. Inputs holding NaN or inf are a problem.

    Inputs far *below* order 1 are as wrong: images divided by 255 twice (all under 0.004), or
    features in units 1000x too large, give a first layer whose output is its bias alone and
    gradients that barely reach its weights. ``threshold_small``, 0.02, is judged on the
    largest absolute value, so sparse inputs (one-hot words, mostly zeros) are not taken for
    small ones; a healthy run of the development split has inputs reaching 1 or more.

    Tabular features left on their own scales show a third way: the input is a matrix (N, F)
    whose columns' standard deviations differ by ``threshold_spread`` (20) times or more,
    largest over median (rows scaled to unit length, the whole matrix divided by its largest
    value, features centred but not scaled). The development split's healthy runs spread 2.3 at
    most. A mix of scales can be harmless (binary and continuous features side by side), so
    this finding is evidence that needs harm (``details["needs_harm"]``): the diagnosis makes it
    a problem only where the run is harmed in a way unnormalised inputs explain. The same holds
    for features far from centred: each varies little around a large offset (the median
    feature's standard deviation under ``OFFSET_SHARE`` of its root mean square: raw
    measurements such as years or blood values, rows scaled to unit length), so the first
    layer sees mostly a constant. Scales two orders of magnitude apart (``DOMINATED_SPREAD``,
    among the dense columns: ``DENSE_SHARE``) are a problem on their own: the first layer sees
    the widest features alone, whether or not a rule sees the harm; so are features that
    barely vary around their own means (``CONSTANT_SHARE``: over 99% of the input's mean square
    the same offset for every sample).
    """

    collections_needed = ("inputs",)

    @classmethod
    def check_values(cls, params: Mapping[str, Any]) -> None:
        threshold_rms = params["threshold_rms"]
        threshold_samples = params["threshold_samples"]
        cls.check_param("threshold_rms", threshold_rms, threshold_rms > 0, "a number > 0")
        cls.check_param(
            "threshold_samples", threshold_samples, threshold_samples >= 1, "an integer >= 1"
        )
        threshold_small = params["threshold_small"]
        cls.check_param("threshold_small", threshold_small, threshold_small >= 0, "a number >= 0")
        threshold_spread = params["threshold_spread"]
        cls.check_param("threshold_spread", threshold_spread, threshold_spread > 1, "a number > 1")

    def __init__(
        self,
        base_trial: Any,
        threshold_rms: float = 5.0,
        threshold_samples: int = 64,
        threshold_small: float = 0.02,
        threshold_spread: float = 20.0,
    ) -> None:
        super().__init__(base_trial)
        self.threshold_rms = threshold_rms
        self.threshold_samples = threshold_samples
        self.threshold_small = threshold_small
        self.threshold_spread = threshold_spread
        # per column of a matrix input (N, F): sums, sums of squares and rows (None: not a
        # matrix), and how many of its values were not zero
        self._columns: tuple[np.ndarray, np.ndarray, int] | None = None
        self._nonzero: np.ndarray | None = None
        self._matrix = True
        self._largest = 0.0
        self._squares = 0.0
        self._sum = 0.0
        self._values = 0
        self._samples = 0
        self._name: str | None = None
        # the model's own normalisation
        self._normaliser = ConfigFact(base_trial, normalised_in_model)
        self._rescaling = ConfigFact(base_trial, input_rescaling)
        self._rescaled = ""  # how the model's first layer rescales the input, said after its name
        # the layer the raw input reaches past the model's normaliser ("": it does not; None:
        # not looked at yet)
        self._bypassed: str | None = None

    def _input(self, step: int) -> tuple[str, np.ndarray] | None:
        found = model_input(self.base_trial, step)
        if found is None:
            return None
        name, value = found
        if np.issubdtype(value.dtype, np.floating) and value.ndim >= 1 and value.size:
            return name, value
        return None  # the model's input is not floating-point (token ids): not judged

    def _input_finding(self, message: str, **fields: Any) -> None:
        """Explain a finding about the input this rule watches (``unnormalised_input``)."""
        tensors = [self._name] if self._name is not None else []  # set before any finding
        self.explain(message, tensors, cause="unnormalised_input", **fields)

    def invoke_at_step(self, step: int) -> bool:
        if training_step(self.base_trial, step) is None:
            mode = step_mode(self.base_trial, step)[0]
            raise self.skip(NOT_TRAINING.format(mode=mode.name))
        found = self._input(step)
        if found is None:
            raise self.skip("no floating-point model input saved at this step")
        name, value = found
        if not np.isfinite(value).all():
            return fire_nonfinite(self, [name], "the input")
        self._name = self._name or name
        x = value.astype(np.float64)
        rescaling = self._rescaling()
        if rescaling is not None:  # what the model's first layer (Keras' Rescaling) makes of it
            scale, shift = rescaling
            x = x * scale + shift
            self._rescaled = (
                f" rescaled by the model's first layer to x * {scale:.4g} + {shift:.4g}"
            )
        self._squares += float(np.square(x).sum())
        self._sum += float(x.sum())
        self._largest = max(self._largest, float(np.abs(x).max()))
        self._values += x.size
        self._samples += x.shape[0] if x.ndim > 1 else 1
        self._add_columns(x)
        if self._samples < self.threshold_samples:
            raise self.skip(
                f"{self._samples} of {self.threshold_samples} input samples seen; not judged yet"
            )
        rms = math.sqrt(self._squares / self._values)
        normaliser = self._normaliser()
        if normaliser is not None and self._bypassed is None and value.ndim == 2:
            self._bypassed = raw_input_reaches(self.base_trial, step, value) or ""
        if normaliser is not None and self._bypassed:
            normaliser = None  # the raw input reaches a weight layer: judged as the input
            self._rescaled = (
                f" (the model's first layer normalises, but {self._bypassed}'s pre-activation "
                "is this raw input through its kernel: the normalisation is bypassed)"
            )
        if normaliser is not None:
            self.explain(
                f"{normaliser}: the raw "
                f"input {self._name} (root mean square {rms:.3g}) is what it expects",
                tensors=[self._name],
            )
            return False
        if self._largest < self.threshold_small:
            self._input_finding(
                f"the input {self._name} never reaches {self.threshold_small:g} in absolute "
                f"value over {self._samples} samples{self._rescaled} (largest "
                f"{self._largest:.3g}, root mean square {rms:.3g}): inputs this small leave the "
                "first layer's output to its bias and its weights' gradients near zero; "
                "normalised inputs are about 1 (an image scaled twice, or features in units far "
                "too large?)",
                value=self._largest,
                threshold=self.threshold_small,
                direction="small",
            )
            return True
        fired = rms > self.threshold_rms
        dominated = self._spread(dense=True)
        if not fired and dominated is not None and dominated[0] >= DOMINATED_SPREAD:
            ratio, column, top, median, features = dominated
            self._input_finding(
                f"the input {self._name}'s features are on scales two orders of magnitude "
                f"apart: the standard deviation of feature {column} ({top:.3g}) is {ratio:.3g} "
                f"times the median feature's ({median:.3g}, of {features} dense features) over "
                f"{self._samples} samples{self._rescaled} (from {DOMINATED_SPREAD:g}), so the "
                "first layer sees the widest features alone; standardise each feature with the "
                "training set's mean and standard deviation (rows scaled to unit length, or a "
                "matrix divided by its largest value, keep each feature's units)",
                value=ratio,
                threshold=DOMINATED_SPREAD,
                direction="dominated",
            )
            return True
        constant = self._varying_share()
        if not fired and constant is not None and constant[0] < CONSTANT_SHARE:
            share, features = constant
            self._input_finding(
                f"the input {self._name}'s {features} features barely vary around their own "
                f"means: their standard deviation is {share:.3g} of their root mean square over "
                f"{self._samples} samples{self._rescaled} (under {CONSTANT_SHARE:g}; "
                "standardised features: 1), so over 99% of what the first layer sees is the "
                "same for every sample; standardise each feature with the training set's mean "
                "and standard deviation (raw measurements on large offsets, logarithms of them, "
                "or rows standardised across their features keep it so)",
                value=share,
                threshold=CONSTANT_SHARE,
                direction="constant",
            )
            return True
        weak = self._weak(rms)
        if not fired and weak is not None:
            message, measured, limit = weak
            self._input_finding(
                f"the input {self._name} {message} over {self._samples} samples{self._rescaled}: "
                "normalised inputs are about 1 and vary about as much (an image divided twice, "
                "standardised with another scale's statistics, or divided by a per-sample sum?)",
                value=measured,
                threshold=limit,
                severity=Severity.WARNING,  # a problem where the diagnosis finds harm it explains
                direction="weak",
                needs_harm=True,
            )
            return True
        spread = self._spread()
        if not fired and spread is not None and spread[0] >= self.threshold_spread:
            ratio, column, top, median, features = spread
            self._input_finding(
                f"the input {self._name}'s {features} features are on different scales: the "
                f"standard deviation of feature {column} ({top:.3g}) is {ratio:.3g} times the "
                f"median feature's ({median:.3g}) over {self._samples} samples{self._rescaled} "
                f"(threshold "
                f"{self.threshold_spread:g}); standardise each feature with the training set's "
                "mean and standard deviation (rows scaled to unit length, or a matrix divided "
                "by its largest value, keep each feature's units)",
                value=ratio,
                threshold=self.threshold_spread,
                severity=Severity.WARNING,  # a problem where the diagnosis finds harm it explains
                direction="spread",
                needs_harm=True,
            )
            return True
        offset = self._offset()
        if not fired and offset is not None and offset[0] < OFFSET_SHARE:
            share, features = offset
            self._input_finding(
                f"the input {self._name}'s {features} features are far from centred: the "
                f"median feature's standard deviation is {share:.3g} of its root mean square "
                f"over {self._samples} samples{self._rescaled} (under {OFFSET_SHARE:g}; "
                "standardised features: 1), so each varies little around a large offset; "
                "standardise each feature with the training set's mean and standard deviation",
                value=share,
                threshold=OFFSET_SHARE,
                severity=Severity.WARNING,  # a problem where the diagnosis finds harm it explains
                direction="offset",
                needs_harm=True,
            )
            return True
        self._input_finding(
            f"the input {self._name} has a root mean square of {rms:.3g} over {self._samples} "
            f"samples{self._rescaled} ({'above' if fired else 'within'} {self.threshold_rms:g}; "
            f"normalised inputs are about 1{': scale or standardise them' if fired else ''})",
            value=rms,
            threshold=self.threshold_rms,
        )
        return fired

    def _weak(self, rms: float) -> tuple[str, float, float] | None:
        """Inputs that carry little signal without being far too small: small everywhere (a
        root mean square under ``WEAK_RMS`` with no value reaching ``WEAK_LARGEST``: one-hot
        inputs reach 1), or nearly constant (their standard deviation under ``FLAT_SHARE`` of
        their root mean square)."""
        if rms < WEAK_RMS and self._largest < WEAK_LARGEST:
            return (
                f"is small everywhere (root mean square {rms:.3g}, largest {self._largest:.3g})",
                rms,
                WEAK_RMS,
            )
        mean = self._sum / self._values
        std = math.sqrt(max(self._squares / self._values - mean * mean, 0.0))
        if rms > 0 and std < FLAT_SHARE * rms:
            return (
                f"barely varies (standard deviation {std:.3g} around {mean:.3g}, "
                f"{std / rms:.3g} of its root mean square)",
                std / rms,
                FLAT_SHARE,
            )
        return None

    def _add_columns(self, x: np.ndarray) -> None:
        """Add a matrix input's rows to the per-column sums (any other shape, or a change of
        width, ends them)."""
        if not self._matrix:
            return
        if x.ndim != 2 or x.shape[1] < 2:
            self._matrix, self._columns, self._nonzero = False, None, None
            return
        if self._columns is None:
            width = x.shape[1]
            self._columns = (np.zeros(width), np.zeros(width), 0)
            self._nonzero = np.zeros(width)
        sums, squares, rows = self._columns
        if sums.shape[0] != x.shape[1] or self._nonzero is None:
            self._matrix, self._columns, self._nonzero = False, None, None
            return
        self._columns = (sums + x.sum(0), squares + np.square(x).sum(0), rows + x.shape[0])
        self._nonzero = self._nonzero + np.count_nonzero(x, axis=0)

    def _varying_share(self) -> tuple[float, int] | None:
        """Of a matrix input: its standard deviation about each column's mean over its root
        mean square (all columns together: what a first weight layer sees vary), and how many
        columns vary."""
        if self._columns is None:
            return None
        sums, squares, rows = self._columns
        mean = sums / rows
        variance = np.maximum(squares / rows - mean**2, 0.0)
        total = float(squares.sum() / rows)
        varying = int(np.count_nonzero(variance > 1e-24 * max(float(variance.max()), 1e-300)))
        if varying < 2 or not total > 0:
            return None
        return math.sqrt(float(variance.sum()) / total), varying

    def _offset(self) -> tuple[float, int] | None:
        """Of a matrix input: the median over its varying columns of each column's standard
        deviation over its root mean square, and how many columns vary."""
        if self._columns is None:
            return None
        sums, squares, rows = self._columns
        mean = sums / rows
        std = np.sqrt(np.maximum(squares / rows - mean**2, 0.0))
        rms = np.sqrt(squares / rows)
        varying = np.flatnonzero(std > 1e-12 * max(float(std.max()), 1e-300))
        if varying.size < 2:
            return None
        return float(np.median(std[varying] / rms[varying])), int(varying.size)

    def _spread(self, dense: bool = False) -> tuple[float, int, float, float, int] | None:
        """Of a matrix input: the largest column's standard deviation over the median's (of the
        columns that vary; ``dense``: of those non-zero in ``DENSE_SHARE`` of the rows or
        more), which column, both values, and how many columns count."""
        if self._columns is None:
            return None
        sums, squares, rows = self._columns
        mean = sums / rows
        std = np.sqrt(np.maximum(squares / rows - mean**2, 0.0))
        counted = std > 1e-12 * max(float(std.max()), 1e-300)
        if dense and self._nonzero is not None:
            counted &= self._nonzero >= DENSE_SHARE * rows
        varying = np.flatnonzero(counted)
        if varying.size < 2:
            return None
        median = float(np.median(std[varying]))
        column = int(varying[np.argmax(std[varying])])
        top = float(std[column])
        return top / median, column, top, median, int(varying.size)
