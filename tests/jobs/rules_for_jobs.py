"""Custom rules for the job tests."""

from tensortap.rules import Rule


class FiresFrom(Rule):
    """Fires at every step from ``step`` on."""

    def __init__(self, base_trial, step: int = 4):
        super().__init__(base_trial, other_trials=None)
        self.step = step

    def invoke_at_step(self, step):
        self.explain(f"step {step} is at or after {self.step}")
        return step >= self.step


class CrashesAt(Rule):
    """Raises at global step ``step`` (a bug in a user's rule)."""

    def __init__(self, base_trial, step: int = 2):
        super().__init__(base_trial, other_trials=None)
        self.step = step

    def invoke_at_step(self, step):
        if step >= self.step:
            raise ZeroDivisionError("the rule divided by zero")
        return False


class GradientMean(Rule):
    """The README's custom rule: fires when a gradient's mean |value| passes ``threshold``.
    It does not say which collections it reads."""

    def __init__(self, base_trial, threshold: float = 10.0):
        super().__init__(base_trial, other_trials=None)
        self.threshold = threshold

    def set_required_tensors(self, step):
        for tensor in self.base_trial.tensors_in_collection("gradients"):
            self.req_tensors.add(tensor.name, steps=[step])

    def invoke_at_step(self, step):
        return any(
            t.reduction_value(step, "mean", abs=True) > self.threshold
            for t in self.req_tensors.get()
        )


class DeclaredGradientMean(GradientMean):
    """The same rule, declaring what it reads: a job saves it."""

    collections_needed = ("gradients",)


class ExitsAt(Rule):
    """Calls sys.exit(0) at global step ``step`` (a user's mistake)."""

    def __init__(self, base_trial, step: int = 2):
        super().__init__(base_trial, other_trials=None)
        self.step = step

    def invoke_at_step(self, step):
        if step >= self.step:
            import sys

            sys.exit(0)
        return False
