"""A straight line through a model's inputs: the least-squares fit of its training targets on
the model's own input, the baseline any network trained on those inputs should at least match
(AccuracyAtChance judges a last evaluation pass against it). A regression's line fits its
targets; a classifier's fits the training labels one-hot and answers the class it scores
highest (the least-squares linear discriminant)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tensortap.rules.builtin._chance import balanced, paired_z

#: inputs wider than this are not fitted (the sums grow with the square of the width)
MAX_FEATURES = 256
#: training rows needed per coefficient before the fit is trusted (fewer: it fits the noise)
ROWS_PER_COEFFICIENT = 10
#: a fit worth matching: it explains at least this share of the targets' variance (a
#: classifier's line: it gets at least this share of the way from chance to perfect)
MIN_R2 = 0.2
#: a model that explains under this share of what the line explains fits worse than it (the
#: development split's healthy runs: 0.81 of it at least, over 95 tabular ones; a network fed
#: features only centred, each in its own units: 0.61)
SHARE = 0.7
#: classes a classifier's line fits at most (one column of sums each)
MAX_CLASSES = 100


@dataclass(frozen=True)
class AgainstLine:
    """A pass's model against the line on the same samples (an underfit where :meth:`under`:
    the model explains less than ``SHARE`` of what the line explains)."""

    #: the model's R^2 and the line's, on the same pass, against the training targets' mean (a
    #: classifier's: balanced accuracy's share of the way from chance to perfect)
    model: float
    line: float
    #: how far the line's squared error is below the model's, in standard errors (a
    #: classifier's: its share of samples right above the model's)
    z: float
    #: the training rows the line was fitted on, and the features
    rows: int
    features: int
    #: a classifier's (the line answers the class it scores highest), or a regression's
    classifier: bool = False

    def under(self, z_threshold: float) -> bool:
        """Whether the model fits worse than the line: the line worth matching (``MIN_R2``),
        the model under ``SHARE`` of it, the line ``z_threshold`` standard errors better."""
        return self.line >= MIN_R2 and self.model < SHARE * self.line and self.z >= z_threshold

    def scored(self) -> str:
        """The line's score against the model's, in words."""
        if self.classifier:
            return (
                f"{self.line:.0%} of the way from chance to perfect (balanced accuracy) "
                f"against the model's {self.model:.0%}"
            )
        return f"R^2 {self.line:.3f} against the model's {self.model:.3f}"

    def fitted(self) -> str:
        """What the line is, in words."""
        what = "a linear classifier" if self.classifier else "a straight line"
        return (
            f"{what} through the model's inputs (a least-squares fit on {self.rows} training "
            f"rows of the {self.features} input features)"
        )


class _Sums:
    """``[x 1]^T [x 1]`` and ``[x 1]^T t`` added step by step, for targets of any number of
    columns (a classifier's one-hot columns grow with the largest class seen); memory bounded
    by the input's width, not the rows seen."""

    def __init__(self) -> None:
        self.gram: np.ndarray | None = None
        self.cross: np.ndarray | None = None
        self.rows = 0
        self.off = False  # an input that is not one matrix of one width: no fit

    def add(self, x: np.ndarray, t: np.ndarray) -> None:
        """Add rows ``x`` (N, F) and their targets ``t`` (N, C), float64 and finite."""
        a = _with_intercept(x)
        gram, cross = a.T @ a, a.T @ t
        if self.gram is None or self.cross is None:
            self.gram, self.cross = gram, cross
        elif self.gram.shape != gram.shape:
            self.off = True
            return
        else:
            self.gram += gram
            wide = max(self.cross.shape[1], cross.shape[1])
            self.cross = _columns(self.cross, wide)
            self.cross += _columns(cross, wide)
        self.rows += x.shape[0]

    def coefficients(self, features: int) -> np.ndarray | None:
        """The least-squares coefficients (F + 1, C) for inputs of ``features`` columns, or
        None: no fit, another width, or under ``ROWS_PER_COEFFICIENT`` rows a coefficient."""
        if self.off or self.gram is None or self.cross is None:
            return None
        width = self.gram.shape[0]
        if features + 1 != width or self.rows < ROWS_PER_COEFFICIENT * width:
            return None
        return _solve(self.gram, self.cross)


def _columns(m: np.ndarray, wide: int) -> np.ndarray:
    return m if m.shape[1] == wide else np.pad(m, ((0, 0), (0, wide - m.shape[1])))


def _features(x: np.ndarray) -> np.ndarray | None:
    """``x`` as float64 rows (N, F), or None where it is not a matrix of finite floating-point
    features no wider than ``MAX_FEATURES``."""
    if x.ndim != 2 or x.dtype.kind != "f" or not x.shape[0] or x.shape[1] > MAX_FEATURES:
        return None
    x64 = x.astype(np.float64)
    return x64 if np.isfinite(x64).all() else None


class LinearFit:
    """A regression's line: the sums of a least-squares fit (with an intercept) of targets on
    a matrix input, added step by step."""

    def __init__(self) -> None:
        self._sums = _Sums()

    @staticmethod
    def rows_of(x: np.ndarray, t: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
        """(x, t) as float64 rows (N, F) and (N, 1), or None where ``x`` is not a matrix of
        floating-point features with one floating-point target a row. Several targets a row
        are not fitted: a line reproduces an autoencoder's input exactly, which its bottleneck
        is there not to do."""
        x64 = _features(x)
        if x64 is None or t.size != x64.shape[0] or t.dtype.kind != "f":
            return None
        t64 = t.astype(np.float64).reshape(x64.shape[0], 1)
        return (x64, t64) if np.isfinite(t64).all() else None

    def add(self, x: np.ndarray, t: np.ndarray) -> None:
        """Add a training step's inputs and targets (ignored, and the fit given up, where they
        are not rows of one matrix input of the width seen so far)."""
        if self._sums.off:
            return
        found = self.rows_of(x, t)
        if found is None:
            self._sums.off = True
            return
        self._sums.add(*found)

    def judge(
        self, x: np.ndarray, t: np.ndarray, predicted: np.ndarray, mean: float, z_threshold: float
    ) -> AgainstLine | None:
        """The pass's ``predicted`` targets against the line's on the same rows: an AgainstLine
        where the line explains at least ``MIN_R2`` of the targets' variance (about ``mean``,
        the training targets') and the model under ``SHARE`` of what the line explains, the
        line's squared error ``z_threshold`` standard errors below the model's; else None
        (also where the fit has too few training rows, or none)."""
        found = self.compare(x, t, predicted, mean)
        return found if found is not None and found.under(z_threshold) else None

    def compare(
        self, x: np.ndarray, t: np.ndarray, predicted: np.ndarray, mean: float
    ) -> AgainstLine | None:
        """The model's and the line's R^2 on the pass, whatever they are (None: no fit, too
        few training rows, or rows that do not match)."""
        found = self.rows_of(x, t)
        if found is None or predicted.size != found[1].size:
            return None
        coefficients = self._sums.coefficients(found[0].shape[1])
        if coefficients is None:
            return None
        target = found[1].ravel()
        line = (_with_intercept(found[0]) @ coefficients).ravel()
        model = predicted.astype(np.float64).ravel()
        if not np.isfinite(model).all():
            return None
        constant = float(np.mean((target - mean) ** 2))
        if constant <= 0 or target.size < 2:
            return None
        model_err, line_err = (target - model) ** 2, (target - line) ** 2
        r2_model = 1 - float(model_err.mean()) / constant
        r2_line = 1 - float(line_err.mean()) / constant
        z = paired_z(model_err - line_err)
        return AgainstLine(r2_model, r2_line, z, self._sums.rows, found[0].shape[1])


class LinearClassifier:
    """A classifier's line: the training labels fitted one-hot on the model's matrix input by
    least squares, answering the class it scores highest. Invariant to each feature's scale
    and offset, so features on their own scales, which slow or stall a network's training,
    leave it as good as on standardised ones; fitted on the labels the model was trained on,
    so shuffled labels leave it at chance too."""

    def __init__(self) -> None:
        self._sums = _Sums()

    @property
    def fitting(self) -> bool:
        """Whether the fit goes on (no input yet that was not a matrix of features)."""
        return not self._sums.off

    def add(self, x: np.ndarray, labels: np.ndarray) -> None:
        """Add a training step's inputs and class ids (the fit given up where they are not
        rows of one matrix input, one class id in [0, ``MAX_CLASSES``) a row)."""
        if self._sums.off:
            return
        x64 = _features(x)
        if (
            x64 is None
            or labels.shape != (x64.shape[0],)
            or labels.min() < 0
            or labels.max() >= MAX_CLASSES
        ):
            self._sums.off = True
            return
        onehot = np.zeros((labels.size, int(labels.max()) + 1))
        onehot[np.arange(labels.size), labels] = 1.0
        self._sums.add(x64, onehot)

    def judge(
        self, x: np.ndarray, labels: np.ndarray, predicted: np.ndarray, z_threshold: float
    ) -> AgainstLine | None:
        """The pass's ``predicted`` classes against the line's on the same rows: an AgainstLine
        where the line gets at least ``MIN_R2`` of the way from chance to perfect (balanced
        accuracy) and the model under ``SHARE`` of the line's way, with the line's share of
        samples right ``z_threshold`` standard errors above the model's; else None."""
        found = self.compare(x, labels, predicted)
        return found if found is not None and found.under(z_threshold) else None

    def compare(
        self, x: np.ndarray, labels: np.ndarray, predicted: np.ndarray
    ) -> AgainstLine | None:
        """The model's and the line's way from chance to perfect on the pass, whatever they
        are (None: no fit, too few training rows, or rows that do not match)."""
        x64 = _features(x)
        if x64 is None or labels.shape != (x64.shape[0],) or predicted.shape != labels.shape:
            return None
        coefficients = self._sums.coefficients(x64.shape[1])
        if coefficients is None or labels.size < 2:
            return None
        line = np.argmax(_with_intercept(x64) @ coefficients, axis=1)
        k = max(int(np.unique(labels).size), 2)

        def way(answered: np.ndarray) -> float:
            return (balanced(labels, answered)[0] - 1 / k) / (1 - 1 / k)

        model_way, line_way = way(predicted), way(line)
        z = paired_z((line == labels).astype(np.float64) - (predicted == labels))
        return AgainstLine(
            model_way,
            line_way,
            z,
            self._sums.rows,
            x64.shape[1],
            classifier=True,
        )


def _with_intercept(x: np.ndarray) -> np.ndarray:
    return np.hstack([x, np.ones((x.shape[0], 1))])


def _solve(gram: np.ndarray, cross: np.ndarray) -> np.ndarray:
    """The least-squares coefficients from the sums, solved on the features scaled to one size
    (raw features of very different scales leave the sums ill-conditioned)."""
    scale = np.sqrt(np.maximum(np.diag(gram), 1e-300))
    solved: np.ndarray = np.linalg.lstsq(
        gram / np.outer(scale, scale), cross / scale[:, None], rcond=None
    )[0]
    return solved / scale[:, None]
