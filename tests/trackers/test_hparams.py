"""A run's hyperparameters imported into its configuration (issue 47): TensorBoard's HParams
summaries, written by torch's ``SummaryWriter.add_hparams`` (a directory of their own below
the run's) and by the ``tensorboard`` package's ``hparams_pb`` (in the run's own directory),
and MLflow's ``params/`` files. ``trial.config()`` holds them as ``hparams`` (the metrics of
HParams as ``hparam_metrics``), the dashboard's run page shows them. Hostile parameters
(thousands, huge values, odd names) are bounded and said, never breaking the import."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from tensortap.trackers import import_runs, read_runs
from tensortap.trackers._scalars import MAX_PARAM_CHARS, MAX_PARAMS
from tensortap.trials._trial import create_trial
from tests.cli.test_jobs import run_cli
from tests.helpers.json_get import get_json as get
from tests.trackers.test_import import healthy_loss, write_mlflow_run

pytest.importorskip("tensorboard")
pytest.importorskip("yaml")


def _add_hparams_run(path: Path, hparams: dict[str, object], metrics: dict[str, float]) -> None:
    """A run's loss by torch's SummaryWriter, then its hyperparameters by ``add_hparams``."""
    torch_tb = pytest.importorskip("torch.utils.tensorboard")
    writer = torch_tb.SummaryWriter(str(path))
    for step in range(50):
        writer.add_scalar("loss", healthy_loss(step), step)
    writer.add_hparams(hparams, metrics)
    writer.close()


def test_add_hparams_becomes_the_configuration_of_the_run(tmp_path: Path, serve) -> None:
    logdir = tmp_path / "logs"
    _add_hparams_run(
        logdir / "exp1",
        {"lr": 0.01, "batch_size": 32, "optimizer": "adam"},
        {"hparam/accuracy": 0.75, "loss": 0.5},
    )
    runs = read_runs(logdir)
    # the directory add_hparams made below the run is a part of it, not a run of its own
    assert [r.name for r in runs] == ["exp1"]
    result = import_runs(logdir, tmp_path / "runs")
    with create_trial(result.runs[0].trial) as trial:
        config = trial.config()
        assert config["hparams"] == {"lr": 0.01, "batch_size": 32, "optimizer": "adam"}
        assert config["hparam_metrics"] == {"hparam/accuracy": 0.75, "loss": 0.5}
        assert (config["learning_rate"], config["batch_size"]) == (0.01, 32)
        # the metric "loss" of add_hparams is not a value of the run's loss curve
        assert len(trial.tensor("vitals/loss").steps()) == 50
    dashboard = serve(tmp_path / "runs")
    _, body = get(dashboard.url + "api/runs")
    (run,) = body["runs"]
    assert (run["learning_rate"], run["batch_size"]) == (0.01, 32)
    _, detail = get(dashboard.url + f"api/run/{run['id']}")
    assert detail["config"]["hparams"]["optimizer"] == "adam"
    assert detail["config"]["hparam_metrics"]["hparam/accuracy"] == 0.75
    # and report takes the run: one run, not two
    code, _, err = run_cli("report", str(logdir / "exp1"), "-o", str(tmp_path / "r.html"))
    assert code == 0, err


def test_tensorboard_hparams_summaries_in_the_runs_own_directory(tmp_path: Path) -> None:
    """What ``tensorboard.plugins.hparams`` writes in each run of a tuning (a session's start,
    no experiment): the run keeps its own name, its hyperparameters as written."""
    from tensorboard.compat.proto import event_pb2
    from tensorboard.plugins.hparams import summary_v2
    from tensorboard.summary import Writer
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    for trial_id, lr in (("run-0", 0.1), ("run-1", 0.001)):
        place = tmp_path / "tuning" / trial_id
        events = EventFileWriter(str(place))
        summary = summary_v2.hparams_pb({"lr": lr, "units": 16, "dropout": False}, trial_id)
        events.add_event(event_pb2.Event(wall_time=1.79e9, step=0, summary=summary))
        events.close()
        writer = Writer(str(place))
        for step in range(20):
            writer.add_scalar("loss", healthy_loss(step), step)
        writer.close()
    runs = {r.name: r for r in read_runs(tmp_path / "tuning")}
    assert set(runs) == {"run-0", "run-1"}
    assert runs["run-0"].params == {"lr": 0.1, "units": 16, "dropout": False}
    assert runs["run-1"].params["lr"] == 0.001
    assert not any("not scalars" in p for p in runs["run-0"].problems)  # not "left out"


def test_hostile_hyperparameters_are_bounded_and_said(tmp_path: Path) -> None:
    many: dict[str, object] = {f"p{i:05d}": float(i) for i in range(MAX_PARAMS + 300)}
    many["huge"] = "x" * (MAX_PARAM_CHARS * 20)
    many[""] = 1.0
    many["bad\x00name"] = 2.0
    many["n" * 5000] = 3.0
    many["nan"] = math.nan
    _add_hparams_run(tmp_path / "logs" / "exp1", many, {"accuracy": 0.5})
    (run,) = read_runs(tmp_path / "logs")
    assert len(run.params) == MAX_PARAMS
    assert len(run.params["huge"]) == MAX_PARAM_CHARS
    assert "" not in run.params and "bad\x00name" not in run.params
    said = "\n".join(run.problems)
    assert "parameter 'huge' holds" in said and f"the first {MAX_PARAM_CHARS} are kept" in said
    assert "hyperparameters left out" in said
    result = import_runs(tmp_path / "logs", tmp_path / "runs")
    assert not result.failed
    with create_trial(result.runs[0].trial) as trial:
        hparams = trial.config()["hparams"]
        assert len(hparams) == MAX_PARAMS  # the first in name order
        assert hparams["nan"] == "nan"  # strict JSON holds no NaN: kept as its text


def test_mlflow_params_are_bounded_and_said(tmp_path: Path) -> None:
    store = tmp_path / "mlruns"
    params = {f"p{i:05d}": str(i) for i in range(MAX_PARAMS + 50)}
    params["huge"] = "y" * (MAX_PARAM_CHARS * 3)
    params["odd\x01name"] = "1"
    params["inf"] = "inf"  # a float to Python; strict JSON holds none
    write_mlflow_run(store, "a" * 32, "calm", healthy_loss, params)
    (run,) = read_runs(store)
    assert len(run.params) <= MAX_PARAMS
    assert run.params["p00000"] == 0 and "odd\x01name" not in run.params
    said = "\n".join(run.problems)
    assert "parameters left out" in said
    result = import_runs(store, tmp_path / "out")
    with create_trial(result.runs[0].trial) as trial:
        hparams = trial.config()["hparams"]
        assert hparams["p00001"] == 1
        assert hparams["inf"] == "inf"  # strict JSON holds no infinity: kept as its text
        assert all(len(str(v)) <= MAX_PARAM_CHARS for v in hparams.values())


def test_damaged_hparams_summaries_are_said_once_and_the_run_is_read(tmp_path: Path) -> None:
    """A file of 500 HParams summaries whose content is not the plugin's message: one line
    says how many (not one a summary), and the run's scalars are kept."""
    from tensorboard.compat.proto import event_pb2, summary_pb2
    from tensorboard.summary import Writer
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    place = tmp_path / "logs" / "exp1"
    events = EventFileWriter(str(place))
    for step in range(500):
        value = summary_pb2.Summary.Value(tag=f"_hparams_/{step}")
        value.metadata.plugin_data.plugin_name = "hparams"
        value.metadata.plugin_data.content = b"\xff\xff\xff not a protocol buffer"
        summary = summary_pb2.Summary(value=[value])
        events.add_event(event_pb2.Event(wall_time=1.79e9, step=step, summary=summary))
    events.close()
    writer = Writer(str(place))
    for step in range(5):
        writer.add_scalar("loss", healthy_loss(step), step)
    writer.close()
    (run,) = read_runs(tmp_path / "logs")
    said = [p for p in run.problems if "HParams summar" in p]
    assert len(said) == 1 and "500 HParams summaries could not be read" in said[0], run.problems
    assert [s.tag for s in run.series] == ["loss"] and len(run.series[0].values) == 5
