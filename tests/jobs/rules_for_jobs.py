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
