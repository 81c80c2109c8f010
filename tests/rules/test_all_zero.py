"""AllZero judges the model's tensors, not the data's targets nor a tensor's start (issue 44):
a batch of a 0/1 task whose targets are all 0, and a weight that starts at zero, are not
"all zero"; a tensor of the model that is all zero still is."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tensortap.rules import AllZero, RuleStatus, invoke_rule
from tensortap.testing import TrialBuilder

F32 = np.float32
BCE = {
    "BCEWithLogitsLoss_output_0": "losses",
    "BCEWithLogitsLoss_input_0": "inputs",
    "BCEWithLogitsLoss_input_1": "inputs",
}


def bce_steps(builder: TrialBuilder, hidden: np.ndarray) -> None:
    """Two steps of a 0/1 task; the second batch's targets are all 0."""
    for targets in (np.array([1, 0, 0, 1], F32), np.zeros(4, F32)):
        builder.step(
            {
                "BCEWithLogitsLoss_output_0": F32(0.69),
                "BCEWithLogitsLoss_input_0": np.array([0.3, -0.2, 0.1, 0.4], F32),
                "BCEWithLogitsLoss_input_1": targets,
                "fc_output_0": hidden,
            },
            collections=BCE | {"fc_output_0": "outputs"},
        )


def test_a_batch_of_zero_targets_is_data_not_an_all_zero_tensor(tmp_path: Path) -> None:
    builder = TrialBuilder(tmp_path)
    bce_steps(builder, np.ones((4, 3), F32))
    trial = builder.close()
    summary = invoke_rule(AllZero(trial))
    assert summary.status is RuleStatus.NO_ISSUES_FOUND, summary.findings[:1]
    assert summary.judged == 2
    # asked for by name, the targets are judged as asked
    asked = invoke_rule(AllZero(trial, tensor_regex=["BCEWithLogitsLoss_input_1"]))
    assert asked.status is RuleStatus.ISSUES_FOUND


def test_a_tensor_of_the_model_that_is_all_zero_still_fires(tmp_path: Path) -> None:
    builder = TrialBuilder(tmp_path)
    bce_steps(builder, np.zeros((4, 3), F32))
    summary = invoke_rule(AllZero(builder.close()))
    assert summary.status is RuleStatus.ISSUES_FOUND
    # at both steps, the batch whose targets are all 0 too, the model's tensor alone
    assert [f.tensors for f in summary.findings] == [("fc_output_0",)] * 2


def test_a_weight_that_starts_at_zero_is_an_initialisation(tmp_path: Path) -> None:
    """A LoRA B or a zero head starts at 0 (``initial/...``) and moves with the first update;
    before, its snapshot was "all zero" at step 0. Still at 0 after the update, it fires."""
    for moved, expected in ((True, RuleStatus.NO_ISSUES_FOUND), (False, RuleStatus.ISSUES_FOUND)):
        builder = TrialBuilder(tmp_path / str(moved))
        builder.step(
            {
                "initial/head.weight": np.zeros((2, 3), F32),
                "head.weight": np.full((2, 3), 1e-3 if moved else 0.0, F32),
            },
            collections={"initial/head.weight": "initial_weights", "head.weight": "weights"},
        )
        summary = invoke_rule(AllZero(builder.close()))
        assert summary.status is expected, summary.findings[:1]
        if not moved:
            assert summary.findings[0].tensors == ("head.weight",)


def test_vital_signs_and_loop_facts_are_no_tensor_of_the_model(tmp_path: Path) -> None:
    """A warm-up starts its learning rate at 0 (``vitals/lr`` at step 0: a frozen-encoder HF
    run of the stranger development set was "tensors are all zero" first), and a loop fact
    counts 0 when all is well: neither is a tensor of the model."""
    builder = TrialBuilder(tmp_path)
    for step, lr in enumerate((0.0, 5e-5)):
        builder.step(
            {
                "vitals/lr": F32(lr),
                "training_loop/zero_lr_params": F32(0),
                "fc_output_0": np.ones((4, 3), F32) * (step + 1),
            },
            collections={
                "vitals/lr": "vitals",
                "training_loop/zero_lr_params": "training_loop",
                "fc_output_0": "outputs",
            },
        )
    summary = invoke_rule(AllZero(builder.close()))
    assert summary.status is RuleStatus.NO_ISSUES_FOUND, summary.findings[:1]
    assert summary.judged == 2
