"""Reading trials: ``create_trial(path)`` and the Trial/Tensor views."""

from tensortap.trials.tensor import Tensor
from tensortap.trials.trial import StepState, Trial, create_trial

__all__ = ["StepState", "Tensor", "Trial", "create_trial"]
