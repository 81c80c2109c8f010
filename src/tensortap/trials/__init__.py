"""Reading trials: ``create_trial(path)`` and the Trial/Tensor views."""

from tensortap.trials._sessions import Session
from tensortap.trials._tensor import Tensor
from tensortap.trials._trial import Trial, create_trial
from tensortap.trials._waiting import StepState

__all__ = ["Session", "StepState", "Tensor", "Trial", "create_trial"]
