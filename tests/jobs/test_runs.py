"""The runs table's rows (``tensortap.jobs._runs``): hyperparameters found wherever a
framework records them, the best validation metric chosen by what its name says, the
verdict of a job still running."""

from __future__ import annotations

from pathlib import Path

import pytest

import tensortap as tt
from tensortap.jobs._record import JobRecord, write_json
from tensortap.jobs._runs import (
    RunRow,
    group_rows,
    hyperparameter,
    run_row,
    sort_rows,
    trial_row,
)
from tests.helpers.held_values import HeldValues

CONFIG = {
    "learning_rate": 0.05,
    "optimizer": {"class": "optax.adam"},
    "seeds": {"torch": 3, "trainer": 42},
    "hparams": {"hidden": 64},
    "trainer": {"arguments": {"weight_decay": 0.01, "seed": 42}, "params": {"max_depth": 6}},
}


def test_hyperparameters_are_found_where_each_framework_records_them() -> None:
    assert hyperparameter(CONFIG, "lr") == 0.05
    assert hyperparameter(CONFIG, "opt") == "adam"  # the class's short name
    assert hyperparameter(CONFIG, "seed") == 42  # the trainer's, before torch's
    assert hyperparameter({"seed": 9, **CONFIG}, "seed") == 9  # the run's own first
    assert hyperparameter(CONFIG, "hidden") == 64  # Lightning's hparams
    assert hyperparameter(CONFIG, "weight_decay") == 0.01  # Hugging Face's arguments
    assert hyperparameter(CONFIG, "max_depth") == 6  # XGBoost's params
    assert hyperparameter(CONFIG, "trainer.arguments.seed") == 42
    assert hyperparameter(CONFIG, "hparams") is None  # not a scalar
    assert hyperparameter(CONFIG, "batch_size") is None


def _job(runs: Path, name: str, metrics: dict[str, list[float]], status: str) -> JobRecord:
    """A job over a trial of three TRAIN steps saving ``metrics`` (and a loss) each step."""
    record = JobRecord(runs / name)
    record.create({"name": name, "created": 1_790_000_000.0, "command": ["train.py"]})
    with tt.Hook(record.dir / "trial", save_config=tt.SaveConfig(save_interval=1)) as hook:
        hook.set_mode("TRAIN")
        for step in range(3):
            hook.save_vitals({"loss": 1.0 / (step + 1)})
            for metric, values in metrics.items():
                hook.save_scalar(metric, values[step], "metrics")
            hook.next_step()
    fired = {
        "RuleConfigurationName": "ExplodingTensor",
        "RuleEvaluationStatus": "IssuesFound",
        "severity": "problem",
        "gravest_step": 1,
        "gravest_message": "a NaN",
        "judged": 2,
    }
    write_json(
        record.summary_file,
        {"status": status, "training": {"status": status}, "rules": [fired]},
    )
    return record


def test_the_best_validation_metric_is_chosen_by_its_name(tmp_path: Path) -> None:
    # Keras names its validation metrics val_*: accuracy (higher is better) before a loss
    keras = run_row(
        _job(
            tmp_path,
            "keras",
            {"val_loss": [0.9, 0.4, 0.6], "val_accuracy": [0.5, 0.8, 0.7], "accuracy": [1, 1, 1]},
            "Completed",
        )
    )
    assert keras.best is not None
    assert (keras.best.name, keras.best.value, keras.best.higher_is_better) == (
        "val_accuracy",
        0.8,
        True,
    )
    # XGBoost's <eval set>-<metric>: a validation set's loss, the lowest; train-* is not one
    boosted = run_row(
        _job(
            tmp_path,
            "xgb",
            {"train-logloss": [0.1, 0.05, 0.01], "validation_0-logloss": [0.7, 0.5, 0.6]},
            "Completed",
        )
    )
    assert boosted.best is not None
    assert (boosted.best.name, boosted.best.value) == ("validation_0-logloss", 0.5)
    assert boosted.steps == 3 and boosted.last_loss == 1.0 / 3


def test_a_problem_found_while_a_job_runs_is_its_verdict(tmp_path: Path) -> None:
    live = run_row(_job(tmp_path, "live", {}, "InProgress"), now=1_790_000_100.0)
    assert live.verdict == "problem" and live.status == "InProgress"
    assert live.cause is not None and live.verdict_text.startswith("problem: ")
    done = run_row(_job(tmp_path, "done", {}, "Completed"))
    rows = sort_rows([done, live], "name")
    assert [r.name for r in rows] == ["done", "live"]
    (group,) = group_rows(rows, "verdict")
    assert (group.value, group.runs, group.loss_mean) == ("problem", 2, 1.0 / 3)


def test_a_long_run_s_row_is_read_without_holding_its_series(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A row's steps, last loss, start and best validation metric come from the loss walked
    a window of steps at a time and each metric's finite extremes (one bucket per worker):
    the reader holds a bounded number of values at once, never a whole series (issue 48),
    and the row is the one read whole."""
    from tensortap.trials import _series
    from tensortap.writer import WriterOptions
    from tensortap.writer import _series as writer_series

    monkeypatch.setattr(writer_series, "ROLLUP_SEGMENTS", 2)  # objects of 100 steps
    hook = tt.Hook(
        tmp_path / "run",
        save_config=tt.SaveConfig(save_interval=1),
        writer_options=WriterOptions(compact=False),
    )
    hook.set_mode(tt.modes.TRAIN)
    for step in range(3000):
        value = {700: float("inf"), 701: float("nan"), 2222: 0.99}.get(step, (step % 90) / 100)
        hook.save_scalar("loss", 1 / (1 + step))
        hook.save_scalar("val_accuracy", value)
        hook.next_step()
        if step % 50 == 49:
            hook.flush()
    assert hook.close().healthy

    def row_with(most: int) -> tuple[RunRow, int]:
        monkeypatch.setattr(_series, "BUCKET_READ_VALUES", most, raising=False)
        with monkeypatch.context() as counting:
            held = HeldValues(counting)
            return trial_row("run", str(tmp_path / "run")), held.most

    whole, _ = row_with(10**9)
    row, most = row_with(1000)
    assert row.best is not None
    assert (row.best.name, row.best.value, row.best.higher_is_better) == (
        "val_accuracy",
        0.99,
        True,
    )
    assert (row.steps, row.last_loss) == (3000, 1 / 3000)
    assert (row.best, row.steps, row.last_loss, row.started) == (
        whole.best,
        whole.steps,
        whole.last_loss,
        whole.started,
    )
    assert row.started is not None and row.problems == []
    assert most <= 1000, most
