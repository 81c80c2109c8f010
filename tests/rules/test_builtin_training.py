"""Each built-in rule fires on a real small PyTorch run that has the problem and stays quiet on a
healthy twin of the same run (tests/helpers/rule_runs.py trains them)."""

from __future__ import annotations

import dataclasses
import threading
from pathlib import Path
from typing import Any

import pytest

from tensortap import create_trial
from tensortap.rules import (
    BUILTIN_RULES,
    SimilarAcrossRuns,
    StalledTrainingRule,
    invoke_rule,
    rule_configs,
)
from tensortap.rules._causes import CAUSES as CAUSE_VOCABULARY
from tests.helpers import rule_runs

# rule -> (parameters, run with the problem, healthy twin)
CASES: dict[str, tuple[dict[str, Any], str, str]] = {
    "VanishingGradient": ({}, "deep_sigmoid", "healthy"),
    "ExplodingTensor": ({}, "huge_lr", "healthy"),
    "NaNInfRootCause": ({}, "huge_lr", "healthy"),
    "DeadRelu": ({}, "dead_relu", "healthy"),
    "AllZero": ({}, "dead_relu", "healthy"),
    # four EVAL steps (EVAL losses are preferred): compare every 3
    "LossNotDecreasing": ({"num_steps": "3"}, "zero_lr", "healthy"),
    "UnchangedTensor": ({}, "zero_lr", "healthy"),
    "WeightUpdateRatio": ({"num_steps": "10"}, "zero_lr", "healthy"),
    "WeightsNotUpdating": ({}, "no_optimizer_step", "healthy"),
    "Overfit": ({}, "tiny_data", "healthy"),
    "Overtraining": ({"patience_train": "10"}, "tiny_data", "healthy"),
    "TensorVariance": ({"max_threshold": "100"}, "poor_init", "healthy"),
    "SaturatedActivation": ({}, "saturated_tanh", "healthy"),
    "PoorWeightInitialization": ({}, "poor_init", "healthy"),
    "ClassImbalance": ({}, "imbalanced", "trained"),
    # a 96%-accurate MLP still has a class at 88% recall on held-out digits
    "Confusion": ({"min_diag": "0.8"}, "swapped_labels", "trained"),
    "CheckInputImages": ({"threshold_samples": "100"}, "raw_images", "images"),
    "NLPSequenceRatio": ({}, "padded_tokens", "tokens"),
    "GradientNormSpike": ({}, "spike", "healthy_minibatch"),
    "LossSpike": ({}, "spike", "healthy_minibatch"),
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("runs")
    cache: dict[str, Path] = {}
    return lambda name: rule_runs.get(root, name, cache)


def test_every_builtin_is_tried_on_training() -> None:
    elsewhere = {"SimilarAcrossRuns", "StalledTrainingRule"}  # tested on their own below
    elsewhere |= {"LowPrecisionRange"}  # tests/rules/test_low_precision.py, with real bf16
    elsewhere |= {"TrainingLoop"}  # tests/pytorch/test_training_loop.py, with the loops' faults
    # tests/rules/test_cause_rules.py (FrozenLayer with real training)
    elsewhere |= {"AccuracyAtChance", "FrozenLayer", "UnnormalisedInput"}
    xgboost = {"FeatureImportanceOverweight", "TreeDepth"}  # tests/xgboost/test_xgboost.py
    # tests/pytorch/test_moe_health.py: a tiny MoE trained collapsed and healthy; an update spike
    elsewhere |= {"DeadExperts", "RouterCollapse", "ExpertImbalance", "UpdateNormSpike"}
    assert set(CASES) | elsewhere | xgboost == set(BUILTIN_RULES)


@pytest.mark.parametrize("name", sorted(CASES))
def test_fires_on_the_buggy_run_and_not_on_its_healthy_twin(runs: Any, name: str) -> None:
    params, bad, good = CASES[name]
    summary = invoke_rule(BUILTIN_RULES[name](runs(bad), **params))
    assert summary.triggered, f"{name} missed the problem in {bad}: {summary}"
    assert summary.errors == 0
    quiet = invoke_rule(BUILTIN_RULES[name](runs(good), **params))
    assert quiet.triggered == 0, f"{name} false alarm on {good}: {quiet.findings[:2]}"
    assert quiet.evaluated > 0, f"{name} judged nothing on {good}: {quiet.skip_reasons}"


def test_nan_root_cause_points_at_the_forward_pass(runs: Any) -> None:
    summary = invoke_rule(BUILTIN_RULES["NaNInfRootCause"](runs("huge_lr")))
    finding = summary.findings[0]
    assert summary.triggered == 1  # once, where it started
    assert finding.details["phase"] == "forward"
    assert finding.details["origin"] == finding.tensors[0]


def test_similar_across_runs_on_reruns(runs: Any) -> None:
    same = invoke_rule(SimilarAcrossRuns(runs("healthy"), other_trials=[runs("healthy_rerun")]))
    assert same.triggered == 0 and same.evaluated > 0
    other = invoke_rule(SimilarAcrossRuns(runs("healthy"), other_trials=[runs("healthy_seed1")]))
    assert other.triggered and other.findings[0].step == 0


def test_stalled_training_on_a_paused_run(tmp_path: Path) -> None:
    resume = threading.Event()
    run = dataclasses.replace(rule_runs.HEALTHY, steps=6, pause_after=2, resume=resume)
    trainer = threading.Thread(target=rule_runs.train, args=(tmp_path / "run", run))
    trainer.start()
    try:
        stop = threading.Event()
        summary = invoke_rule(
            StalledTrainingRule(create_trial(tmp_path / "run"), threshold="0.3"),
            poll_interval=0.02,
            timeout=60,
            stop=stop,
            on_finding=lambda f: stop.set() if f.triggered else None,
        )
        assert summary.triggered == 1
    finally:
        resume.set()
        trainer.join(60)
    # once training ended, nothing stalls
    assert (
        invoke_rule(StalledTrainingRule(create_trial(tmp_path / "run"), threshold="0.3")).triggered
        == 0
    )


#: The causes a finding may name (details["cause"]): tensortap.diagnose()'s vocabulary.
CAUSES = set(CAUSE_VOCABULARY)
#: Rules whose findings the vocabulary has no word for (a spike of the loss, a zero tensor).
NO_CAUSE = {"LossSpike", "AllZero"}


@pytest.mark.parametrize("name", sorted(set(CASES) & set(rule_configs.RECOMMENDED) - NO_CAUSE))
def test_triggered_findings_name_their_cause(runs: Any, name: str) -> None:
    params, bad, _ = CASES[name]
    summary = invoke_rule(BUILTIN_RULES[name](runs(bad), **params))
    triggered = [f for f in summary.findings if f.triggered]
    assert triggered
    for finding in triggered:
        assert finding.details.get("cause") in CAUSES, finding
