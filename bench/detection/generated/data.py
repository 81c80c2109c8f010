"""The data a draw trains on: scikit-learn's bundled sets or synthetic, split and normalised.

A healthy pipeline normalises with the training split's statistics (tabular features and
sequences per feature, images scaled to [0, 1] then by one global mean and std, regression
targets standardised). A fault may change the pipeline at the places it names (see
:class:`~bench.detection.generated.faults.Fault`).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING

import numpy as np
import torch

from bench.detection.generated.space import VAL_FRACTION, Draw

if TYPE_CHECKING:
    from bench.detection.generated.faults import Fault


@dataclass(frozen=True)
class Data:
    """Train and validation tensors. Classification targets are int64 class indices;
    regression targets float32 (N, 1); an autoencoder's targets are its inputs."""

    x: torch.Tensor
    y: torch.Tensor
    x_val: torch.Tensor
    y_val: torch.Tensor
    n_classes: int  # 0 for regression and autoencoders
    class_weights: torch.Tensor | None  # set when the draw handles an imbalance

    @property
    def in_features(self) -> int:
        return int(self.x.shape[-1])


@cache
def _bundled(task: str, raw: bool = False) -> tuple[np.ndarray, np.ndarray]:
    from sklearn import datasets

    if task in ("digits", "digits_images"):
        x, y = datasets.load_digits(return_X_y=True)
    elif task == "iris":
        x, y = datasets.load_iris(return_X_y=True)
    elif task == "wine":
        x, y = datasets.load_wine(return_X_y=True)
    elif task == "breast_cancer":
        x, y = datasets.load_breast_cancer(return_X_y=True)
    elif task == "diabetes":
        x, y = datasets.load_diabetes(return_X_y=True, scaled=not raw)
    else:
        raise ValueError(f"not a bundled set: {task}")
    return x.astype(np.float64), y


def _synthetic_classification(d: Draw, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """make_classification's recipe: Gaussian clusters around class centres in an informative
    subspace, mixed into more features, some pure noise, a few labels flipped."""
    n, c = d.n_samples, d.n_classes
    informative = max(2, d.n_features // 2)
    y = rng.integers(0, c, n)
    centres = rng.normal(0.0, 1.6, (c, informative))
    z = centres[y] + rng.normal(0.0, 1.0, (n, informative))
    mix = rng.normal(0.0, 1.0, (informative, d.n_features - informative))
    x = np.concatenate([z, z @ mix / np.sqrt(informative)], axis=1)
    x[:, informative + (d.n_features - informative) // 2 :] = rng.normal(
        0.0, 1.0, (n, d.n_features - informative - (d.n_features - informative) // 2)
    )
    x = x * rng.uniform(0.5, 3.0, d.n_features) + rng.normal(0.0, 2.0, d.n_features)
    flip = rng.random(n) < d.label_noise
    y[flip] = rng.integers(0, c, int(flip.sum()))
    return x, y


def _synthetic_regression(d: Draw, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """A mostly linear target of correlated features, a mild non-linearity and noise."""
    n, f = d.n_samples, d.n_features
    base = rng.normal(0.0, 1.0, (n, f))
    x = base @ (np.eye(f) + 0.3 * rng.normal(0.0, 1.0, (f, f)))
    w = rng.normal(0.0, 1.0, f) * (rng.random(f) < 0.7)
    y = x @ w + 0.5 * np.sin(2.0 * x[:, 0]) * np.abs(w).sum() / f
    y = y + rng.normal(0.0, 0.3 * y.std() + 1e-3, n)
    x = x * rng.uniform(0.5, 3.0, f) + rng.normal(0.0, 2.0, f)
    return x, y


def _two_d(d: Draw, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's make_moons or make_circles (noise ``label_noise``), plus pure-noise
    features up to ``n_features``, each feature in its own units (scale and offset)."""
    from sklearn import datasets

    seed = int(rng.integers(2**31 - 1))
    if d.task == "moons":
        x, y = datasets.make_moons(d.n_samples, noise=d.label_noise, random_state=seed)
    else:
        x, y = datasets.make_circles(
            d.n_samples, noise=d.label_noise / 2, factor=0.5, random_state=seed
        )
    x = np.concatenate([x, rng.normal(0.0, 1.0, (d.n_samples, d.n_features - 2))], axis=1)
    x = x * rng.uniform(0.5, 3.0, d.n_features) + rng.normal(0.0, 2.0, d.n_features)
    return x, y.astype(np.int64)


def _heavy_tailed_regression(d: Draw, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """A target with interactions between pairs of features and Student-t noise (3 degrees of
    freedom: a few large errors), unlike ``synth_reg``'s mostly linear Gaussian one."""
    n, f = d.n_samples, d.n_features
    x = rng.normal(0.0, 1.0, (n, f))
    w = rng.normal(0.0, 1.0, f)
    pairs = rng.integers(0, f, (3, 2))
    y = x @ w + sum(x[:, i] * x[:, j] for i, j in pairs)
    y = y + 0.3 * y.std() * rng.standard_t(3, n)
    x = x * rng.uniform(0.5, 3.0, f) + rng.normal(0.0, 2.0, f)
    return x, y


def _sequences(d: Draw, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Random sequences (N, T, F) and a simple rule over them: the sign of channel 0's sum,
    the channel with the largest sum, or an exponential moving average of channel 0 at the end
    plus half channel 1's mean (regression)."""
    x = rng.normal(0.0, 1.0, (d.n_samples, d.seq_len, d.n_features))
    if d.seq_rule == "sign_sum":
        y = (x[:, :, 0].sum(axis=1) > 0).astype(np.int64)
    elif d.seq_rule == "argmax_sum":
        y = x[:, :, : min(3, d.n_features)].sum(axis=1).argmax(axis=1)
    else:
        ema = np.zeros(d.n_samples)
        for t in range(d.seq_len):
            ema = 0.7 * ema + 0.3 * x[:, t, 0]
        y = ema + 0.5 * x[:, :, min(1, d.n_features - 1)].mean(axis=1)
    return x, y


def raw_arrays(d: Draw, raw: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """The task's features and targets as loaded or generated, in a fixed shuffled order."""
    rng = np.random.default_rng([d.seed, 1])
    if d.task == "synth_cls":
        x, y = _synthetic_classification(d, rng)
    elif d.task == "synth_reg":
        x, y = _synthetic_regression(d, rng)
    elif d.task in ("seq_cls", "seq_reg"):
        x, y = _sequences(d, rng)
    elif d.task in ("moons", "circles"):
        x, y = _two_d(d, rng)
    elif d.task == "synth_reg_t":
        x, y = _heavy_tailed_regression(d, rng)
    else:
        x, y = _bundled(d.task, raw)
    order = rng.permutation(len(y))
    return x[order].astype(np.float64), y[order]


def standardise(x: np.ndarray, x_train: np.ndarray) -> np.ndarray:
    """Per-feature standardisation with the training split's statistics (a constant feature
    divides by 1, not by 0)."""
    axes = tuple(range(x_train.ndim - 1))
    mean, std = x_train.mean(axis=axes), x_train.std(axis=axes)
    return (x - mean) / np.where(std > 0, std, 1.0)


def n_classes_of(d: Draw, y: np.ndarray) -> int:
    if not d.classify:
        return 0
    return d.n_classes or int(y.max()) + 1


def subsample_minority(
    x: np.ndarray, y: np.ndarray, n_classes: int, keep: float, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Keep ``keep`` of the rows of the upper half of the classes (class 1 of two): an
    imbalanced data set."""
    minority = y >= max(1, n_classes // 2)
    kept = ~minority | (rng.random(len(y)) < keep)
    return x[kept], y[kept]


def load(d: Draw, fault: Fault) -> Data:
    """The draw's data, through the healthy pipeline with ``fault``'s changes."""
    raw_features = fault.wants_raw_features(d)
    x, y = raw_arrays(d, raw=raw_features and d.task == "diabetes")
    n_val = round(len(y) * VAL_FRACTION)
    x_tr, y_tr, x_va, y_va = x[n_val:], y[n_val:], x[:n_val], y[:n_val]
    classes = n_classes_of(d, y)
    rng = np.random.default_rng([d.seed, 2])
    if d.imbalance_keep < 1.0:  # the data is imbalanced (train and validation alike)
        x_tr, y_tr = subsample_minority(x_tr, y_tr, classes, d.imbalance_keep, rng)
        x_va, y_va = subsample_minority(x_va, y_va, classes, d.imbalance_keep, rng)
    x_tr, y_tr = fault.training_rows(x_tr, y_tr, d, classes, rng)

    x_tr, x_va = fault.before_normalising(x_tr, x_va, d, rng)
    if raw_features:
        pass
    elif d.task == "digits_images" or (d.task == "digits" and d.sigmoid_output):
        x_tr, x_va = x_tr / 16.0, x_va / 16.0  # pixels to [0, 1]
        if d.task == "digits_images":  # then one global mean and std, as for any images
            mean, std = x_tr.mean(), x_tr.std()
            x_tr, x_va = (x_tr - mean) / std, (x_va - mean) / std
    else:
        x_tr, x_va = standardise(x_tr, x_tr), standardise(x_va, x_tr)
    if d.task == "digits_images":
        x_tr, x_va = x_tr.reshape(-1, 1, 8, 8), x_va.reshape(-1, 1, 8, 8)
    x_tr, x_va = fault.after_normalising(x_tr, x_va, d, rng)

    if d.regression:
        mean, std = y_tr.mean(), y_tr.std()
        y_tr, y_va = (y_tr - mean) / std, (y_va - mean) / std
        y_tr, y_va = fault.regression_targets(y_tr, y_va, d)
        column = fault.target_as_column(d)
        targets = [torch.tensor(t, dtype=torch.float32) for t in (y_tr, y_va)]
        t_tr, t_va = (t[:, None] if column else t for t in targets)
    elif d.classify:
        t_tr, t_va = torch.tensor(y_tr, dtype=torch.int64), torch.tensor(y_va, dtype=torch.int64)
    else:  # an autoencoder: the target is the input
        t_tr, t_va = (torch.tensor(v, dtype=torch.float32) for v in (x_tr, x_va))
    weights = None
    if d.classify and d.imbalance_keep < 1.0 and fault.handles_imbalance():
        counts = np.bincount(y_tr, minlength=classes).astype(np.float64)
        weights = torch.tensor(len(y_tr) / (classes * np.maximum(counts, 1)), dtype=torch.float32)
    return Data(
        torch.tensor(x_tr, dtype=torch.float32),
        t_tr,
        torch.tensor(x_va, dtype=torch.float32),
        t_va,
        classes,
        weights,
    )
