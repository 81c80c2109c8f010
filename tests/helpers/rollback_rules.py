"""A custom rule for the rollback job test: fires when the saved loss passes ``threshold``."""

from tensortap.rules import Rule


class LossAbove(Rule):
    collections_needed = ("losses",)

    def __init__(self, base_trial, threshold: float = 1000.0):
        super().__init__(base_trial, other_trials=None)
        self.threshold = threshold

    def invoke_at_step(self, step):
        value = float(self.base_trial.tensor("loss").value(step))
        self.explain(f"loss {value:.3g} against {self.threshold}")
        return value > self.threshold
