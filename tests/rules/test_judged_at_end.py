"""The evaluation pass that ends a run, read live, is judged when training ends
(``Rule.invoke_at_end``): a live walk reads the pass's last step before any later step exists
and before training has ended, so the rules that judge whole passes (Overfit, Overtraining,
LossNotDecreasing) left it under way and never judged it; a finished trial's walk judged it.
The same holds for Confusion's last step judged (a warning while training goes on)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import tensortap as tt
from tensortap.rules import LossNotDecreasing, Overfit, Overtraining, iter_findings
from tensortap.rules._finding import Finding, Severity
from tensortap.rules._rule import Rule
from tensortap.testing import TrialBuilder

LOSS = {"loss": "losses"}


def passes(path: Path, validation: list[float]) -> TrialBuilder:
    """3 TRAIN steps whose loss falls, then an evaluation pass of 2 EVAL steps at each of
    ``validation``; the trial is left open (training goes on)."""
    builder = TrialBuilder(path)
    train = 2.0
    for value in validation:
        for _ in range(3):
            train *= 0.9
            builder.step({"loss": np.float32(train)}, mode="train", collections=LOSS)
        for _ in range(2):
            builder.step({"loss": np.float32(value)}, mode="eval", collections=LOSS)
    builder.flush()
    return builder


def walk_live(builder: TrialBuilder, make: Any) -> tuple[list[Finding], int]:
    """Walk the open trial; when its last step has been read live, training ends. The
    findings and the last step."""
    rule: Rule = make(tt.create_trial(builder.path))
    last = max(rule.base_trial.steps())
    said: list[Finding] = []
    ended = False
    for finding in iter_findings(rule, poll_interval=0.01):
        said.append(finding)
        if finding.step == last and not ended:
            builder.close()  # training ends after the pass's last step was read
            ended = True
    return said, last


@pytest.mark.parametrize(
    ("make", "validation", "severity", "text"),
    [
        # the last 3 passes above the best: overfitting, seen only with the last pass
        (Overfit, [1.0, 1.5, 2.0, 2.5], Severity.PROBLEM, "overfitting"),
        # the last pass rose from the one before (the passes before it fell)
        (LossNotDecreasing, [1.0, 0.9, 1.2], Severity.WARNING, "rose 33.3%"),
        # no better pass for 4 EVAL steps: the patience ends with the last pass
        (
            lambda t: Overtraining(t, patience_validation=4),
            [1.0, 1.0, 1.0],
            Severity.ADVICE,
            "validation loss 1",
        ),
    ],
    ids=["Overfit", "LossNotDecreasing", "Overtraining"],
)
def test_the_pass_that_ends_a_live_run_is_judged_when_training_ends(
    tmp_path: Path, make: Any, validation: list[float], severity: Severity, text: str
) -> None:
    builder = passes(tmp_path / "live", validation)
    said, last = walk_live(builder, make)
    at_last = [f for f in said if f.step == last]
    assert len(at_last) == 2, [f.message for f in at_last]  # read live, then at the end
    final = at_last[-1]
    assert final.triggered and final.severity is severity, final.message
    assert text in final.message
    # a finished trial's walk judges the same pass whole at its last step
    finished = make(tt.create_trial(builder.path))
    done = [f for f in iter_findings(finished) if f.step == last]
    assert len(done) == 1 and done[0].triggered and done[0].severity is severity
    assert done[0].message == final.message


class _Reads(Rule):
    """Records every step it judges; at ``at`` it looks at the trial afresh (as a rule whose
    reads refresh a stale trial does) just after ``publish`` wrote more steps and ended."""

    def __init__(self, trial: Any, at: int, publish: Any) -> None:
        super().__init__(trial)
        self.at, self.publish = at, publish
        self.judged: list[int] = []

    def invoke_at_step(self, step: int) -> bool:
        self.judged.append(step)
        if step == self.at:
            self.publish()
            self.base_trial.refresh()
        return False


def test_steps_a_rule_loaded_while_judging_are_judged_after_training_ended(tmp_path: Path) -> None:
    """The walk ended when its own look found nothing new and training over, though a rule's
    reads had loaded the steps published meanwhile (with the end of training): a live job
    judged the first 137 of 430 steps and missed every evaluation pass after them."""
    builder = TrialBuilder(tmp_path / "live")
    for i in range(5):
        builder.step({"loss": np.float32(i)}, collections=LOSS)
    builder.flush()

    def publish() -> None:
        for i in range(5, 10):
            builder.step({"loss": np.float32(i)}, collections=LOSS)
        builder.close()

    rule = _Reads(tt.create_trial(builder.path), at=2, publish=publish)
    said = list(iter_findings(rule, poll_interval=0.01))
    assert rule.judged == list(range(10)), rule.judged
    assert [f.step for f in said] == list(range(10))
