"""The outcome's sampling (tensortap.core._outcome): classes from scores, ignored positions
dropped, a bound in rows and bytes, odd shapes left out rather than raised on."""

from __future__ import annotations

import numpy as np
import pytest

from tensortap.core._outcome import MAX_BYTES, MAX_ROWS, keep_rows, sample_outcome
from tensortap.rules.builtin._labels import as_classes


def test_scores_per_class_become_the_predicted_class() -> None:
    scores = np.array([[0.1, 2.0, -1.0], [3.0, 0.0, 0.0]], dtype=np.float32)
    out = sample_outcome(np.array([1, 2]), scores)
    assert out is not None
    assert out.labels.tolist() == [1, 2] and out.predictions.tolist() == [1, 0]
    assert out.labels.dtype == np.int32 and out.predictions.dtype == np.int32


def test_one_hot_targets_and_a_sigmoid_output() -> None:
    onehot = np.eye(3, dtype=np.float32)[[2, 0]]
    out = sample_outcome(onehot, np.array([[0.1, 0.2, 0.7], [0.5, 0.3, 0.2]]))
    assert out is not None and out.labels.tolist() == [2, 0] and out.predictions.tolist() == [2, 0]
    out = sample_outcome(np.array([[1.0], [0.0]]), np.array([[0.8], [0.3]], dtype=np.float32))
    assert out is not None and out.labels.tolist() == [1, 0]
    assert out.predictions.dtype == np.float32  # probabilities of class 1, cut by the rules


def test_one_sigmoid_column_beside_flat_labels_is_a_binary_prediction() -> None:
    """Keras' ``Dense(1, activation="sigmoid")`` with labels of shape (N,): the argmax of one
    column is always class 0, and a stranger's run at 97% accuracy was judged at chance."""
    labels = np.array([1, 0, 1, 1])
    out = sample_outcome(labels, np.array([[0.9], [0.2], [0.7], [0.4]], dtype=np.float32))
    assert out is not None and out.labels.tolist() == [1, 0, 1, 1]
    assert out.predictions.tolist() == pytest.approx([0.9, 0.2, 0.7, 0.4])  # cut at 0.5 later
    logits = np.array([[2.0], [-1.0], [0.5], [-0.3]], dtype=np.float32)
    out = sample_outcome(labels, logits)
    assert out is not None and out.predictions.tolist() == [1, 0, 1, 0]  # logits cut at 0
    out = sample_outcome(labels[:, None], logits)
    assert out is not None and out.predictions.tolist() == [1, 0, 1, 0]
    # one output beside counts is a regression, not an outcome
    assert sample_outcome(np.array([3, 0, 7, 1]), logits) is None
    y, p = as_classes(labels, np.array([[0.9], [0.2], [0.7], [0.4]]))
    assert p.tolist() == [1, 0, 1, 0] and y.tolist() == [1, 0, 1, 1]
    assert as_classes(labels, logits)[1].tolist() == [1, 0, 1, 0]


def test_sequence_positions_without_the_ignored_ones() -> None:
    labels = np.array([[-100, 3, 1], [2, -100, -100]])
    logits = np.zeros((2, 3, 5))
    logits[0, 1, 3] = logits[0, 2, 4] = logits[1, 0, 2] = 1
    out = sample_outcome(labels, logits)
    assert out is not None
    assert out.labels.tolist() == [3, 1, 2] and out.predictions.tolist() == [3, 4, 2]


def test_a_large_batch_is_thinned_to_the_bound() -> None:
    n = 50_000
    labels = np.arange(n) % 7
    out = sample_outcome(labels, labels)
    assert out is not None and out.labels.size == MAX_ROWS and out.nbytes <= MAX_BYTES
    assert out.labels[0] == 0 and out.labels[-1] == labels[-1]  # spread over the whole batch
    assert keep_rows(MAX_ROWS) is None


def test_odd_input_is_left_out_never_raised_on() -> None:
    assert sample_outcome(np.array([1, 2, 3]), np.zeros((2, 4))) is None  # do not pair up
    assert sample_outcome(np.array([0.3, 1.7]), np.array([0.2, 1.5])) is None  # a regression
    assert sample_outcome(np.array([-100, -100]), np.zeros((2, 3))) is None  # all ignored
    assert sample_outcome(np.array(["a"]), np.array([1])) is None
    assert sample_outcome(np.zeros(0), np.zeros(0)) is None
    assert sample_outcome(object(), np.zeros(2)) is None
