"""The custom rule of seed 001, unchanged but for its import."""

from tensortap.rules import Rule


class CustomGradientRule(Rule):
    def __init__(self, base_trial, threshold=10.0):
        super().__init__(base_trial, other_trials=None)
        self.threshold = float(threshold)

    def set_required_tensors(self, step):
        for tname in self.base_trial.tensors_in_collection("gradients"):
            self.req_tensors.add(tname, steps=[step])

    def invoke_at_step(self, step):
        for tensor in self.req_tensors.get():
            abs_mean = tensor.reduction_value(step, "mean", abs=True)
            if abs_mean > self.threshold:
                return True
        return False


class BrokenRule(Rule):
    def __init__(self, base_trial):
        super().__init__(base_trial)

    def invoke_at_step(self, step):
        if step == 2:
            return {}["no such key"]  # type: ignore[index]  # a KeyError, on purpose
        return False


class CustomGradientRuleDirect(Rule):
    """The seed's first form: reads the collection itself."""

    def __init__(self, base_trial, threshold=10.0):
        super().__init__(base_trial, other_trials=None)
        self.threshold = float(threshold)

    def invoke_at_step(self, step):
        for tensor in self.base_trial.tensors_in_collection("gradients"):
            abs_mean = tensor.reduction_value(step, "mean", abs=True)
            if abs_mean > self.threshold:
                return True
        return False
