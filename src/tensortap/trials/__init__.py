"""Reading trials: ``create_trial(path)`` and the Trial/Tensor views."""

from tensortap.trials.sessions import Session
from tensortap.trials.tensor import Tensor
from tensortap.trials.trial import Trial, create_trial
from tensortap.trials.waiting import StepState

__all__ = ["Session", "StepState", "Tensor", "Trial", "create_trial"]
