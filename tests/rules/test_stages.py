"""A new stage of training (a ``fit`` of another model, or of one compiled again with another
loss: ``training_loop/stage``) starts the rules that compare losses over time again: a
pre-trained encoder under a new head for a second task has another loss on another scale (a
stranger's healthy Keras transfer script was "training on has made the model far worse":
the binary head's validation loss 4.2x the 10-class pre-training's best)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import tensortap as tt
from tensortap.rules import (
    AccuracyAtChance,
    ClassImbalance,
    LossNotDecreasing,
    LossSpike,
    Overfit,
    Overtraining,
    invoke_rule,
)
from tensortap.rules._finding import Severity
from tensortap.rules._invoker import RuleSummary, walk
from tensortap.testing import TrialBuilder
from tensortap.trials import Trial

F32 = np.float32


def two_stages(path: Path, marked: bool) -> Trial:
    """60 TRAIN steps of a 10-class task (loss 2.3 -> 0.1), then 60 of a binary one (0.69 ->
    0.45), a validation pass of 3 steps every 10 at 1.05 times the training loss; the binary
    task's first step marked as a new stage with ``marked``."""
    builder = TrialBuilder(path)
    for stage, (start, end) in enumerate(((2.3, 0.1), (0.69, 0.45))):
        train = np.geomspace(start, end, 60)
        for i in range(60):
            values = {"loss": F32(train[i])}
            if stage and i == 0 and marked:
                values["training_loop/stage"] = np.asarray(1)
            builder.step(values, mode="train")
            if i % 10 == 9:
                for _ in range(3):
                    builder.step({"loss": F32(1.05 * train[i])}, mode="eval")
    return builder.close()


RULES = [
    (Overtraining, {}),
    (LossSpike, {}),
    (LossNotDecreasing, {"num_steps": 10}),
    (Overfit, {}),
]


def _summary(trial: Trial, cls: type, params: dict, bulk: bool) -> RuleSummary:
    rule = cls(trial, **params)
    summary = RuleSummary(rule.rule_name)
    for found in walk([rule], timeout=0, bulk=bulk):
        summary.add(found)
    return summary.finish(rule.no_data_reason())


def test_the_second_stage_is_not_judged_against_the_first(tmp_path: Path) -> None:
    unmarked = two_stages(tmp_path / "unmarked", marked=False)
    # without the stage: the binary task's losses read as a model made far worse
    assert invoke_rule(Overtraining(unmarked)).worst_severity is Severity.PROBLEM
    assert invoke_rule(LossSpike(unmarked)).triggered
    marked = two_stages(tmp_path / "marked", marked=True)
    for cls, params in RULES:
        summary = invoke_rule(cls(marked, **params))
        assert summary.worst_severity in (None, Severity.ADVICE), (cls, summary.findings)


@pytest.mark.parametrize(("cls", "params"), RULES)
def test_stages_are_judged_alike_step_by_step_and_in_bulk(
    tmp_path: Path, cls: type, params: dict
) -> None:
    trial = two_stages(tmp_path, marked=True)
    live, bulk = _summary(trial, cls, params, False), _summary(Trial(tmp_path), cls, params, True)
    assert [f.to_dict() for f in live.findings] == [f.to_dict() for f in bulk.findings]
    assert (live.status, live.judged) == (bulk.status, bulk.judged)


def two_tasks(
    path: Path, marked: bool, accuracy: tuple[float, float], train_steps: tuple[int, int]
) -> Trial:
    """A 10-class task, then a binary one, each of ``train_steps`` TRAIN steps (32 labels
    each, predicted right), an evaluation pass of two batches of 100 every 10 TRAIN steps at
    the task's ``accuracy``; the binary task's first step marked as a new stage with
    ``marked``."""
    rng = np.random.default_rng(0)
    hook = tt.Hook(
        path,
        save_config=tt.SaveConfig(save_interval=1),
        include_collections=["labels", "predictions", "training_loop"],
    )
    for task, (classes, acc, steps) in enumerate(zip((10, 2), accuracy, train_steps)):
        for i in range(steps):
            hook.set_mode(tt.modes.TRAIN)
            if task and i == 0 and marked:
                hook.save_tensor("training_loop/stage", np.asarray(1), "training_loop")
            y = rng.integers(0, classes, 32)
            hook.save_tensor("labels", y, collections="labels")
            hook.save_tensor("predictions", y, collections="predictions")
            hook.next_step()
            if i % 10 == 9:
                hook.set_mode(tt.modes.EVAL)
                for _ in range(2):
                    y = rng.integers(0, classes, 100)
                    p = np.where(rng.random(100) < acc, y, (y + 1) % classes)
                    hook.save_tensor("labels", y, collections="labels")
                    hook.save_tensor("predictions", p, collections="predictions")
                    hook.next_step()
    hook.close()
    return tt.create_trial(path)


def test_a_new_tasks_labels_are_counted_apart_from_the_last_ones(tmp_path: Path) -> None:
    """ClassImbalance: a balanced binary task after a balanced 10-class pre-training is not
    "8 classes far rarer than 2" (its labels counted with the first task's)."""
    steps = (30, 200)
    unmarked = two_tasks(tmp_path / "unmarked", False, (0.9, 0.9), steps)
    assert invoke_rule(ClassImbalance(unmarked)).triggered
    marked = invoke_rule(ClassImbalance(two_tasks(tmp_path / "marked", True, (0.9, 0.9), steps)))
    assert not marked.triggered, marked.findings


def test_a_new_task_at_chance_is_not_the_last_tasks_fit_lost(tmp_path: Path) -> None:
    """AccuracyAtChance: a second task at chance to the end (its labels shuffled) after a
    first task learned well is "the labels do not follow from the inputs", not training on
    too long (the first task's passes above chance are another model's)."""
    args = ((0.9, 0.5), (40, 40))
    unmarked = invoke_rule(AccuracyAtChance(two_tasks(tmp_path / "unmarked", False, *args)))
    assert unmarked.gravest is not None and unmarked.gravest.details["cause"] == "overtraining"
    marked = invoke_rule(AccuracyAtChance(two_tasks(tmp_path / "marked", True, *args)))
    gravest = marked.gravest
    assert gravest is not None and gravest.severity is Severity.PROBLEM
    assert gravest.details["cause"] == "no_learnable_signal", gravest.message


@pytest.mark.parametrize(
    ("cls", "args"),
    [(ClassImbalance, ((0.9, 0.9), (30, 200))), (AccuracyAtChance, ((0.9, 0.5), (40, 40)))],
)
def test_the_outcome_rules_stages_are_judged_alike_step_by_step_and_in_bulk(
    tmp_path: Path, cls: type, args: tuple
) -> None:
    two_tasks(tmp_path, True, *args)
    live, bulk = _summary(Trial(tmp_path), cls, {}, False), _summary(Trial(tmp_path), cls, {}, True)
    assert [f.to_dict() for f in live.findings] == [f.to_dict() for f in bulk.findings]
    assert (live.status, live.judged) == (bulk.status, bulk.judged)


def test_a_weight_name_that_holds_another_models_weight_is_not_an_update(tmp_path: Path) -> None:
    """Two models of different sizes fitted one after the other (a new stage) name their
    weights alike (``net.0.weight``): the rules that compare a weight with its previous saved
    step compare like with like. WeightUpdateRatio raised a broadcast error on a stranger's
    healthy script (shapes (128, 30) and (8, 30)), UnchangedTensor too."""
    from tensortap.rules import UnchangedTensor, WeightUpdateRatio

    rng = np.random.default_rng(0)
    builder = TrialBuilder(tmp_path)
    weights = {"net.0.weight": "weights"}
    for rows, first in ((8, 0), (128, 6)):
        w = rng.normal(size=(rows, 30)).astype(F32)
        for i in range(6):
            values = {"net.0.weight": w}
            if i == 0 and first:
                values["training_loop/stage"] = np.asarray(1)
            builder.step(values, collections={**weights, "training_loop/stage": "training_loop"})
            w = w - 0.001 * rng.normal(size=w.shape).astype(F32)
    trial = builder.close()
    ratio = invoke_rule(WeightUpdateRatio(trial, num_steps=1))
    assert ratio.status.value == "NoIssuesFound", ratio
    assert ratio.judged == 10  # every step but each model's first (nothing to compare it with)
    unchanged = invoke_rule(UnchangedTensor(trial, tensor_regex=["net.0.weight"], num_steps=3))
    assert unchanged.status.value == "NoIssuesFound", unchanged
