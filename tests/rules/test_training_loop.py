"""TrainingLoop on trials written by a TrialBuilder: the facts the PyTorch hook would save in
``training_loop``, judged without a training loop (the hook's side: tests/pytorch/
test_training_loop.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

import tensortap
from tensortap.diagnosis import CAUSES
from tensortap.rules import TrainingLoop, invoke_rule
from tensortap.rules._finding import Finding
from tensortap.testing import TrialBuilder
from tensortap.trials import Trial


def eval_mode_trial(path: Path, modules: dict[str, int], last_train: int = 4) -> Trial:
    """Optimizer steps 1 to ``last_train`` in train mode, then four in eval mode, as the hook
    saves them (every fact as it changes; the eval mode's layers by class)."""
    builder = TrialBuilder(path)
    for step in range(last_train + 4):
        facts = {"backward_passes": step + 1, "optimizer_steps": step + 1}
        mode = "train"
        if step >= last_train:
            mode = "eval"
            facts["eval_mode_steps"] = step - last_train + 1
            if step == last_train:
                facts["eval_mode_steps/step"] = step
                facts.update({f"eval_mode_modules/{k}": n for k, n in modules.items()})
        builder.step(
            {f"training_loop/{k}": np.int64(v) for k, v in facts.items()},
            mode=mode,
            collections={f"training_loop/{k}": "training_loop" for k in facts},
        )
    return builder.close()


def test_optimizer_steps_in_eval_mode_with_dropout_or_batchnorm_are_a_fault(
    tmp_path: Path,
) -> None:
    trial = eval_mode_trial(tmp_path, {"BatchNorm1d": 2, "Dropout": 1})
    summary = invoke_rule(TrainingLoop(trial))
    (finding,) = [f for f in summary.findings if f.triggered]
    assert finding.details["cause"] == "train_in_eval_mode"
    assert finding.step == 5  # the second step in eval mode: one may end a loop on purpose
    assert finding.message.startswith("2 of the 6 optimizer steps so far, from step 4, were")
    assert "the model's 2 BatchNorm1d, 1 Dropout behave as in evaluation" in finding.message
    assert finding.severity is not None and finding.severity.value == "problem"
    # a loop fact stands on its own: no outcome rule needs to find harm
    found = tensortap.diagnose(trial, rules=[TrainingLoop(trial)])
    assert found.verdict == "problem" and found.cause is CAUSES["train_in_eval_mode"]
    assert found.headline().startswith(
        "the model trains in evaluation mode (model.eval left on): 2 of the 6"
    )


def test_eval_mode_without_mode_dependent_layers_is_mentioned_not_a_fault(tmp_path: Path) -> None:
    trial = eval_mode_trial(tmp_path, {})
    seen: list[Finding] = []
    summary = invoke_rule(TrainingLoop(trial), on_finding=seen.append)
    assert [f for f in summary.findings if f.triggered] == []
    assert seen[-1].message == (
        "no fault of the training loop after 8 backward passes and 8 optimizer steps (4 "
        "optimizer steps, from step 4, ran with the model in eval mode, but it has no Dropout "
        "or BatchNorm module in eval mode: that changes nothing)"
    )


def test_the_cause_explains_what_training_without_dropout_or_batchnorm_statistics_does() -> None:
    cause = CAUSES["train_in_eval_mode"]
    assert cause.tier == 0 and not cause.symptom
    assert {"overfitting", "overtraining", "no_progress"} <= cause.explains
    assert "call model.train() before training steps" in cause.fix
