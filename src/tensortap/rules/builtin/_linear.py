"""A straight line through a regression's inputs: the least-squares fit of its training targets
on the model's own input, the baseline any network trained on those inputs should at least
match (AccuracyAtChance judges a regression's last evaluation pass against it)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tensortap.rules.builtin._chance import paired_z

#: inputs wider than this are not fitted (the sums grow with the square of the width)
MAX_FEATURES = 256
#: training rows needed per coefficient before the fit is trusted (fewer: it fits the noise)
ROWS_PER_COEFFICIENT = 10
#: a fit worth matching: it explains at least this share of the targets' variance
MIN_R2 = 0.2
#: a model that explains under this share of what the line explains fits worse than it
SHARE = 0.5


@dataclass(frozen=True)
class Underfit:
    """A pass on which the model explains less than ``SHARE`` of what the line explains."""

    #: the model's R^2 and the line's, on the same pass, against the training targets' mean
    model: float
    line: float
    #: how far the line's squared error is below the model's, in standard errors
    z: float
    #: the training rows the line was fitted on, and the features
    rows: int
    features: int


class LinearFit:
    """The sums of a least-squares fit (with an intercept) of targets on a matrix input, added
    step by step; memory bounded by the input's width, not the rows seen."""

    def __init__(self) -> None:
        self._gram: np.ndarray | None = None  # [x 1]^T [x 1]
        self._cross: np.ndarray | None = None  # [x 1]^T t
        self._rows = 0
        self._off = False  # an input that is not one matrix of one width: no fit

    @staticmethod
    def rows_of(x: np.ndarray, t: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
        """(x, t) as float64 rows (N, F) and (N, 1), or None where ``x`` is not a matrix of
        floating-point features with one floating-point target a row. Several targets a row
        are not fitted: a line reproduces an autoencoder's input exactly, which its bottleneck
        is there not to do."""
        if x.ndim != 2 or x.dtype.kind != "f" or not x.shape[0] or x.shape[1] > MAX_FEATURES:
            return None
        n = x.shape[0]
        if t.size != n or t.dtype.kind != "f":
            return None
        x64, t64 = x.astype(np.float64), t.astype(np.float64).reshape(n, -1)
        if not (np.isfinite(x64).all() and np.isfinite(t64).all()):
            return None
        return x64, t64

    def add(self, x: np.ndarray, t: np.ndarray) -> None:
        """Add a training step's inputs and targets (ignored, and the fit given up, where they
        are not rows of one matrix input of the width seen so far)."""
        if self._off:
            return
        found = self.rows_of(x, t)
        if found is None:
            self._off = True
            return
        a = _with_intercept(found[0])
        gram, cross = a.T @ a, a.T @ found[1]
        if self._gram is None or self._cross is None:
            self._gram, self._cross = gram, cross
        elif self._gram.shape != gram.shape or self._cross.shape != cross.shape:
            self._off = True
            return
        else:
            self._gram += gram
            self._cross += cross
        self._rows += found[0].shape[0]

    def judge(
        self, x: np.ndarray, t: np.ndarray, predicted: np.ndarray, mean: float, z_threshold: float
    ) -> Underfit | None:
        """The pass's ``predicted`` targets against the line's on the same rows: an Underfit
        where the line explains at least ``MIN_R2`` of the targets' variance (about ``mean``,
        the training targets') and the model under ``SHARE`` of what the line explains, the
        line's squared error ``z_threshold`` standard errors below the model's; else None
        (also where the fit has too few training rows, or none)."""
        if self._off or self._gram is None or self._cross is None:
            return None
        width = self._gram.shape[0]
        if self._rows < ROWS_PER_COEFFICIENT * width:
            return None
        found = self.rows_of(x, t)
        if found is None or predicted.size != found[1].size or found[0].shape[1] + 1 != width:
            return None
        target = found[1].ravel()
        line = (_with_intercept(found[0]) @ _solve(self._gram, self._cross)).ravel()
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
        if r2_line < MIN_R2 or r2_model >= SHARE * r2_line or z < z_threshold:
            return None
        return Underfit(r2_model, r2_line, z, self._rows, width - 1)


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
