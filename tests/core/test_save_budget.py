"""The save budget (tensortap.core._save_budget): the policy on a fake clock, and a hook's own
schedule widened and narrowed by it, with what is never governed left alone."""

from __future__ import annotations

import itertools
import logging
from pathlib import Path

import numpy as np
import pytest

import tensortap as tt
from tensortap.core._save_budget import (
    MAX_FACTOR,
    OUTCOME_MAX_FACTOR,
    SAVE_BUDGET_ENV,
    BudgetPolicy,
    parse_save_budget,
    widened,
)
from tensortap.core._save_config import SaveConfig, SaveConfigMode
from tensortap.exceptions import InvalidConfigError
from tensortap.jobs._specs import DebuggerHookConfig, Rule, hook_config
from tensortap.modes import ModeKeys
from tensortap.rules import rule_configs


def test_a_budget_is_read_as_a_share_or_off() -> None:
    assert parse_save_budget("0.05") == 0.05
    assert parse_save_budget("5%") == 0.05
    assert parse_save_budget(0.2) == 0.2
    for off in (None, "off", "OFF", "0", "none", ""):
        assert parse_save_budget(off) is None
    for bad in ("fast", "1.5", -0.1, "nan", True):
        with pytest.raises(InvalidConfigError, match="share of training time"):
            parse_save_budget(bad)


def test_the_policy_keeps_the_first_saving_steps_then_widens_on_a_fake_clock() -> None:
    policy = BudgetPolicy(0.05)
    policy.start(0.0)
    now = 0.0
    factors = []
    for _ in range(12):  # each saving step: 10 s of training, 1 s of saving (share 10%)
        now += 11.0
        change = policy.observe(1.0, now)
        factors.append(policy.factor)
        if change is not None:
            assert change.share == pytest.approx(1 / 11 if change.old_factor > 1 else 6 / 66)
            assert change.budget == 0.05 and change.widened
    # five kept as configured, the sixth widens (6 of 6 measured), then one per 2 measured
    assert factors == [1, 1, 1, 1, 1, 2, 2, 4, 4, 8, 8, 16]


def test_the_policy_narrows_back_when_the_share_falls_well_under_and_never_below_1() -> None:
    policy = BudgetPolicy(0.05, keep_first=0)
    policy.start(0.0)
    now = 0.0
    for _ in range(4):  # dear: widened twice
        now += 10.0
        policy.observe(2.0, now)
    assert policy.factor == 4
    changes = []
    for _ in range(10):  # now cheap: 1% of the time, under a quarter of the budget
        now += 100.0
        change = policy.observe(1.0, now)
        if change is not None:
            changes.append((change.old_factor, change.new_factor))
    assert changes == [(4, 2), (2, 1)] and policy.factor == 1
    for _ in range(4):  # between a quarter of the budget and the budget: left as it is
        now += 100.0
        assert policy.observe(3.0, now) is None
    assert policy.factor == 1


def test_the_policy_is_bounded() -> None:
    policy = BudgetPolicy(0.05, keep_first=0, max_factor=8)
    now = 0.0
    for _ in range(40):
        now += 1.0
        policy.observe(1.0, now)
    assert policy.factor == 8
    with pytest.raises(InvalidConfigError, match="power of 2"):
        BudgetPolicy(0.05, max_factor=10)


def test_widening_keeps_eval_and_explicit_steps() -> None:
    base = SaveConfig(save_interval=10, mode_save_configs={ModeKeys.EVAL: SaveConfigMode(1)})
    wide = widened(base, 4)
    assert wide.get_save_config(ModeKeys.TRAIN).save_interval == 40
    assert wide.get_save_config(ModeKeys.GLOBAL).save_interval == 40
    assert wide.get_save_config(ModeKeys.EVAL).save_interval == 1
    assert widened(base, 1) is base


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _train(hook: tt.Hook, clock: FakeClock, steps: int, cost: float) -> None:
    """A TRAIN loop: one second a step; a step where weights are due saves them, taking
    ``cost`` seconds inside the hook's saving work; the vital signs and the outcome each step."""
    hook.set_mode(ModeKeys.TRAIN)
    for _ in range(steps):
        clock.now += 1.0
        if hook.is_collection_due("weights"):
            with hook._saving():
                hook.save_tensor("w", np.ones(3, np.float32), collections="weights")
                clock.now += cost
        hook.save_scalar("labels", 1.0, "labels")
        hook.save_vitals({"loss": 0.5})
        hook.next_step()


def _budgeted(path: Path, clock: FakeClock, budget: float = 0.05) -> tt.Hook:
    hook = tt.Hook(
        path,
        save_config=SaveConfig(save_interval=2),
        include_collections=["weights", "labels", "vitals"],
        save_budget=budget,
    )
    assert hook._save_budget is not None
    hook._save_budget.clock = clock
    return hook


def test_a_hook_under_a_budget_widens_its_own_schedule_and_records_why(tmp_path: Path) -> None:
    clock = FakeClock()
    with _budgeted(tmp_path / "t", clock) as hook:
        _train(hook, clock, 60, cost=1.0)  # a saving step costs as much as a step: 33%
    trial = tt.create_trial(tmp_path / "t")
    saved = trial.tensor("w").steps(mode=ModeKeys.TRAIN)
    assert saved[:6] == [0, 2, 4, 6, 8, 10]  # the first five kept (the sixth decided)
    assert saved == [0, 2, 4, 6, 8, 10, 12, 16, 24, 32, 48]  # then x2 every 2 measured
    assert all(step % 2 == 0 for step in saved)  # on the configured interval's multiples
    assert len(trial.tensor("vitals/loss").steps(mode=ModeKeys.TRAIN)) == 60  # every step
    assert trial.tensor("labels").steps(mode=ModeKeys.TRAIN) == saved  # the outcome follows
    events = [e for e in trial.sessions()[0].events if e["kind"] == "save_budget"]
    assert [(e["fields"]["old_interval"], e["fields"]["new_interval"]) for e in events] == [
        (2, 4),
        (4, 8),
        (8, 16),
    ]
    first = events[0]["fields"]
    assert first["budget"] == 0.05 and first["share"] > 0.05
    assert "widened from every 2 to every 4" in first["message"]


def test_the_outcome_sample_widens_with_the_budget_up_to_its_own_limit(tmp_path: Path) -> None:
    clock = FakeClock()
    with _budgeted(tmp_path / "t", clock) as hook:
        _train(hook, clock, 400, cost=4.0)  # far over budget: the factor reaches its limit
    trial = tt.create_trial(tmp_path / "t")
    weights = trial.tensor("w").steps(mode=ModeKeys.TRAIN)
    labels = trial.tensor("labels").steps(mode=ModeKeys.TRAIN)
    assert weights[-1] - weights[-2] == 2 * MAX_FACTOR  # the tensors: every 128th step
    gaps = [b - a for a, b in itertools.pairwise(labels)]
    assert max(gaps) == 2 * OUTCOME_MAX_FACTOR  # the outcome: never wider than every 16th
    assert gaps[-5:] == [2 * OUTCOME_MAX_FACTOR] * 5
    assert set(weights) <= set(labels)  # both on the configured interval's multiples


def test_the_writer_threads_time_counts_in_the_budget(tmp_path: Path) -> None:
    """Saves the training thread hands off cheaply but the writer thread spends long on (a core
    taken from training on a small machine) widen the schedule as saving work in the step
    would; the hook counts its own writer's CPU time."""
    clock = FakeClock()
    writer_time = [0.0]
    with _budgeted(tmp_path / "t", clock) as hook:
        assert hook._save_budget is not None
        assert hook._save_budget.background is not None  # the hook's writer, by default
        assert hook._save_budget.background() == hook._writer.busy_s
        hook._save_budget.background = lambda: writer_time[0]
        hook.set_mode(ModeKeys.TRAIN)
        for _ in range(60):
            clock.now += 1.0
            if hook.is_collection_due("weights"):
                with hook._saving():  # no time in the step itself
                    hook.save_tensor("w", np.ones(3, np.float32), collections="weights")
                writer_time[0] += 1.0  # a second of the writer's
            hook.next_step()
    saved = tt.create_trial(tmp_path / "t").tensor("w").steps(mode=ModeKeys.TRAIN)
    assert saved == [0, 2, 4, 6, 8, 10, 12, 16, 24, 32, 48]  # as with a second in the step


def test_saving_work_on_steps_the_schedule_does_not_save_is_not_counted(tmp_path: Path) -> None:
    """Work inside the hook's saving work on a step the governed schedule does not save (a
    Keras ring read every half ring, the outcome sample's steps past its own limit) is not
    the saves' cost: widening cannot reduce it. Counted, a second of it between saving steps
    (33%) widened the schedule as a dear saving step does; the saving steps here are cheap."""
    clock = FakeClock()
    with _budgeted(tmp_path / "t", clock) as hook:
        hook.set_mode(ModeKeys.TRAIN)
        for _ in range(60):
            clock.now += 1.0
            if hook.is_collection_due("weights"):
                with hook._saving():
                    hook.save_tensor("w", np.ones(3, np.float32), collections="weights")
                    clock.now += 0.001
            else:
                with hook._saving():  # not a saving step: a read of the vital signs, say
                    clock.now += 1.0
            hook.next_step()
        assert hook._save_budget is not None and hook._save_budget.changes == []
    saved = tt.create_trial(tmp_path / "t").tensor("w").steps(mode=ModeKeys.TRAIN)
    assert saved == list(range(0, 60, 2))


def test_a_cheap_saving_step_keeps_the_schedule_and_a_dear_one_narrows_back(
    tmp_path: Path,
) -> None:
    clock = FakeClock()
    with _budgeted(tmp_path / "t", clock) as hook:
        _train(hook, clock, 30, cost=1.0)
        widest = hook._save_budget.policy.factor  # type: ignore[union-attr]
        _train(hook, clock, 200, cost=0.001)  # now 0.05% of the time
        assert widest > 1 and hook._save_budget.policy.factor == 1  # type: ignore[union-attr]
    events = [e["fields"] for e in tt.create_trial(tmp_path / "t").sessions()[0].events]
    assert events[-1]["new_interval"] == 2 and "narrowed" in events[-1]["message"]
    clock = FakeClock()
    with _budgeted(tmp_path / "cheap", clock) as hook:
        _train(hook, clock, 60, cost=0.001)
    saved = tt.create_trial(tmp_path / "cheap").tensor("w").steps(mode=ModeKeys.TRAIN)
    assert saved == list(range(0, 60, 2))


def test_a_hook_without_a_budget_saves_its_schedule_exactly(tmp_path: Path) -> None:
    clock = FakeClock()
    hook = tt.Hook(tmp_path / "t", save_config=SaveConfig(save_interval=2))
    assert hook._save_budget is None
    hook.include_collection("weights")
    with hook:
        _train(hook, clock, 40, cost=5.0)
    assert tt.create_trial(tmp_path / "t").tensor("w").steps() == list(range(0, 40, 2))


def _recommended() -> list[Rule]:
    return [Rule.builtin(config) for config in rule_configs.recommended()]


def test_a_job_budgets_its_own_schedule_only(monkeypatch, caplog) -> None:
    monkeypatch.delenv(SAVE_BUDGET_ENV, raising=False)
    assert hook_config("/tmp/x", None, _recommended(), None).hook_kwargs()["save_budget"] == 0.05
    monkeypatch.setenv(SAVE_BUDGET_ENV, "0.2")
    assert hook_config("/tmp/x", None, _recommended(), None).hook_kwargs()["save_budget"] == 0.2
    monkeypatch.setenv(SAVE_BUDGET_ENV, "off")
    assert "save_budget" not in hook_config("/tmp/x", None, _recommended(), None).hook_kwargs()
    given = DebuggerHookConfig(hook_parameters={"save_budget": "0.01"})  # the job's option wins
    assert hook_config("/tmp/x", given, _recommended(), None).hook_kwargs()["save_budget"] == 0.01
    # a schedule the user wrote is honoured exactly: no budget, and a warning if one was given
    mine = DebuggerHookConfig(hook_parameters={"save_interval": "5", "save_budget": "0.01"})
    with caplog.at_level(logging.WARNING):
        kwargs = hook_config("/tmp/x", mine, _recommended(), None).hook_kwargs()
    assert "save_budget" not in kwargs and kwargs["save_config"].save_interval == 5
    assert "save_budget=0.01 is left out" in caplog.text
    monkeypatch.setenv(SAVE_BUDGET_ENV, "fast")
    with pytest.raises(InvalidConfigError, match=r"\$TENSORTAP_SAVE_BUDGET"):
        hook_config("/tmp/x", None, _recommended(), None)


def test_a_schedule_given_over_a_jobs_configuration_is_not_budgeted(tmp_path: Path) -> None:
    """``Hook.create_from_json_file(path, save_config=...)`` (a script's own schedule in a job)
    keeps it exactly; the job's configuration alone is budgeted."""
    config = hook_config(
        str(tmp_path / "t"),
        DebuggerHookConfig(hook_parameters={"save_budget": "0.05"}),
        _recommended(),
        None,
    )
    with config.create_hook(tt.Hook) as hook:
        assert hook._save_budget is not None
    with config.create_hook(tt.Hook, save_config=SaveConfig(save_interval=3)) as hook:
        assert hook._save_budget is None
