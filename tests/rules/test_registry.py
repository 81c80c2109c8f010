"""Rules register themselves where they are defined: a rule defined in a test module (as a new
built-in rule would be in its own file) is listed, configurable and run by a real job and by
tensortap.scale, and its parameters are checked by the class, without a trial."""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import tensortap.rules as rules
from tensortap.cli._specs import builtin_rule
from tensortap.exceptions import InvalidConfigError
from tensortap.jobs import DebuggerHookConfig, Rule, TrainingJob, rule_configs
from tensortap.rules import RuleSpec, VanishingGradient, unregister_rule
from tensortap.rules.builtin import BUILTIN_RULES
from tensortap.storage._memory import MemoryStore
from tensortap.trials._trial import Trial

SCRIPT = Path(__file__).parents[1] / "jobs" / "train_script.py"


@pytest.fixture
def loss_above() -> Iterator[type]:
    """The rule class of registered_rule.py, registered by importing it; forgotten after."""
    module = importlib.import_module(".registered_rule", __package__)
    yield module.LossAbove
    unregister_rule("LossAbove")
    sys.modules.pop(module.__name__, None)


def test_a_rule_defined_in_a_test_module_is_listed_and_configurable(loss_above: type) -> None:
    assert rules.known_rules()["LossAbove"] is loss_above and rules.LossAbove is loss_above
    assert "LossAbove" not in BUILTIN_RULES  # known, and not tensortap's own
    assert "loss_above" in dir(rule_configs)
    config = rule_configs.loss_above(threshold="2.5")
    assert config.name == "LossAbove" and config.parameters == {"threshold": "2.5"}
    assert [c.name for c in config.collections] == ["losses"]  # declared on the class
    assert config.rule_class is loss_above
    # its own check of the value, made by the class: no trial anywhere
    with pytest.raises(InvalidConfigError, match="parameter 'threshold' must be a number >= 0"):
        rule_configs.loss_above(threshold="-1")
    assert loss_above.check_parameters(threshold="3") == {"threshold": 3.0}
    with pytest.raises(InvalidConfigError, match="LossAbove has no parameter 'limit'"):
        loss_above.check_parameters(limit="3")
    # a job's rule and the command line name it like a built-in rule
    spec = Rule.builtin(config)
    assert (spec.class_name, spec.module) == ("LossAbove", loss_above.__module__)
    assert Rule.from_dict(spec.to_dict()) == spec
    assert builtin_rule("loss_above:threshold=3").parameters == {"threshold": "3.0"}
    with pytest.raises(InvalidConfigError, match="built-in rules are .*loss_above"):
        builtin_rule("loss_abov")
    unregister_rule("LossAbove")
    assert "LossAbove" not in rules.known_rules()
    with pytest.raises(AttributeError, match="no attribute 'loss_above'"):
        rule_configs.loss_above  # noqa: B018


def test_a_job_and_scale_run_a_rule_registered_in_a_test_module(
    tmp_path: Path, loss_above: type
) -> None:
    pytest.importorskip("pyarrow")
    from tensortap.scale import run_rules

    # the rules run in another process, which imports the module that registers the rule
    module = sys.modules[loss_above.__module__]
    root = Path(module.__file__ or "").parents[module.__name__.count(".")]
    path = os.pathsep.join(p for p in (str(root), os.environ.get("PYTHONPATH", "")) if p)
    job = TrainingJob(
        command=[sys.executable, str(SCRIPT), "--steps", "12"],
        output_path=tmp_path / "runs",
        debugger_hook_config=DebuggerHookConfig(hook_parameters={"save_interval": "1"}),
        rules=[
            Rule.builtin(rule_configs.loss_above(threshold="0")),
            Rule.builtin(rule_configs.loss_above(), name="loss_above_100"),
        ],
        environment={"PYTHONPATH": path},
    )
    job.fit(wait=False)
    summary = job.wait(timeout=240, logs=False)
    assert summary["status"] == "Completed", summary
    statuses = {r["RuleConfigurationName"]: r for r in job.rule_job_summary()}
    assert statuses["LossAbove"]["RuleEvaluationStatus"] == "IssuesFound", statuses
    assert statuses["loss_above_100"]["RuleEvaluationStatus"] == "NoIssuesFound", statuses
    # tensortap.scale takes the same spec (rules/, not jobs/) in its worker processes
    results = run_rules(
        [job.debugger_artifacts_path()],
        [RuleSpec.builtin(rule_configs.loss_above(threshold="0"))],
        workers=1,
    )
    assert [r["status"] for r in results.summary.to_pylist()] == ["IssuesFound"]


def test_a_spec_naming_a_module_that_cannot_be_imported_says_so() -> None:
    record = {"name": "gone", "class_name": "Gone", "module": "no_such_module_for_tensortap"}
    with pytest.raises(InvalidConfigError, match="no_such_module_for_tensortap, which cannot be"):
        RuleSpec.from_dict(record)


def test_checks_run_by_the_class_and_at_construction_alike() -> None:
    """The built-in rules' checks of their values run without a trial (check_parameters) and
    when the rule is built; a subclass with other parameters keeps its parent's checks at
    construction, where its __init__ gives the parent's parameters."""
    with pytest.raises(InvalidConfigError, match="'threshold' must be a number >= 0, got -1"):
        VanishingGradient.check_parameters(threshold="-1")
    assert VanishingGradient.check_parameters() == {"threshold": 1e-7, "relative_threshold": 1e-4}
    trial = Trial(MemoryStore("checks"))
    with pytest.raises(InvalidConfigError, match="'threshold' must be a number >= 0, got -1"):
        VanishingGradient(trial, threshold="-1")

    class Shifted(VanishingGradient):
        def __init__(self, base_trial: Trial, shift: float = 1.0) -> None:
            super().__init__(base_trial, threshold=shift - 2)

    assert Shifted.check_parameters(shift="0") == {"shift": 0.0}  # the parent's check: later
    with pytest.raises(InvalidConfigError, match="rule Shifted: parameter 'threshold'"):
        Shifted(trial, shift=0)
    assert Shifted(trial, shift=3).threshold == 1.0


@pytest.mark.parametrize(
    ("make", "typed", "meant"),
    [
        (builtin_rule, "vanishing_gradiant", "vanishing_gradient"),  # the command line
        (builtin_rule, "VanishingGradient2", "vanishing_gradient"),  # a class name there
        (rule_configs.config_for, "VanishingGradiant", "VanishingGradient"),
        (lambda name: rules.create_rule(name, "unread"), "DeadRelus", "DeadRelu"),
        (lambda name: RuleSpec(name, name)._registered(), "Overfitt", "Overfit"),  # a job's
    ],
)
def test_a_mistyped_rule_name_gets_the_closest_one_then_the_list(make, typed, meant) -> None:
    with pytest.raises(InvalidConfigError) as caught:
        make(typed)
    said = str(caught.value)
    assert f"no built-in rule {typed!r}; did you mean {meant!r}? built-in rules are " in said
    assert "all_zero" in said or "AllZero" in said  # the list is kept after it


def test_a_name_like_no_rule_gets_no_guess() -> None:
    with pytest.raises(InvalidConfigError) as caught:
        builtin_rule("zebra")
    assert "did you mean" not in str(caught.value)
    assert "built-in rules are accuracy_at_chance, " in str(caught.value)
