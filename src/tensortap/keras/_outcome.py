"""The outcome of a Keras step (see :mod:`tensortap.core._outcome`): ``compute_loss``'s ``y``
and ``y_pred``, captured by the activation taps (:mod:`tensortap.keras._activations`) on due
steps, saved as the predicted and true classes, bounded: at most
:data:`tensortap.core._outcome.MAX_ROWS` samples a step (a softmax over a large vocabulary is
not saved whole). Sparse labels beside scores per class, one-hot labels beside scores, and a
sigmoid output beside 0/1 labels are understood; anything else (a regression, several outputs)
is left out. A script that saves ``labels`` or ``predictions`` itself at a step
(``hook.save_tensor`` from a callback, say) keeps them: the tap stands aside for that step, as
PyTorch's does."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from tensortap.core._outcome import (
    LABELS,
    OUTCOME_NAMES,
    PREDICTIONS,
    outcome_due,
    sample_outcome,
)

if TYPE_CHECKING:
    from tensortap.core._tap_host import TapHost


def save_outcome(
    hook: TapHost, labels: Any, predictions: Any, to_numpy: Callable[[Any], Any]
) -> None:
    """Save a step's outcome from the captured ``labels`` and ``predictions`` (framework
    values, converted with ``to_numpy`` only where ``labels`` or ``predictions`` is due)."""
    recorder = hook.recorder
    if not outcome_due(recorder) or any(recorder.has_saved(n) for n in OUTCOME_NAMES):
        return  # not due, or the script saved its own (a callback before the hook's)
    outcome = sample_outcome(to_numpy(labels), to_numpy(predictions))
    if outcome is None:
        return
    hook.save_lazy(LABELS, (LABELS,), lambda: outcome.labels)
    hook.save_lazy(PREDICTIONS, (PREDICTIONS,), lambda: outcome.predictions)
