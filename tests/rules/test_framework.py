"""The rule framework: Rule, req_tensors, invoke_rule, findings, parameters, custom rules."""

from __future__ import annotations

import re
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tensortap import ReductionConfig
from tensortap.exceptions import InvalidConfigError, RuleError, RuleEvaluationConditionMet
from tensortap.rules import (
    ExplodingTensor,
    Outcome,
    Rule,
    RuleStatus,
    SaturatedActivation,
    VanishingGradient,
    create_rule,
    invoke_rule,
    iter_findings,
    load_rule_class,
    rule_configs,
)
from tensortap.testing import TrialBuilder

HERE = Path(__file__).parent
CUSTOM = HERE / "my_custom_rule.py"


def grad_trial(path: Path, scales: list[float], reductions: bool = False):
    builder = TrialBuilder(
        path,
        reduction_config=ReductionConfig(abs_reductions=["mean"], norms=["l2"])
        if reductions
        else None,
    )
    rng = np.random.default_rng(0)
    for scale in scales:
        builder.step(
            {
                "gradient/fc1.weight": scale * rng.standard_normal((4, 3)).astype(np.float32),
                "gradient/fc2.weight": scale * rng.standard_normal(5).astype(np.float32),
            }
        )
    return builder.close()


# -- the seed's custom rule --
@pytest.mark.parametrize("cls", ["CustomGradientRule", "CustomGradientRuleDirect"])
def test_seed_custom_rule_from_file_with_string_threshold(tmp_path: Path, cls: str) -> None:
    trial = grad_trial(tmp_path, [0.1, 0.1, 100.0, 0.1])
    rule = create_rule(cls, trial, source=CUSTOM, params={"threshold": "0.5"})
    assert rule.threshold == 0.5  # type: ignore[attr-defined]
    with pytest.raises(RuleEvaluationConditionMet) as info:
        invoke_rule(rule, raise_eval_cond=True)
    assert info.value.step == 2 and info.value.rule_name == cls
    assert "Evaluation of the rule" in str(info.value)
    summary = invoke_rule(create_rule(cls, trial, source=CUSTOM, params={"threshold": "0.5"}))
    assert summary.status is RuleStatus.ISSUES_FOUND
    assert [f.step for f in summary.findings] == [2]
    assert summary.evaluated == 4


def test_seed_rule_runs_when_only_reductions_were_saved(tmp_path: Path) -> None:
    # smdebug's req_tensors.fetch() read raw values and silently never ran the rule here.
    trial = grad_trial(tmp_path, [0.1, 100.0], reductions=True)
    assert not trial.tensor("gradient/fc1.weight").values()  # nothing raw
    rule = create_rule("CustomGradientRule", trial, source=CUSTOM, params={"threshold": 1})
    summary = invoke_rule(rule)
    assert [f.step for f in summary.findings] == [1] and summary.skipped == 0


def test_error_in_user_rule_names_rule_step_and_traceback(tmp_path: Path, caplog) -> None:
    trial = grad_trial(tmp_path, [1.0] * 4)
    rule = create_rule("BrokenRule", trial, source=CUSTOM)
    with pytest.raises(RuleError) as info:
        invoke_rule(rule)
    assert info.value.step == 2 and info.value.rule_name == "BrokenRule"
    assert "my_custom_rule.py" in info.value.traceback and "KeyError" in info.value.traceback
    assert "BrokenRule failed at step 2" in caplog.text
    findings = list(iter_findings(create_rule("BrokenRule", trial, source=CUSTOM)))
    assert [f.outcome for f in findings] == [Outcome.OK, Outcome.OK, Outcome.ERROR]


def test_custom_rule_file_errors(tmp_path: Path) -> None:
    trial = grad_trial(tmp_path / "t", [1.0])
    with pytest.raises(InvalidConfigError, match="does not exist"):
        load_rule_class(tmp_path / "nope.py", "X")
    with pytest.raises(InvalidConfigError, match="defines no class 'Nope'.*CustomGradientRule"):
        load_rule_class(CUSTOM, "Nope")
    bad = tmp_path / "bad.py"
    bad.write_text("def broken(:\n")
    with pytest.raises(InvalidConfigError, match="SyntaxError"):
        load_rule_class(bad, "X")
    notrule = tmp_path / "notrule.py"
    notrule.write_text("class X:\n    pass\n")
    with pytest.raises(InvalidConfigError, match="not a subclass of tensortap.rules.Rule"):
        load_rule_class(notrule, "X")
    with pytest.raises(InvalidConfigError, match="no built-in rule 'Nope'"):
        create_rule("Nope", trial)
    with pytest.raises(InvalidConfigError, match="takes no other_trials"):
        create_rule("VanishingGradient", trial, other_trials=[trial])


# -- parameters --
def test_parameters_parse_from_strings(tmp_path: Path) -> None:
    trial = grad_trial(tmp_path, [1.0])
    rule = SaturatedActivation(
        trial, threshold_tanh="(-5, 5.5)", threshold_layer="30", tensor_regex="a.*,b.*"
    )
    assert rule.threshold_tanh == (-5.0, 5.5) and rule.threshold_layer == 30.0
    assert rule.tensor_regex == ["a.*", "b.*"]
    rule = ExplodingTensor(trial, only_nan="true", collection_names="weights, gradients")
    assert rule.only_nan is True and rule.collection_names == ["weights", "gradients"]
    assert VanishingGradient(trial, threshold="1e-5").threshold == 1e-5
    assert VanishingGradient(trial, threshold=1e-5).threshold == 1e-5
    from tensortap.modes import EVAL
    from tensortap.rules import LossNotDecreasing

    assert LossNotDecreasing(trial, mode="eval", num_steps="5").mode == EVAL


@pytest.mark.parametrize(
    ("cls", "params", "match"),
    [
        (VanishingGradient, {"treshold": "0.5"}, "VanishingGradient has no parameter 'treshold'"),
        (VanishingGradient, {"threshold": "abc"}, "'threshold' got 'abc', which is not a number"),
        (VanishingGradient, {"threshold": "-1"}, "'threshold' must be a number >= 0"),
        (ExplodingTensor, {"only_nan": "maybe"}, "'only_nan' got 'maybe', which is not a bool"),
        (SaturatedActivation, {"threshold_tanh": "(1, 2, 3)"}, "expected 2 values, got 3"),
        (SaturatedActivation, {"threshold_tanh": "(5, 1)"}, "'threshold_tanh' must be a range"),
    ],
)
def test_bad_parameters_fail_at_construction(
    tmp_path: Path, cls: type[Rule], params: dict[str, Any], match: str
) -> None:
    trial = grad_trial(tmp_path, [1.0])
    with pytest.raises(InvalidConfigError, match=match):
        cls(trial, **params)


def test_rule_configs_name_defaults_and_collections() -> None:
    config = rule_configs.vanishing_gradient()
    assert config.name == "VanishingGradient"
    assert config.parameters == {"threshold": "1e-07", "relative_threshold": "0.0001"}
    assert [c.name for c in config.collections] == ["gradients"]
    assert rule_configs.loss_not_decreasing(num_steps="20").parameters["num_steps"] == "20"
    assert rule_configs.exploding_tensor(collection_names="weights").to_dict()["collections"] == [
        {"name": "weights", "parameters": {}}
    ]
    with pytest.raises(InvalidConfigError, match="DeadRelu has no parameter 'x'"):
        rule_configs.dead_relu(x="1")
    with pytest.raises(InvalidConfigError, match="not a number"):
        rule_configs.dead_relu(threshold_layer="many")


def test_a_rule_is_registered_by_its_import_alone() -> None:
    """BUILTIN_RULES, the public names and the rule_configs helpers all follow from the
    imports in tensortap.rules.builtin: adding a rule touches no list elsewhere."""
    import tensortap.rules as rules
    from tensortap.rules import builtin
    from tensortap.rules.builtin import BUILTIN_RULES

    assert set(builtin.__all__) - {"BUILTIN_RULES"} == set(BUILTIN_RULES)
    for name, cls in BUILTIN_RULES.items():
        assert getattr(rules, name) is cls and name in rules.__all__
        helper = rule_configs._snake(name)  # vanishing_gradient, nan_inf_root_cause
        assert getattr(rule_configs, helper).__name__ == helper
        assert f"built-in rule {name} " in getattr(rule_configs, helper).__doc__
        assert helper in rule_configs.__all__ and helper in dir(rule_configs)
    with pytest.raises(AttributeError, match="no attribute 'no_such_rule'"):
        rule_configs.no_such_rule  # noqa: B018


# -- req_tensors --
def test_required_tensors_api(tmp_path: Path) -> None:
    trial = grad_trial(tmp_path, [1.0, 2.0, 3.0])
    rule = VanishingGradient(trial)
    req = rule.req_tensors
    req.add("gradient/.*", steps=[0, 1], should_match_regex=True)
    req.add("gradient/fc1.weight", steps=[2])
    assert sorted(req.get_names()) == ["gradient/fc1.weight", "gradient/fc2.weight"]
    assert req.get_tensor_steps("gradient/fc1.weight") == [0, 1, 2]
    assert req.get_tensor_steps() == {
        "gradient/fc1.weight": [0, 1, 2],
        "gradient/fc2.weight": [0, 1],
    }
    assert {t.name for t in req.get()} == set(req.get_names())
    req.fetch()
    np.testing.assert_array_equal(
        trial.tensor("gradient/fc1.weight").value(2),
        trial.tensor("gradient/fc1.weight").value(2),
    )
    from tensortap.exceptions import TensorUnavailable

    with pytest.raises(TensorUnavailable):
        req.add("nope", steps=[0])


def test_prefetch_reads_in_one_pass(tmp_path: Path) -> None:
    trial = grad_trial(tmp_path, [1.0] * 5)
    refs = [
        e.raw
        for name in trial.tensor_names()
        for step in trial.steps()
        for e in trial.tensor(name)._entries(step, None).values()
    ]
    reads = trial.prefetch(refs)
    assert reads <= len(trial._index.segments) < len(refs)
    fresh = grad_trial(tmp_path / "again", [1.0] * 5)
    for name in trial.tensor_names():
        for step in trial.steps():
            np.testing.assert_array_equal(
                trial.tensor(name).value(step), fresh.tensor(name).value(step)
            )


# -- invoking --
def test_walks_existing_steps_and_honours_range(tmp_path: Path) -> None:
    builder = TrialBuilder(tmp_path)
    for i in range(6):
        builder.step({"gradient/w": np.full(3, 1.0 if i != 4 else 0.0, np.float32)})
        builder.skip(2)  # steps that were never saved are not invoked
    trial = builder.close()
    assert trial.steps() == [0, 3, 6, 9, 12, 15]
    findings = list(iter_findings(VanishingGradient(trial)))
    assert [f.step for f in findings] == [0, 3, 6, 9, 12, 15]
    assert [f.step for f in findings if f.triggered] == [12]
    hit = next(f for f in findings if f.triggered)
    assert hit.tensors == ("gradient/w",) and hit.value == 0.0 and hit.threshold == 1e-7
    assert "below the threshold" in hit.message and hit.to_dict()["outcome"] == "triggered"
    assert [f.step for f in iter_findings(VanishingGradient(trial), 3, 12)] == [3, 6, 9]


def test_missing_data_is_skipped_and_counted(tmp_path: Path) -> None:
    builder = TrialBuilder(tmp_path)
    builder.step({"gradient/w": np.ones(3, np.float32)})
    builder.step({"loss": 1.0})
    builder.step({"gradient/w": np.ones(3, np.float32)})
    summary = invoke_rule(VanishingGradient(builder.close()))
    assert (summary.evaluated, summary.skipped, summary.errors) == (2, 1, 0)
    assert summary.status is RuleStatus.NO_ISSUES_FOUND
    assert "no gradients saved" in next(iter(summary.skip_reasons))


def test_rule_sees_steps_while_training_writes(tmp_path: Path) -> None:
    builder = TrialBuilder(tmp_path)
    builder.step({"gradient/w": np.ones(3, np.float32)})
    builder.flush()
    seen: list[int] = []
    done = threading.Event()
    result: dict[str, object] = {}

    def run() -> None:
        from tensortap import create_trial

        rule = VanishingGradient(create_trial(tmp_path))
        result["summary"] = invoke_rule(
            rule, poll_interval=0.02, on_finding=lambda f: seen.append(f.step)
        )
        done.set()

    thread = threading.Thread(target=run)
    thread.start()
    for i in range(1, 4):
        builder.step({"gradient/w": np.full(3, 0.0 if i == 2 else 1.0, np.float32)})
        builder.flush()
    builder.close()
    thread.join(timeout=30)
    assert done.is_set(), "the rule did not end when training ended"
    assert seen == [0, 1, 2, 3]
    summary = result["summary"]
    assert [f.step for f in summary.findings] == [2]  # type: ignore[attr-defined]


def test_invoke_rule_rejects_non_rules() -> None:
    with pytest.raises(InvalidConfigError, match="needs a Rule instance"):
        invoke_rule(object())  # type: ignore[arg-type]


def test_rule_needs_a_trial() -> None:
    with pytest.raises(InvalidConfigError, match="needs a trial as base_trial"):
        VanishingGradient(None)


def test_rules_walked_together_share_the_steps_and_an_error_retires_one(tmp_path: Path) -> None:
    from tensortap.rules._invoker import iter_findings_many

    builder = TrialBuilder(tmp_path / "t")
    for step in range(5):
        builder.step({"gradient/w": np.full(3, 1e-9 if step >= 3 else 1.0)})
    trial = builder.close()

    class FailsAtTwo(Rule):
        def invoke_at_step(self, step: int) -> bool:
            if step == 2:
                raise ValueError("bad data")
            return False

    found = list(iter_findings_many([FailsAtTwo(trial), VanishingGradient(trial)]))
    by_rule: dict[str, list[tuple[int, str]]] = {}
    for f in found:
        by_rule.setdefault(f.rule, []).append((f.step, f.outcome.name))
    assert by_rule["FailsAtTwo"] == [(0, "OK"), (1, "OK"), (2, "ERROR")]
    assert by_rule["VanishingGradient"] == [
        (0, "OK"),
        (1, "OK"),
        (2, "OK"),
        (3, "TRIGGERED"),
        (4, "TRIGGERED"),
    ]
    other = TrialBuilder(tmp_path / "u")
    other.step({"x": 1.0})
    with pytest.raises(InvalidConfigError, match="share one base trial"):
        list(iter_findings_many([FailsAtTwo(trial), FailsAtTwo(other.close())]))


class Baseline(Rule):
    """Collects a baseline of gradient means, judging from the third step on."""

    def invoke_at_step(self, step: int) -> bool:
        self.base_trial.tensor("gradient/fc1.weight").reduction_value(step, "mean", abs=True)
        if step < 2:
            self.explain("collecting a baseline: judged from the third step", judged=False)
            return False
        self.explain("judged")
        return False


def test_a_rule_that_only_collected_a_baseline_ends_no_data_saying_why(tmp_path: Path) -> None:
    short = invoke_rule(Baseline(grad_trial(tmp_path / "short", [1.0, 1.0])))
    assert short.status is RuleStatus.NO_DATA and short.judged == 0
    assert "collecting a baseline: judged from the third step" in short.details
    long = invoke_rule(Baseline(grad_trial(tmp_path / "long", [1.0, 1.0, 1.0])))
    assert long.status is RuleStatus.NO_ISSUES_FOUND and long.judged == 1


def test_a_rule_that_judged_nothing_prints_no_count_of_steps_beside_it(tmp_path: Path) -> None:
    """``print(summary)`` of a rule that walked every step and judged none said "(2 steps
    evaluated, 0 judged data, ...); nothing was judged"."""
    trial = grad_trial(tmp_path, [0.1, 0.2])  # gradients only: no activation to judge
    summary = invoke_rule(SaturatedActivation(trial))
    assert summary.status is RuleStatus.NO_DATA and summary.judged == 0
    text = str(summary)
    assert "nothing was judged" in text and "(no step judged; " in text
    assert "steps evaluated" not in text
    fired = invoke_rule(VanishingGradient(grad_trial(tmp_path / "small", [1e-9, 1e-9])))
    assert re.search(r"\(\d+ steps evaluated, \d+ judged data, \d+ triggered", str(fired))
