"""Embeddings over time, as numbers (seed 004): a 2-D map of a layer's outputs at every saved
step, with each sample's label, to watch clusters form while a model trains (drawn by
``viz.plot_embeddings`` and the dashboard).

- :func:`embed`: PCA (NumPy, fast, the default) or t-SNE (scikit-learn) of one batch.
- :func:`embeddings_over_time`: one :class:`EmbeddingFrame` per saved step of a finished (or
  running) trial.
- :class:`LiveEmbeddings`: seed 004's loop. It follows a trial that is being written, in EVAL
  mode by default, yields a frame for each new step as it appears, skips steps where the tensors
  were not saved (:class:`~tensortap.exceptions.TensorUnavailableForStep`, listed in
  ``skipped``), and ends when training has ended and every step is read.

PCA components are sign-aligned from one step to the next, so the map does not flip between
frames; t-SNE is seeded (``random_state``) and starts from PCA, but its layout is only
comparable within a frame.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from tensortap.core._modes import ModeKeys
from tensortap.exceptions import InvalidConfigError, TensorUnavailable, TensorUnavailableForStep
from tensortap.trials._trial import Trial, create_trial

log = logging.getLogger(__name__)

METHODS = ("pca", "tsne")


@dataclass(frozen=True)
class EmbeddingFrame:
    """The 2-D embedding of one step: ``points`` (n, 2) and their ``labels`` (n,)."""

    step: int
    points: np.ndarray
    labels: np.ndarray


def _check_method(method: str) -> None:
    if method not in METHODS:
        raise InvalidConfigError(f"method must be one of {METHODS}; got {method!r}")


def _check(method: str, max_samples: int) -> None:
    _check_method(method)
    if isinstance(max_samples, bool) or not isinstance(max_samples, int) or max_samples < 3:
        raise InvalidConfigError(f"max_samples must be an int of 3 or more; got {max_samples!r}")


def embed(
    features: np.ndarray,
    method: str = "pca",
    random_state: int = 0,
    perplexity: float = 30.0,
    reference: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray | None]:
    """The (n, 2) embedding of ``features`` (n samples, any trailing shape), and for PCA its
    two components (pass them back as ``reference`` to keep the next frame's orientation)."""
    _check_method(method)
    x = np.asarray(features, dtype=np.float64).reshape(len(features), -1)
    x = np.where(np.isfinite(x), x, 0.0)
    if len(x) < 3:
        raise InvalidConfigError(f"an embedding needs at least 3 samples; got {len(x)}")
    if method == "tsne":
        try:
            from sklearn.manifold import TSNE
        except ImportError:  # pragma: no cover - scikit-learn comes with tensortap[viz]
            raise InvalidConfigError(
                "t-SNE needs scikit-learn: pip install 'tensortap[viz]'"
            ) from None
        tsne = TSNE(
            n_components=2,
            perplexity=min(perplexity, (len(x) - 1) / 3),
            init="pca",
            random_state=random_state,
        )
        return np.asarray(tsne.fit_transform(x), dtype=np.float64), None
    centred = x - x.mean(axis=0)
    _, _, vt = np.linalg.svd(centred, full_matrices=False)
    components = np.zeros((2, x.shape[1]))
    components[: min(2, len(vt))] = vt[:2]
    if reference is not None and reference.shape == components.shape:
        signs = np.where(np.sum(components * reference, axis=1) < 0, -1.0, 1.0)
        components *= signs[:, None]
    return centred @ components.T, components


def as_labels(value: np.ndarray, n: int, name: str) -> np.ndarray:
    """Class labels of ``n`` samples: from class ids, or the arg-max of one-hot rows or scores."""
    value = np.asarray(value)
    if value.ndim >= 2 and value.shape[0] == n and int(np.prod(value.shape[1:])) > 1:
        return np.asarray(np.argmax(value.reshape(n, -1), axis=1))
    labels = value.reshape(-1)
    if labels.size != n:
        raise InvalidConfigError(
            f"the label tensor {name} has {labels.size} values for {n} samples (shape "
            f"{value.shape}); give a tensor with one label, or one row of scores, per sample"
        )
    return labels.astype(np.int64) if np.all(np.mod(labels, 1) == 0) else labels


class _Embedder:
    """One step at a time, keeping the PCA orientation of the step before."""

    def __init__(
        self,
        trial: Trial,
        tensor: str,
        labels: str,
        mode: Any,
        method: str,
        max_samples: int,
        random_state: int,
    ) -> None:
        _check(method, max_samples)
        self.trial, self.tensor, self.labels, self.mode = trial, tensor, labels, mode
        self.method, self.max_samples, self.random_state = method, max_samples, random_state
        self._components: np.ndarray | None = None

    def check_names(self) -> None:
        """A clear error when the trial has no tensor of either name."""
        for name in (self.tensor, self.labels):
            if not self.trial.has_tensor(name):
                raise InvalidConfigError(
                    f"{self.trial.path} has no tensor {name!r}; some of its tensors: "
                    f"{sorted(self.trial.tensor_names())[:8]}"
                )

    def frame(self, step: int) -> EmbeddingFrame:
        """The step's frame; TensorUnavailableForStep where a tensor was not saved then."""
        features = self.trial.tensor(self.tensor).value(step, mode=self.mode)
        label_value = self.trial.tensor(self.labels).value(step, mode=self.mode)
        n = min(len(features), self.max_samples) if features.ndim else 0
        if n < 3:
            raise InvalidConfigError(
                f"{self.tensor} at step {step} has shape {features.shape}: an embedding needs "
                "a batch of at least 3 samples (the first axis)"
            )
        labels = as_labels(label_value, len(features), self.labels)[:n]
        points, self._components = embed(
            features[:n], self.method, self.random_state, reference=self._components
        )
        return EmbeddingFrame(step, points, labels)


def _trial(trial: Trial | str | os.PathLike[str]) -> Trial:
    return trial if isinstance(trial, Trial) else create_trial(trial)


def embeddings_over_time(
    trial: Trial | str | os.PathLike[str],
    tensor: str,
    labels: str,
    mode: Any = ModeKeys.EVAL,
    steps: list[int] | None = None,
    method: str = "pca",
    max_samples: int = 1000,
    random_state: int = 0,
) -> list[EmbeddingFrame]:
    """A frame per step (all saved steps of ``mode`` unless ``steps`` is given), skipping the
    steps where ``tensor`` or ``labels`` was not saved."""
    trial = _trial(trial)
    embedder = _Embedder(trial, tensor, labels, mode, method, max_samples, random_state)
    embedder.check_names()
    frames = []
    for step in trial.steps(mode=mode) if steps is None else steps:
        try:
            frames.append(embedder.frame(step))
        except TensorUnavailableForStep:
            log.info("no %s or %s at step %s: left out", tensor, labels, step)
    return frames


class LiveEmbeddings:
    """Seed 004's live loop: ``for frame in LiveEmbeddings(trial, bottleneck, labels): ...``.

    Polls the trial every ``poll_interval`` seconds and yields a frame for each new step of
    ``mode``; steps whose tensors are not available are recorded in :attr:`skipped`. Iteration
    ends once training has ended and every step is read, or (with ``timeout``) when that many
    seconds pass first, with :attr:`timed_out` set. :attr:`frames` keeps every frame yielded.
    """

    def __init__(
        self,
        trial: Trial | str | os.PathLike[str],
        tensor: str,
        labels: str,
        mode: Any = ModeKeys.EVAL,
        method: str = "pca",
        max_samples: int = 1000,
        poll_interval: float = 1.0,
        timeout: float | None = None,
        random_state: int = 0,
    ) -> None:
        if not poll_interval > 0:
            raise InvalidConfigError(f"poll_interval must be > 0 seconds; got {poll_interval!r}")
        if timeout is not None and not timeout >= 0:
            raise InvalidConfigError(f"timeout must be None or >= 0 seconds; got {timeout!r}")
        self.trial = _trial(trial)
        self.mode, self.poll_interval, self.timeout = mode, poll_interval, timeout
        self._embedder = _Embedder(
            self.trial, tensor, labels, mode, method, max_samples, random_state
        )
        self.frames: list[EmbeddingFrame] = []
        self.skipped: list[int] = []
        self.timed_out = False

    def __iter__(self) -> Iterator[EmbeddingFrame]:
        deadline = None if self.timeout is None else time.monotonic() + self.timeout
        embedder = self._embedder
        seen: set[int] = set()
        while True:
            ended = self.trial.loaded_all_steps  # read first: no step can then be missed
            self.trial.refresh()
            for step in sorted(set(self.trial.steps(mode=self.mode)) - seen):
                seen.add(step)
                try:
                    frame = embedder.frame(step)
                except (TensorUnavailableForStep, TensorUnavailable):  # not saved at this step
                    log.info("tensor unavailable for step %s: skipped", step)
                    self.skipped.append(step)
                    continue
                self.frames.append(frame)
                yield frame
            if ended:
                if not self.frames:
                    embedder.check_names()  # a misspelt name, rather than silence
                return
            if deadline is not None and time.monotonic() >= deadline:
                self.timed_out = True
                log.warning("stopped following %s after %ss", self.trial.path, self.timeout)
                return
            time.sleep(self.poll_interval)


__all__ = [
    "METHODS",
    "EmbeddingFrame",
    "LiveEmbeddings",
    "as_labels",
    "embed",
    "embeddings_over_time",
]
