"""Every built-in rule fires on a synthetic trial built to trigger it and stays quiet on a near miss."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tensortap import create_trial
from tensortap.rules import (
    BUILTIN_RULES,
    AllZero,
    CheckInputImages,
    ClassImbalance,
    Confusion,
    DeadRelu,
    ExplodingTensor,
    FeatureImportanceOverweight,
    GradientNormSpike,
    LossNotDecreasing,
    LossSpike,
    LowPrecisionRange,
    NaNInfRootCause,
    NLPSequenceRatio,
    Overfit,
    Overtraining,
    PoorWeightInitialization,
    SaturatedActivation,
    SimilarAcrossRuns,
    StalledTrainingRule,
    TensorVariance,
    TreeDepth,
    UnchangedTensor,
    VanishingGradient,
    WeightsNotUpdating,
    WeightUpdateRatio,
    invoke_rule,
    iter_findings,
)
from tensortap.testing import TrialBuilder

F32 = np.float32
rng = np.random.default_rng(0)


def build(path: Path, steps: list[tuple[str, dict[str, Any]]]):
    builder = TrialBuilder(path)
    for mode, tensors in steps:
        builder.step(tensors, mode=mode)
    return builder.close()


def fired_steps(rule) -> list[int]:
    return [f.step for f in iter_findings(rule) if f.triggered]


def train(tensors_per_step: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    return [("train", t) for t in tensors_per_step]


# -- one (fire, near-miss) pair per rule --
def vanishing(bad: bool):
    low = 5e-8 if bad else 2e-7
    return train([{"gradient/a": np.full(4, 1e-3 if s < 3 else low, F32)} for s in range(5)]), {}


def exploding(bad: bool):
    big = np.nan if bad else 3e38
    return train([{"w.weight": np.array([1.0, big if s == 2 else 1.0], F32)} for s in range(4)]), {}


def loss_not_decreasing(bad: bool):
    # drops 1% every 10 steps, or rises once at step 20
    losses = [1.0 - 0.001 * s for s in range(31)]
    if bad:
        losses[20] = losses[10] + 0.001
    return train([{"loss": v} for v in losses]), {"num_steps": "10"}


def overfit(bad: bool):
    gap = 1.3 if bad else 1.05
    steps = []
    for _ in range(3):
        steps += [("train", {"loss": 1.0})] * 3 + [("eval", {"loss": gap})] * 2
    return steps, {"patience": "2"}


def overtraining(bad: bool):
    n = 8 if bad else 5
    losses = [2.0, 1.5, 1.0] + [0.95] * n
    return train([{"loss": v} for v in losses]), {"patience_train": "6"}


def weight_update_ratio(bad: bool):
    step = 1e-10 if bad else 1e-4
    return train([{"fc.weight": np.ones(10, F32) * (1 + step * s)} for s in range(4)]), {
        "num_steps": "1",
        "small_threshold": "1e-6",
    }


def all_zero(bad: bool):
    w = np.zeros(100, F32)
    if not bad:
        w[0] = 1.0
    return train([{"fc.weight": w}]), {}


def low_precision(bad: bool):
    """fp16 gradients: 10% of them below its smallest normal (6.1e-5), or 2% (a near miss)."""
    g = np.full(100, 1e-2, F32)
    g[: 10 if bad else 2] = 1e-6
    return train([{"gradient/fc.weight": g}]), {"dtype": "fp16"}


def unchanged(bad: bool):
    values = [np.ones(5, F32)] * 3 if bad else [np.ones(5, F32)] * 2 + [np.full(5, 1.1, F32)]
    return train([{"fc.weight": v} for v in values]), {}


def dead_relu(bad: bool):
    x = rng.standard_normal((64, 20)).astype(F32)
    x[:, : (12 if bad else 9)] = -1.0  # dead units (more than half when bad)
    return train([{"relu1/relu_output_0": np.maximum(x, 0)}]), {}


def tensor_variance(bad: bool):
    return train([{"fc.weight": rng.standard_normal(200).astype(F32) * (20 if bad else 5)}]), {
        "max_threshold": "100"
    }


def saturated(bad: bool):
    x = rng.standard_normal((64, 10)).astype(F32)
    x[:, : (6 if bad else 4)] = 12.0
    return train([{"l1/tanh_input_0": x}]), {}


def poor_init(bad: bool):
    scale = 20.0 if bad else 2.0
    return train(
        [
            {
                "l1/relu_input_0": rng.standard_normal((32, 8)).astype(F32),
                "l2/relu_input_0": rng.standard_normal((32, 8)).astype(F32) * scale,
                "gradient/l1.weight": rng.standard_normal(50).astype(F32) * 0.1,
            }
        ]
    ), {}


def class_imbalance(bad: bool):
    counts = [90, 8, 2] if bad else [50, 30, 20]
    labels = np.repeat(np.arange(3), counts)
    return train([{"labels": labels, "predictions": labels}]), {"samples": "100"}


def confusion(bad: bool):
    labels = np.repeat(np.arange(3), 20)
    preds = labels.copy()
    preds[: (4 if bad else 1)] = 1  # some of class 0 predicted as class 1
    return [("eval", {"labels": labels, "predictions": preds})], {}


def input_images(bad: bool):
    images = rng.standard_normal((64, 3, 4, 4)).astype(F32) + (0.5 if bad else 0.1)
    return train([{"Net_input_0": images}]), {"threshold_samples": "64"}


def nlp_ratio(bad: bool):
    tokens = rng.integers(1, 100, size=(8, 50))
    tokens[:, : (30 if bad else 20)] = 0
    return train([{"embedding_input_0": tokens}]), {}


def similar(bad: bool):
    return train([{"fc.weight": np.ones(4, F32)}]), {}


def nan_root(bad: bool):
    ok = np.ones(3, F32)
    nan = np.array([1.0, np.nan, 1.0], F32)
    step = {
        "Net_input_0": ok,
        "fc1_output_0": ok,
        "fc2_output_0": nan if bad else ok,
        "gradient/fc2.weight": nan if bad else ok,
        "fc1.weight": nan if bad else ok,
    }
    return train([{k: ok for k in step}, step]), {}


def grad_spike(bad: bool):
    steps = []
    for s in range(30):
        scale = 1.0 + 0.05 * np.sin(s)
        if s == 25:
            scale = 8.0 if bad else 1.5
        steps.append({"gradient/fc.weight": np.full(4, scale, F32)})
    return train(steps), {}


def loss_spike(bad: bool):
    losses = [1.0 + 0.02 * np.sin(s) for s in range(30)]
    losses[25] = 5.0 if bad else 1.2
    return train([{"loss": v} for v in losses]), {}


def not_updating(bad: bool):
    w0 = np.ones(4, F32)
    w1 = w0 if bad else w0 * 0.99
    return train(
        [
            {"fc.weight": w0, "gradient/fc.weight": np.full(4, 0.1, F32)},
            {"fc.weight": w1, "gradient/fc.weight": np.full(4, 0.1, F32)},
        ]
    ), {}


def importance_overweight(bad: bool):
    top = 9.0 if bad else 1.5  # 3 of 6 features: 27/30 = 90% vs 4.5/7.5 = 60% of the weight
    scores = [top, top, top, 1.0, 1.0, 1.0]
    importances = {f"feature_importance/weight/f{i}": v for i, v in enumerate(scores)}
    return train([importances]), {}


def tree_depth(bad: bool):
    # two trees of five nodes: stumps of depth 1, or chains reaching depth 4
    one = [0, 1, 1, 1, 1] if bad else [0, 1, 2, 3, 4]
    tree = np.array([0] * 5 + [1] * 5, F32)
    return train([{"trees/tree": tree, "trees/depth": np.array(one * 2, F32)}]), {"depth": "4"}


CASES: dict[str, tuple[type, Callable[[bool], tuple[list, dict[str, str]]], list[int]]] = {
    "FeatureImportanceOverweight": (FeatureImportanceOverweight, importance_overweight, [0]),
    "TreeDepth": (TreeDepth, tree_depth, [0]),
    "VanishingGradient": (VanishingGradient, vanishing, [3, 4]),
    "ExplodingTensor": (ExplodingTensor, exploding, [2]),
    "LossNotDecreasing": (LossNotDecreasing, loss_not_decreasing, [20]),
    "Overfit": (Overfit, overfit, [8, 9, 13, 14]),
    "Overtraining": (Overtraining, overtraining, [9, 10]),  # delta 0.01: 0.95 beats 1.0
    "WeightUpdateRatio": (WeightUpdateRatio, weight_update_ratio, [1, 2, 3]),
    "AllZero": (AllZero, all_zero, [0]),
    "UnchangedTensor": (UnchangedTensor, unchanged, [2]),
    "DeadRelu": (DeadRelu, dead_relu, [0]),
    "TensorVariance": (TensorVariance, tensor_variance, [0]),
    "SaturatedActivation": (SaturatedActivation, saturated, [0]),
    "PoorWeightInitialization": (PoorWeightInitialization, poor_init, [0]),
    "ClassImbalance": (ClassImbalance, class_imbalance, [0]),
    "Confusion": (Confusion, confusion, [0]),
    "CheckInputImages": (CheckInputImages, input_images, [0]),
    "NLPSequenceRatio": (NLPSequenceRatio, nlp_ratio, [0]),
    "NaNInfRootCause": (NaNInfRootCause, nan_root, [1]),
    "GradientNormSpike": (GradientNormSpike, grad_spike, [25]),
    "LossSpike": (LossSpike, loss_spike, [25]),
    "WeightsNotUpdating": (WeightsNotUpdating, not_updating, [1]),
    "LowPrecisionRange": (LowPrecisionRange, low_precision, [0]),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_fires_on_the_problem_and_not_on_a_near_miss(tmp_path: Path, name: str) -> None:
    cls, make, expected = CASES[name]
    steps, params = make(True)
    assert fired_steps(cls(build(tmp_path / "bad", steps), **params)) == expected
    steps, params = make(False)
    assert fired_steps(cls(build(tmp_path / "ok", steps), **params)) == []


def test_every_builtin_has_a_synthetic_case() -> None:
    # TrainingLoop judges facts only a training loop produces: tests/pytorch/test_training_loop.py;
    # AccuracyAtChance, FrozenLayer and UnnormalisedInput: tests/rules/test_cause_rules.py
    elsewhere = {"TrainingLoop", "AccuracyAtChance", "FrozenLayer", "UnnormalisedInput"}
    # the MoE rules and UpdateNormSpike: tests/test_moe_health.py (synthetic and trained)
    elsewhere |= {"DeadExperts", "RouterCollapse", "ExpertImbalance", "UpdateNormSpike"}
    covered = set(CASES) | {"SimilarAcrossRuns", "StalledTrainingRule"} | elsewhere
    assert covered == set(BUILTIN_RULES)


def test_similar_across_runs(tmp_path: Path) -> None:
    base = build(tmp_path / "a", train([{"fc.weight": np.ones(4, F32)}] * 2))
    same = build(tmp_path / "b", train([{"fc.weight": np.ones(4, F32) * (1 + 1e-7)}] * 2))
    other = build(
        tmp_path / "c", train([{"fc.weight": np.ones(4, F32)}, {"fc.weight": np.zeros(4, F32)}])
    )
    assert fired_steps(SimilarAcrossRuns(base, other_trials=[same])) == []
    rule = SimilarAcrossRuns(base, other_trials=[other])
    findings = [f for f in iter_findings(rule) if f.triggered]
    assert [f.step for f in findings] == [1] and "differs from" in findings[0].message
    from tensortap.exceptions import InvalidConfigError

    with pytest.raises(InvalidConfigError, match="exactly one other trial"):
        SimilarAcrossRuns(base)


def test_nan_root_cause_names_the_first_forward_tensor(tmp_path: Path) -> None:
    steps, _ = nan_root(True)
    finding = next(f for f in iter_findings(NaNInfRootCause(build(tmp_path, steps))) if f.triggered)
    assert finding.details["origin"] == "fc2_output_0"
    assert finding.details["phase"] == "forward"
    assert "in the forward pass" in finding.message


def test_nan_root_cause_in_backward(tmp_path: Path) -> None:
    ok, nan = np.ones(3, F32), np.array([np.nan], F32)
    steps = train(
        [
            {
                "fc1_output_0": ok,
                "loss": 1.0,
                "gradient/fc1.weight": nan,
                "gradient/fc2.weight": nan,
            },
        ]
    )
    finding = next(f for f in iter_findings(NaNInfRootCause(build(tmp_path, steps))) if f.triggered)
    # gradients flow backward: the last layer's gradient is where it started
    assert finding.details["origin"] == "gradient/fc2.weight"
    assert "backward pass" in finding.message


def test_exploding_tensor_from_reductions_only(tmp_path: Path) -> None:
    from tensortap import ReductionConfig

    builder = TrialBuilder(tmp_path, reduction_config=ReductionConfig(reductions=["min", "max"]))
    builder.step({"w.weight": np.ones(3, F32)})
    builder.step({"w.weight": np.array([1, np.inf, 1], F32)})
    assert fired_steps(ExplodingTensor(builder.close())) == [1]


def test_stalled_training(tmp_path: Path) -> None:
    builder = TrialBuilder(tmp_path)
    builder.step({"loss": 1.0})
    builder.flush()
    trial = create_trial(tmp_path)
    # training is still open but publishes nothing more: the rule fires once it waited long enough
    stop = threading.Event()
    summary = invoke_rule(
        StalledTrainingRule(trial, threshold="0.2"),
        timeout=30,
        stop=stop,
        on_finding=lambda f: stop.set() if f.triggered else None,
    )
    assert summary.triggered == 1 and "no new step for" in summary.findings[0].message
    # it fired on the wait it measured reaching the threshold (the rule's own figure: no time
    # is measured here)
    value = summary.findings[0].value
    assert value is not None and value >= 0.2, value
    builder.close()
    # training that ended never stalls
    ended = create_trial(tmp_path)
    assert invoke_rule(StalledTrainingRule(ended, threshold="0.01")).triggered == 0


def test_loss_not_decreasing_compares_with_newest_step_at_or_before(tmp_path: Path) -> None:
    builder = TrialBuilder(tmp_path)
    saved = {0: 1.0, 7: 0.5, 12: 0.9, 25: 0.6}  # 12 vs 0 dropped; 25 vs 12 dropped
    for s in range(26):
        if s in saved:
            builder.step({"loss": saved[s]})
        else:
            builder.skip()
    findings = [
        f for f in iter_findings(LossNotDecreasing(builder.close(), num_steps=10)) if f.tensors
    ]
    assert [(f.step, f.details.get("previous_step")) for f in findings] == [(12, 0), (25, 12)]
    assert not any(f.triggered for f in findings)
    builder = TrialBuilder(tmp_path / "rise")
    for s in range(26):
        if s in saved:
            builder.step({"loss": {0: 1.0, 7: 0.5, 12: 0.9, 25: 0.95}[s]})
        else:
            builder.skip()
    hits = [
        f for f in iter_findings(LossNotDecreasing(builder.close(), num_steps=10)) if f.triggered
    ]
    assert [(f.step, f.details["previous_step"]) for f in hits] == [(25, 12)]
    assert "rose 5.56% from 0.9 at step 12 to 0.95 at step 25" in hits[0].message


def test_unchanged_tensor_cannot_fire_before_num_steps(tmp_path: Path) -> None:
    steps = train([{"fc.weight": np.ones(3, F32)}] * 4)
    findings = list(iter_findings(UnchangedTensor(build(tmp_path, steps), num_steps=4)))
    assert [f.triggered for f in findings] == [False, False, False, True]
    assert [f.outcome.value for f in findings[:3]] == ["skipped"] * 3


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_global_only_trial_is_judged(tmp_path: Path, name: str) -> None:
    """A script that never calls ``set_mode`` writes GLOBAL steps only (smdebug's too): every
    rule judges them as the steps of the mode it judges (a rule of EVAL steps, such as
    Confusion, included), and finds what it finds on TRAIN or EVAL steps."""
    cls, make, expected = CASES[name]
    steps, params = make(True)
    if len({mode for mode, _ in steps}) > 1:
        pytest.skip("the case compares modes")
    unmoded = [("global", tensors) for _, tensors in steps]
    assert fired_steps(cls(build(tmp_path / "bad", unmoded), **params)) == expected


@pytest.mark.parametrize(
    ("name", "mode", "reason"),
    [
        ("WeightUpdateRatio", "eval", "EVAL steps are not training steps"),
        ("WeightsNotUpdating", "eval", "EVAL steps are not training steps"),
        ("LossSpike", "eval", "EVAL losses are not judged (mode TRAIN)"),
        ("Confusion", "train", "TRAIN steps are not judged (mode EVAL: predictions made while"),
    ],
)
def test_no_data_says_which_steps_were_not_judged(
    tmp_path: Path, name: str, mode: str, reason: str
) -> None:
    """A rule that read the trial but judged none of its steps (they are of a mode it does not
    judge) ends NoData saying so, not "it read no saved value"."""
    cls, make, _ = CASES[name]
    steps, params = make(True)
    other = [(mode, tensors) for _, tensors in steps]
    summary = invoke_rule(cls(build(tmp_path / "t", other), **params))
    assert summary.status.value == "NoData"
    assert reason in summary.details and "no saved value" not in summary.details


def test_units_dead_from_the_first_step_name_the_initialisation_as_evidence(
    tmp_path: Path,
) -> None:
    """ReLU units dead at the first saved training step, before any update, and still dead
    five steps on came so from the set-up: DeadRelu names poor_init, as evidence that needs
    harm. Units that died during training stay dead_relu."""
    from tensortap.rules import DeadRelu

    rng = np.random.default_rng(0)
    live = rng.normal(0, 1, (32, 16)).astype(F32)
    dead = np.zeros((32, 16), F32)
    for name, dead_from in (("start", 0), ("later", 2)):
        steps = train(
            [
                {"relu1/relu_output_0": dead if s >= dead_from else np.maximum(live, 0)}
                for s in range(8)
            ]
        )
        found = [f for f in iter_findings(DeadRelu(build(tmp_path / name, steps))) if f.triggered]
        problem = next(f for f in found if f.severity is not None and f.severity.value == "problem")
        if name == "start":
            assert problem.details["cause"] == "poor_init" and problem.details["needs_harm"]
            assert problem.details["symptom"] == "dead_relu"
            assert "already at the first saved training step, before any update" in (
                problem.message
            )
        else:
            assert problem.details["cause"] == "dead_relu" and "needs_harm" not in problem.details
