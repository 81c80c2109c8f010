"""Verdicts that can be believed: what a rule judged, non-finite values, severities, and
smdebug's constructors and LossNotDecreasing behaviour (issue 18)."""

from __future__ import annotations

import inspect
from pathlib import Path

import numpy as np
import pytest

from tensortap.rules import (
    BUILTIN_RULES,
    AllZero,
    CheckInputImages,
    ClassImbalance,
    Confusion,
    DeadRelu,
    LossNotDecreasing,
    Overfit,
    Overtraining,
    Rule,
    RuleStatus,
    SaturatedActivation,
    StalledTrainingRule,
    VanishingGradient,
    WeightsNotUpdating,
    invoke_rule,
    iter_findings,
)
from tensortap.rules._finding import Severity
from tensortap.testing import TrialBuilder

F32 = np.float32

#: smdebug's documented constructors: parameter names in their positions (after base_trial).
SMDEBUG_SIGNATURES = {
    "VanishingGradient": ["threshold"],
    "ExplodingTensor": ["collection_names", "tensor_regex", "only_nan"],
    "LossNotDecreasing": [
        "collection_names",
        "tensor_regex",
        "use_losses_collection",
        "num_steps",
        "diff_percent",
        "increase_threshold_percent",
        "mode",
    ],
    "Overfit": ["tensor_regex", "start_step", "patience", "ratio_threshold"],
    "Overtraining": ["patience_train", "patience_validation", "delta"],
    "SimilarAcrossRuns": ["other_trials", "collection_names", "tensor_regex"],
    "WeightUpdateRatio": ["num_steps", "large_threshold", "small_threshold", "epsilon"],
    "AllZero": ["collection_names", "tensor_regex", "threshold"],
    "UnchangedTensor": [
        "collection_names",
        "tensor_regex",
        "num_steps",
        "rtol",
        "atol",
        "equal_nan",
    ],
    "DeadRelu": ["tensor_regex", "threshold_inactivity", "threshold_layer"],
    "TensorVariance": ["collection_names", "tensor_regex", "max_threshold", "min_threshold"],
    "SaturatedActivation": [
        "tensor_regex",
        "threshold_tanh",
        "threshold_sigmoid",
        "threshold_inactivity",
        "threshold_layer",
    ],
    "PoorWeightInitialization": [
        "activation_inputs_regex",
        "threshold",
        "distribution_range",
        "patience",
        "steps",
    ],
    "ClassImbalance": [
        "threshold_imbalance",
        "threshold_misprediction",
        "samples",
        "argmax",
        "labels_regex",
        "predictions_regex",
    ],
    "Confusion": [
        "category_no",
        "labels",
        "predictions",
        "labels_collection",
        "predictions_collection",
        "min_diag",
        "max_off_diag",
    ],
    "CheckInputImages": ["threshold_mean", "threshold_samples", "regex", "channel"],
    "NLPSequenceRatio": ["tensor_regex", "token_values", "token_thresholds_percent"],
    "StalledTrainingRule": ["threshold", "stop_training_on_fire", "training_job_name_prefix"],
    "FeatureImportanceOverweight": ["threshold", "nfeatures", "tensor_regex"],
    "TreeDepth": ["depth"],
}


@pytest.mark.parametrize("name", sorted(SMDEBUG_SIGNATURES))
def test_constructor_positions_are_smdebugs(name: str) -> None:
    params = list(inspect.signature(BUILTIN_RULES[name].__init__).parameters)[2:]
    expected = SMDEBUG_SIGNATURES[name]
    assert params[: len(expected)] == expected  # tensortap's own additions come after


def losses(path: Path, values: list[float], mode: str = "train") -> object:
    builder = TrialBuilder(path)
    for v in values:
        builder.step({"loss": np.float32(v)}, mode=mode)
    return builder.close()


@pytest.mark.parametrize(
    ("diff_percent", "values", "fires"),
    [
        (0.0, [1.0, 0.9], False),  # dropped
        (0.0, [1.0, 1.0], True),  # did not drop
        (5.0, [1.0, 1.03125], False),  # rose 3.1%, less than 5%
        (5.0, [1.0, 1.0625], True),  # rose 6.25%
        (5.0, [1.0, 0.99], False),  # dropped only 1%: smdebug's rule does not fire
    ],
)
def test_loss_not_decreasing_diff_percent_as_smdebug(
    tmp_path: Path, diff_percent: float, values: list[float], fires: bool
) -> None:
    rule = LossNotDecreasing(losses(tmp_path, values), num_steps=1, diff_percent=diff_percent)
    assert (invoke_rule(rule).triggered > 0) is fires


def test_loss_not_decreasing_judges_a_trial_without_modes(tmp_path: Path) -> None:
    summary = invoke_rule(LossNotDecreasing(losses(tmp_path, [1.0, 1.2], "global"), num_steps=1))
    assert summary.judged and summary.triggered == 1


def test_loss_not_decreasing_finds_a_loss_saved_in_default(tmp_path: Path) -> None:
    builder = TrialBuilder(tmp_path)
    for v in (1.0, 1.0):
        builder.step({"train_loss": np.float32(v)}, collections={"train_loss": "default"})
    summary = invoke_rule(LossNotDecreasing(builder.close(), num_steps=1))
    assert summary.triggered == 1
    assert summary.findings[0].tensors == ("train_loss",)


def test_loss_not_decreasing_takes_collection_names(tmp_path: Path) -> None:
    builder = TrialBuilder(tmp_path)
    for v in (1.0, 1.1):
        builder.step({"val_ce": np.float32(v)}, collections={"val_ce": "my_losses"})
    trial = builder.close()
    assert invoke_rule(LossNotDecreasing(trial, ["my_losses"], num_steps=1)).triggered == 1
    assert LossNotDecreasing.required_collections(collection_names="my_losses") == (
        "losses",
        "my_losses",
    )


def test_loss_not_decreasing_compares_evaluation_passes_not_batches(tmp_path: Path) -> None:
    """Within a pass the loss climbs from easy to hard batches; pass over pass it falls."""
    builder = TrialBuilder(tmp_path)
    for epoch in range(4):
        for _ in range(3):
            builder.step({"loss": np.float32(1.0)}, mode="train")
        for difficulty in (0.2, 0.5, 0.9):
            builder.step({"loss": np.float32(difficulty * (1 - 0.2 * epoch))}, mode="eval")
    summary = invoke_rule(LossNotDecreasing(builder.close(), num_steps=100, mode="EVAL"))
    assert summary.judged and summary.triggered == 0


def test_a_nan_loss_is_a_problem_for_every_loss_rule(tmp_path: Path) -> None:
    builder = TrialBuilder(tmp_path)
    for v in (2.0, 1.0, float("nan"), float("nan")):
        builder.step({"loss": np.float32(v)}, mode="train")
        builder.step({"loss": np.float32(v)}, mode="eval")
    trial = builder.close()
    for rule in (LossNotDecreasing(trial, num_steps=1), Overtraining(trial), Overfit(trial)):
        summary = invoke_rule(rule)
        fired = [f for f in summary.findings if f.triggered]
        assert fired, rule
        assert fired[0].severity is Severity.PROBLEM
        assert fired[0].details["nonfinite"] is True
        assert "NaN or infinite" in fired[0].message


def test_nan_activations_are_non_finite_not_dead(tmp_path: Path) -> None:
    builder = TrialBuilder(tmp_path)
    builder.step({"fc/relu_output_0": np.full((8, 4), np.nan, F32)})
    builder.step({"fc/tanh_input_0": np.full((8, 4), np.inf, F32)})
    trial = builder.close()
    for rule in (DeadRelu(trial), SaturatedActivation(trial)):
        fired = [f for f in iter_findings(rule) if f.triggered]
        assert fired and all(f.details.get("nonfinite") for f in fired)
        assert not any("dead" in f.message or "saturated" in f.message for f in fired)


def test_nan_gradients_weights_and_zeros_are_non_finite(tmp_path: Path) -> None:
    builder = TrialBuilder(tmp_path)
    nan = np.full(4, np.nan, F32)
    builder.step({"fc.weight": np.ones(4, F32), "gradient/fc.weight": np.ones(4, F32)})
    builder.step({"fc.weight": nan, "gradient/fc.weight": nan})
    trial = builder.close()
    for rule in (VanishingGradient(trial), WeightsNotUpdating(trial), AllZero(trial)):
        fired = [f for f in iter_findings(rule) if f.triggered]
        assert [f.step for f in fired] == [1], rule
        assert fired[0].details["nonfinite"] is True


def test_a_rule_whose_regex_matches_nothing_ends_no_data(tmp_path: Path) -> None:
    trial = losses(tmp_path, [1.0, 0.9, 0.8])
    summary = invoke_rule(DeadRelu(trial))
    assert summary.status is RuleStatus.NO_DATA
    assert "no matching activation saved" in summary.details
    assert "relu_activations" in summary.details


class ReadsGradients(Rule):
    """The README's custom rule: reads every gradient of a step through req_tensors."""

    def set_required_tensors(self, step: int) -> None:
        for tensor in self.base_trial.tensors_in_collection("gradients"):
            self.req_tensors.add(tensor.name, steps=[step])

    def invoke_at_step(self, step: int) -> bool:
        return any(t.reduction_value(step, "mean", abs=True) > 10 for t in self.req_tensors.get())


def test_a_custom_rule_reading_an_empty_collection_ends_no_data(tmp_path: Path) -> None:
    builder = TrialBuilder(tmp_path)
    for v in (1.0, 0.5):  # weights and a loss, but no gradient
        builder.step({"fc.weight": np.ones(3, F32) * v, "loss": np.float32(v)})
    builder.hook.get_collection("gradients")  # known to the hook, never given a tensor
    summary = invoke_rule(ReadsGradients(builder.close()))
    assert summary.status is RuleStatus.NO_DATA
    assert summary.evaluated == 2 and summary.judged == 0
    assert "no tensor in gradients" in summary.details
    assert "collections_needed = ('gradients',)" in summary.details


def test_a_rule_that_judged_data_is_no_issues_found(tmp_path: Path) -> None:
    summary = invoke_rule(LossNotDecreasing(losses(tmp_path, [1.0, 0.5, 0.2]), num_steps=1))
    # the first loss is compared with nothing: two judgements
    assert summary.status is RuleStatus.NO_ISSUES_FOUND and summary.judged == 2


def test_stalled_training_judges_time_not_data(tmp_path: Path) -> None:
    summary = invoke_rule(StalledTrainingRule(losses(tmp_path, [1.0, 0.5])))
    assert summary.status is RuleStatus.NO_ISSUES_FOUND


def test_a_converged_run_is_advice_not_a_problem(tmp_path: Path) -> None:
    values = [2.0, 1.0, 0.5, 0.3] + [0.3] * 20
    trial = losses(tmp_path, values)
    for rule in (Overtraining(trial), LossNotDecreasing(trial, num_steps=2)):
        summary = invoke_rule(rule)
        assert summary.triggered, rule
        assert summary.worst_severity is Severity.ADVICE, rule


def test_a_loss_that_never_moved_is_a_problem(tmp_path: Path) -> None:
    summary = invoke_rule(LossNotDecreasing(losses(tmp_path, [2.3] * 120), num_steps=10))
    assert summary.worst_severity is Severity.PROBLEM
    early = [f for f in summary.findings if f.step < 100]
    assert early and all(f.severity is Severity.WARNING for f in early)


def test_overfit_is_a_problem_only_when_validation_rises(tmp_path: Path) -> None:
    def run(path: Path, val: list[float]) -> Severity | None:
        builder = TrialBuilder(path)
        for epoch, v in enumerate(val):
            for _ in range(2):
                builder.step({"loss": np.float32(1.0 / (epoch + 1))}, mode="train")
            for _ in range(2):
                builder.step({"loss": np.float32(v)}, mode="eval")
        return invoke_rule(Overfit(builder.close())).worst_severity

    assert run(tmp_path / "gap", [1.3, 0.8, 0.7, 0.6]) is Severity.WARNING
    assert run(tmp_path / "two passes up", [1.3, 0.8, 1.0, 1.2]) is Severity.WARNING
    assert run(tmp_path / "rising", [1.3, 0.8, 1.0, 1.2, 1.4]) is Severity.PROBLEM
    # sustained and beyond the noise, but 12-15% above the best: healthy runs end so
    mild = [1.3, 0.8, 0.6, 0.52, 0.51, 0.50, 0.52, 0.53, 0.54, 0.55, 0.56, 0.57]
    assert run(tmp_path / "mild", mild) is Severity.WARNING
    assert run(tmp_path / "worse", [*mild, 0.58, 0.59, 0.6, 0.61, 0.62]) is Severity.PROBLEM


def test_dead_units_are_a_problem_only_when_they_stay_dead(tmp_path: Path) -> None:
    def run(path: Path, dead_for: int) -> Severity | None:
        builder = TrialBuilder(path)
        for s in range(8):
            x = np.ones((16, 4), F32)
            if s < dead_for:
                x[:, :3] = 0  # 3 of 4 units silent
            builder.step({"fc/relu_output_0": x})
        return invoke_rule(DeadRelu(builder.close())).worst_severity

    assert run(tmp_path / "init", 2) is Severity.WARNING
    assert run(tmp_path / "dead", 8) is Severity.PROBLEM


def test_class_imbalance_counts_every_label_seen(tmp_path: Path) -> None:
    """smdebug counted all labels: an imbalance early in training is not forgotten."""
    builder = TrialBuilder(tmp_path)
    builder.step({"labels": np.repeat([0, 1], [95, 5]), "predictions": np.repeat([0, 1], [95, 5])})
    balanced = np.repeat([0, 1], [50, 50])
    for _ in range(4):
        builder.step({"labels": balanced, "predictions": balanced})
    summary = invoke_rule(ClassImbalance(builder.close(), threshold_imbalance=1.5, samples=100))
    # 95:5, then 145:55, 195:105, 245:155 (1.58x) fire; 295:205 (1.44x) does not. The last
    # 100 labels alone are balanced after the first step, and would never fire.
    assert summary.triggered == 4
    assert summary.worst_severity is Severity.WARNING  # imbalanced, but no class given up


def test_confusion_takes_smdebugs_positional_arguments(tmp_path: Path) -> None:
    builder = TrialBuilder(tmp_path)
    y = np.repeat(np.arange(3), 10)
    builder.step(
        {"foo": y, "bar": y, "labels": y, "predictions": np.zeros_like(y)},
        mode="eval",
        collections={"foo": "default", "bar": "default"},
    )
    trial = builder.close()
    rule = Confusion(trial, 10, "foo", "bar")
    assert (rule.category_no, rule.labels, rule.predictions) == (10, "foo", "bar")
    assert invoke_rule(rule).triggered == 0  # foo and bar agree
    assert invoke_rule(Confusion(trial)).triggered == 1  # the collections' tensors do not


def test_a_job_completes_an_include_collections_that_leaves_out_what_a_rule_reads(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from tensortap.jobs import DebuggerHookConfig, rule_configs
    from tensortap.jobs import Rule as JobRule
    from tensortap.jobs._specs import hook_config

    debugger = DebuggerHookConfig(hook_parameters={"include_collections": "losses"})
    rules = [JobRule.builtin(rule_configs.vanishing_gradient())]
    with caplog.at_level("WARNING"):
        config = hook_config("out", debugger, rules, None)
    # and every job saves the vital signs (core._vitals)
    assert config.include_collections == ("losses", "gradients", "vitals")
    assert "rule VanishingGradient reads gradients, which include_collections" in caplog.text
    assert config.hook_parameters["include_collections"] == "losses,gradients,vitals"


def test_check_input_images_does_not_judge_tabular_inputs(tmp_path: Path) -> None:
    builder = TrialBuilder(tmp_path)
    features = np.random.default_rng(0).normal(5.0, 1.0, (600, 8)).astype(F32)  # far from 0
    builder.step({"Net_input_0": features})
    summary = invoke_rule(CheckInputImages(builder.close(), regex="Net_input_0"))
    assert summary.status is RuleStatus.NO_DATA and summary.triggered == 0
    assert "no input with image axes" in summary.details


def test_activity_rules_say_why_they_judged_nothing_without_asking_for_what_is_saved(
    tmp_path: Path,
) -> None:
    """A model whose activations are functions (F.relu) leaves relu_activations empty although
    it was saved: the NoData reason says both possibilities, not only "save it"."""
    import torch
    import torch.nn.functional as F
    from torch import nn

    import tensortap.pytorch as tp

    class Functional(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(4, 3)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return F.relu(self.fc(x))

    model = Functional()
    hook = tp.Hook(
        tmp_path,
        save_config=tp.SaveConfig(save_interval=1),
        include_collections=["relu_activations"],
    )
    hook.register_module(model)
    for _ in range(3):
        model(torch.ones(2, 4)).sum().backward()
    hook.close()
    for rule in (DeadRelu, SaturatedActivation):
        summary = invoke_rule(rule(tp.create_trial(tmp_path)))
        assert summary.status is RuleStatus.NO_DATA
        assert "or the model has no activation module the hook captures" in summary.details
