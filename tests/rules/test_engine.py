"""The rules' engine (``rules/_engine.py``) judges many steps of a rule at once, from the
numbers the rule declared (``Rule.reads``) gathered out of the saved columns, and says exactly
what the walk step by step says: the same summaries (counts, findings with their words and
numbers, skip reasons, why nothing was judged, the collections asked for) on generated trials
of every shape the rules meet (losses and gradients raw or as reductions, missing, non-finite,
spiking, vanishing; EVAL passes, GLOBAL steps; biases; weights that move or not; a resumed
session that counts steps again; the vital signs ``vitals/loss`` and ``vitals/grad_norm`` at
every step or some), also when the steps arrive in two batches. Every built-in rule the engine
judges in bulk is compared here (a test says so), and a rule of a test's own gets bulk judging
by declaring its numbers alone."""

from __future__ import annotations

import functools
import inspect
import itertools
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import tensortap as tt
from tensortap.core._modes import ModeKeys
from tensortap.diagnosis import judge_trial
from tensortap.exceptions import InvalidConfigError
from tensortap.rules import (
    ExplodingTensor,
    FrozenLayer,
    GradientNormSpike,
    LossNotDecreasing,
    LossSpike,
    NaNInfRootCause,
    Overfit,
    Overtraining,
    PoorWeightInitialization,
    Rule,
    RuleSummary,
    VanishingGradient,
    WeightsNotUpdating,
)
from tensortap.rules._finding import StepRun
from tensortap.rules._invoker import walk
from tensortap.rules._numbers import Scalars
from tensortap.rules.builtin import BUILTIN_RULES
from tensortap.rules.builtin._common import loss_names

F32 = np.float32
SAVED = ["losses", "gradients", "biases", "weights"]

#: Every built-in rule the engine judges in bulk, at its defaults and with parameters that make
#: it fire on the generated trials (``test_every_rule_judged_in_bulk_is_compared``).
RULES: list[tuple[type[Rule], dict[str, Any]]] = [
    (ExplodingTensor, {}),
    (ExplodingTensor, {"only_nan": True, "collection_names": ["gradients", "losses"]}),
    (NaNInfRootCause, {}),
    (NaNInfRootCause, {"collection_names": ["losses"]}),
    (GradientNormSpike, {}),
    (GradientNormSpike, {"window": 4, "warmup": 3, "z_threshold": 2.0, "min_ratio": 1.0}),
    (LossSpike, {}),
    (LossSpike, {"window": 4, "warmup": 3, "z_threshold": 2.0, "min_ratio": 1.0}),
    (LossSpike, {"mode": ModeKeys.EVAL, "window": 3, "warmup": 3}),
    (VanishingGradient, {}),
    (VanishingGradient, {"threshold": 0.05}),
    (FrozenLayer, {}),
    (WeightsNotUpdating, {}),
    (PoorWeightInitialization, {}),
    (PoorWeightInitialization, {"steps": 2}),
    (Overfit, {}),
    (Overfit, {"ratio_threshold": 0.0}),
    (Overtraining, {}),
    (Overtraining, {"patience_train": 2, "patience_validation": 1}),
    (LossNotDecreasing, {}),
    (LossNotDecreasing, {"num_steps": 3, "diff_percent": 0.0}),
]


def write(path: Path, k: dict[str, Any]) -> None:
    """A training script's trial, shaped by the knobs ``k`` (see ``knobs``)."""
    rng = np.random.default_rng(k["seed"])
    layers = k["layers"]

    def session(hook: tt.Hook, steps: range) -> None:
        if k["reductions"]:  # and, in "both", the raw values too
            hook.get_collection("gradients").reduction_config = tt.ReductionConfig(
                norms=["l2"], abs_reductions=["mean"], save_raw_tensor=k["reductions"] == "both"
            )
        loss = 2.0
        weights = [rng.normal(size=(3, 2)).astype(F32) for _ in range(layers)]
        for t in steps:
            evaluating = k["eval_every"] and t % k["eval_every"] >= k["eval_every"] - k["eval_len"]
            if k["modes"]:
                hook.set_mode(tt.modes.EVAL if evaluating else tt.modes.TRAIN)
            loss = max(0.01, loss * float(rng.uniform(0.85, 1.1)))
            for n in range(k["losses"]):
                value: Any = F32(loss * (1 + n))
                r = rng.random()
                if r < k["odd"] / 3:
                    continue  # not saved at this step
                if r < k["odd"] / 2:
                    value = F32(rng.choice([np.nan, np.inf, loss * 50]))
                elif r < k["odd"] * 0.6:
                    value = np.full(3, value, dtype=F32)  # a loss of several elements
                hook.save_tensor("loss" if n == 0 else f"loss_{n}", value, collections="losses")
            if evaluating:
                hook.next_step()
                continue
            scale = 1e-9 if rng.random() < k["odd"] / 2 else float(rng.uniform(0.1, 2.0))
            if k.get("vitals") and (k["vitals"] == "every" or rng.random() < 0.7):
                spike = rng.random() < k["odd"] / 2
                vital = loss * (20 if spike else 1) if rng.random() >= k["odd"] / 4 else np.nan
                hook.save_vitals({"loss": vital, "grad_norm": scale * (30 if spike else 1)})
            for i in range(layers):
                if rng.random() < k["odd"] / 4:
                    continue
                grad = rng.normal(size=(3, 2)).astype(F32) * F32(scale)
                if rng.random() < k["odd"] / 6:
                    grad[0, 0] = rng.choice([np.nan, np.inf])
                hook.save_tensor(f"gradients/layer{i}.weight", grad, collections="gradients")
                if k["biases"]:
                    hook.save_tensor(f"layer{i}.bias", np.zeros(2, F32), collections="biases")
                    bias_grad = rng.normal(size=2).astype(F32) * F32(scale)
                    hook.save_tensor(f"gradients/layer{i}.bias", bias_grad, collections="gradients")
                if k["weights"]:
                    if k["weights"] == "moving":
                        weights[i] = weights[i] - F32(0.01) * grad
                    hook.save_tensor(f"layer{i}.weight", weights[i], collections="weights")
            hook.next_step()

    config = tt.SaveConfig(save_interval=1)
    with tt.Hook(path, save_config=config, include_collections=SAVED) as hook:
        session(hook, range(k["steps"]))
    if k["resume_at"] is not None:  # restarted from a checkpoint: some steps saved again
        with tt.Hook(path, save_config=config, include_collections=SAVED) as hook:
            again = min(k["resume_at"], k["steps"] - 1)
            if k["modes"]:  # TRAIN steps counted again (global steps never repeat)
                hook.continue_at(again, tt.modes.TRAIN)
            session(hook, range(again, again + 4))


knobs = st.fixed_dictionaries(
    {
        "seed": st.integers(0, 2**16),
        "steps": st.integers(3, 40),
        "modes": st.booleans(),
        "eval_every": st.sampled_from([0, 0, 4, 7]),
        "eval_len": st.integers(1, 2),
        "losses": st.integers(1, 2),
        "layers": st.integers(0, 3),
        "reductions": st.sampled_from([False, True, "both"]),
        "biases": st.booleans(),
        "weights": st.sampled_from([None, "moving", "stuck"]),
        "odd": st.sampled_from([0.0, 0.05, 0.3]),
        "resume_at": st.sampled_from([None, None, 2]),
        "split": st.sampled_from([None, 5]),
        "vitals": st.sampled_from([None, "every", "some"]),
    }
)


@settings(max_examples=70)
@given(k=knobs)
def test_judging_in_bulk_says_what_judging_step_by_step_says(tmp_path_factory, k) -> None:
    path = tmp_path_factory.mktemp("run")
    write(path, k)
    assert judged_per_rule(path, False, k["split"]) == judged_per_rule(path, True, k["split"])


def judged_per_rule(
    path: Path, bulk: bool, split: int | None, rules: Sequence[tuple[type[Rule], Any]] = ()
) -> list[dict[str, Any]]:
    """Each rule (of ``RULES`` unless given) walked alone (rules of one class share a name, so
    one walk per rule)."""
    out = []
    for cls, params in rules or RULES:
        trial = tt.create_trial(path)
        rule = cls(trial, **params)
        summary = RuleSummary(rule.rule_name)
        for start, end in ((0, split), (split, None)) if split else ((0, None),):
            if summary.errors:
                break
            for found in walk([rule], start, end, timeout=0, bulk=bulk):
                summary.add(found)
        summary.finish(rule.no_data_reason())
        row = dict(vars(summary))
        row["findings"] = [f.to_dict() for f in summary.findings]
        row["unjudged"] = dict(rule._unjudged)
        row["unjudged_order"] = list(rule._unjudged)  # (the first said first)
        row["asked"] = sorted(rule._asked)
        row["params"] = params
        out.append(row)
    return out


def test_the_recommended_rules_judge_a_trial_alike_in_bulk(tmp_path: Path) -> None:
    """judge_trial (the report, the diagnosis) walks in bulk: its summaries are those of the
    walk step by step, on a trial where every rule has something to say."""
    k = {
        "seed": 7, "steps": 60, "modes": True, "eval_every": 10, "eval_len": 2, "losses": 1,
        "layers": 2, "reductions": "both", "biases": True, "weights": "stuck", "odd": 0.05,
        "resume_at": None, "split": None, "vitals": None,
    }  # fmt: skip
    write(tmp_path, k)
    trial = tt.create_trial(tmp_path)
    bulk = judge_trial(trial)
    stepwise_trial = tt.create_trial(tmp_path)
    from tensortap.rules import create_rule, rule_configs

    rules = [
        create_rule(c.name, stepwise_trial, params=dict(c.parameters))
        for c in rule_configs.recommended(stepwise_trial.framework())
    ]
    summaries = {r.rule_name: RuleSummary(r.rule_name) for r in rules}
    for found in walk(rules, timeout=0, bulk=False):
        summaries[found.rule].add(found)
    for rule in rules:
        summaries[rule.rule_name].finish(rule.no_data_reason())
    assert [str(s) for s in bulk] == [str(s) for s in summaries.values()]
    assert any(s.triggered for s in bulk)  # the trial gives the rules something to say
    assert {s.rule for s in bulk if s.evaluated or s.skipped} == set(summaries)


def test_a_trial_of_several_workers_is_judged_step_by_step_alike(tmp_path: Path) -> None:
    from tensortap.testing import TrialBuilder

    for worker in (0, 1):
        builder = TrialBuilder(tmp_path, worker=worker, num_workers=2)
        for t in range(12):
            loss = F32(np.nan) if (worker, t) == (1, 9) else F32(1.0 / (t + 1) + worker)
            builder.step({"loss": loss, "gradients/fc.weight": np.full(4, 0.1 * (t + 1), F32)})
        builder.hook.close()
    assert judged_per_rule(tmp_path, False, None) == judged_per_rule(tmp_path, True, None)


def test_judging_in_bulk_evaluates_no_quiet_step(tmp_path: Path, monkeypatch) -> None:
    """On a long healthy run of saved numbers, the rules the engine judges in bulk are
    evaluated live (reading a step's block) only where the saved numbers do not say enough (the
    first steps PoorWeightInitialization reads raw), not at every step: their judgement runs
    over the gathered numbers."""
    with tt.Hook(
        tmp_path, save_config=tt.SaveConfig(save_interval=1), include_collections=SAVED
    ) as hook:
        hook.get_collection("gradients").reduction_config = tt.ReductionConfig(
            norms=["l2"], abs_reductions=["mean"]
        )
        hook.set_mode(tt.modes.TRAIN)
        rng = np.random.default_rng(1)
        for _ in range(3000):
            hook.save_tensor("loss", F32(1 + 0.01 * rng.random()), collections="losses")
            grad = rng.normal(size=8).astype(F32)
            hook.save_tensor("gradients/fc.weight", grad, collections="gradients")
            hook.next_step()
    calls: dict[str, int] = {}
    evaluate, step_block = Rule.evaluate, tt.Trial.step_block
    blocks = []

    def counted(self: Rule, step: int) -> Any:
        calls[self.rule_name] = calls.get(self.rule_name, 0) + 1
        return evaluate(self, step)

    def read(self: tt.Trial, step: int) -> Any:
        blocks.append(step)
        return step_block(self, step)

    monkeypatch.setattr(Rule, "evaluate", counted)
    monkeypatch.setattr(tt.Trial, "step_block", read)
    trial = tt.create_trial(tmp_path)
    rules = [cls(trial) for cls in (ExplodingTensor, NaNInfRootCause, GradientNormSpike, LossSpike,
                                    VanishingGradient, FrozenLayer, WeightsNotUpdating, Overfit,
                                    PoorWeightInitialization)]  # fmt: skip
    summaries = {r.rule_name: s for r, s in zip(rules, judge_trial(trial, rules), strict=True)}
    assert all(s.evaluated + s.skipped == 3000 for s in summaries.values())
    assert calls.get("ExplodingTensor", 0) == calls.get("NaNInfRootCause", 0) == 0
    assert max(calls.values(), default=0) <= 20, calls
    assert len(set(blocks)) <= 20, sorted(set(blocks))  # (the first training steps)


class _BreakingNumbers(Scalars):
    """The losses, gathered for two steps, then failing."""

    def gather(self, steps: np.ndarray) -> Any:
        yield from itertools.islice(super().gather(steps), 2)
        raise ValueError("bulk judging broke")


class _BrokenInBulk(Rule):
    """A rule whose numbers fail to gather after its first run of quiet steps."""

    def __init__(self, base_trial: Any) -> None:
        super().__init__(base_trial)
        self.reads(_BreakingNumbers(lambda step: loss_names(base_trial, True, None, step)))

    def judge(self, step: int, losses: Any) -> bool:
        return False


def test_a_rule_failing_in_bulk_is_an_error_of_that_rule_alone(tmp_path: Path) -> None:
    from tensortap.rules import RuleStatus

    write(tmp_path, {**_QUIET_RUN, "steps": 6})
    trial = tt.create_trial(tmp_path)
    broken, other = _BrokenInBulk(trial), ExplodingTensor(trial)
    broken_summary, other_summary = judge_trial(trial, [broken, other])
    assert broken_summary.status is RuleStatus.ERROR
    error = broken_summary.findings[0]
    assert error.step == 2 and "ValueError: bulk judging broke" in error.message
    assert "judge_steps" in (error.traceback or "")
    assert "in gather" in (error.traceback or "")
    assert broken_summary.evaluated == 2
    assert other_summary.evaluated == 6  # the other rules go on


class _LossAboveThree(Rule):
    """A rule of a test's own: it declares the losses it reads and judges them once."""

    def __init__(self, base_trial: Any) -> None:
        super().__init__(base_trial)
        names = functools.partial(loss_names, base_trial, True, None)
        self.reads(Scalars(names, none_saved="no loss saved at this step"))

    def judge(self, step: int, losses: Any) -> bool:
        above = [name for name, value in losses if not value <= 3.0]
        self.explain(f"{len(above)} losses above 3", tensors=above, value=len(above))
        return bool(above)


def test_a_rule_is_judged_in_bulk_by_declaring_its_numbers(tmp_path: Path, monkeypatch) -> None:
    """A new rule gets bulk judging by declaring its numbers, with no code of its own for it:
    the same summary both ways, and only the steps the saved numbers leave in doubt read
    live."""
    write(tmp_path, {**_QUIET_RUN, "steps": 40, "eval_every": 7, "odd": 0.3})
    trial = tt.create_trial(tmp_path)
    assert _LossAboveThree(trial).judges_in_bulk
    calls: list[int] = []
    evaluate = Rule.evaluate

    def counted(self: Rule, step: int) -> Any:
        calls.append(step)
        return evaluate(self, step)

    monkeypatch.setattr(Rule, "evaluate", counted)
    bulk = judged_per_rule(tmp_path, True, None, [(_LossAboveThree, {})])
    doubtful = len(calls)  # (losses saved as several elements, or not finite: read live)
    calls.clear()
    stepwise = judged_per_rule(tmp_path, False, None, [(_LossAboveThree, {})])
    assert bulk == stepwise
    assert 0 < bulk[0]["triggered"] < bulk[0]["evaluated"] and bulk[0]["skipped"]
    assert doubtful < len(calls) == bulk[0]["evaluated"] + bulk[0]["skipped"]


def test_a_trial_without_the_collections_asked_for_is_judged_alike(tmp_path: Path) -> None:
    """A rule that finds none of its tensors at any step asks for its collections in bulk
    as it does step by step (its NoData reason names them)."""
    with tt.Hook(tmp_path, save_config=tt.SaveConfig(save_interval=1)) as hook:
        for t in range(8):
            hook.save_tensor("accuracy", F32(0.1 * t), collections="metrics")
            hook.next_step()
    assert judged_per_rule(tmp_path, False, None) == judged_per_rule(tmp_path, True, None)
    row = judged_per_rule(tmp_path, True, None, [(ExplodingTensor, RULES[1][1])])[0]
    assert row["asked"] == ["gradients", "losses"] and "no tensor in gradients" in row["details"]


def test_the_rules_judged_step_by_step_say_their_quiet_steps_in_runs(tmp_path: Path) -> None:
    """In bulk, a rule that declares nothing is evaluated at every step, in the walk, and what
    it says quietly comes out in runs (a summary counts them as the findings)."""
    write(tmp_path, {**_QUIET_RUN, "steps": 30})
    from tensortap.rules import AllZero

    trial = tt.create_trial(tmp_path)
    rule = AllZero(trial)
    assert not rule.judges_in_bulk
    found = list(walk([rule], timeout=0, bulk=True))
    assert any(isinstance(f, StepRun) and len(f) > 1 for f in found)
    assert judged_per_rule(tmp_path, True, None, [(AllZero, {})]) == judged_per_rule(
        tmp_path, False, None, [(AllZero, {})]
    )


def test_every_rule_judged_in_bulk_is_compared(tmp_path: Path) -> None:
    write(tmp_path, {**_QUIET_RUN, "steps": 2})
    trial = tt.create_trial(tmp_path)

    def in_bulk(cls: type[Rule]) -> bool:
        for extra in ({}, {"other_trials": [tt.create_trial(tmp_path)]}):
            try:
                return cls(trial, **extra).judges_in_bulk
            except InvalidConfigError:  # a rule that compares runs, or needs a parameter
                continue
        declares = "self.reads(" in inspect.getsource(cls) or cls.not_judged is not Rule.not_judged
        assert not declares, f"{cls.__name__} cannot be made to tell"
        return False

    assert {cls for cls in BUILTIN_RULES.values() if in_bulk(cls)} == {cls for cls, _ in RULES}


_QUIET_RUN = {
    "seed": 1, "steps": 6, "modes": True, "eval_every": 0, "eval_len": 1, "losses": 1,
    "layers": 1, "reductions": False, "biases": False, "weights": None, "odd": 0.0,
    "resume_at": None, "split": None,
}  # fmt: skip


def test_what_a_rule_said_of_steps_it_did_not_judge_is_counted_in_step_order(
    tmp_path: Path,
) -> None:
    """A rule's reasons for judging nothing are counted in the order the steps said them, in
    bulk too (a rule that ends NoData names the first of equally many first)."""
    with tt.Hook(tmp_path, save_config=tt.SaveConfig(save_interval=1)) as hook:
        for t in range(6):
            hook.set_mode(tt.modes.TRAIN if t < 3 else tt.modes.EVAL)
            hook.save_tensor("loss", F32(1.0 + 0.1 * t), collections="losses")
            hook.next_step()
    eval_losses = [(LossSpike, {"mode": ModeKeys.EVAL, "window": 3, "warmup": 3})]
    bulk = judged_per_rule(tmp_path, True, None, eval_losses)
    assert bulk == judged_per_rule(tmp_path, False, None, eval_losses)
    assert list(bulk[0]["unjudged"]) == [
        "TRAIN losses are not judged (mode EVAL)",
        "the baseline is warming up: LossSpike judges a value against the median of the values "
        "before it, from value 4 on",
    ]
