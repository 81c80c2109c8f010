"""Runs of other trackers opened as tensortap trials (issue 47 item 4): a TensorBoard logdir
written by the real writers (``torch.utils.tensorboard.SummaryWriter`` and the ``tensorboard``
package's ``tensorboard.summary.Writer``), read back equal to TensorBoard's own
``EventAccumulator``; MLflow's file store, W&B's run files and Neptune's exporter Parquet as
their documentation lays them out (neither ``mlflow``, ``wandb`` nor the exporter is
installed). The loss rules and the diagnosis judge them: a diverging run is a problem, a
healthy one healthy; the runs table and the dashboard show them beside a tensortap job.
Every file is read as hostile: one bad file or line is said, never hides the others."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from tensortap.trackers import detect_format, import_runs, read_runs
from tensortap.trials._trial import create_trial
from tests.cli.test_jobs import run_cli
from tests.helpers.job_documents import make_job
from tests.helpers.json_get import get_json as get

pytest.importorskip("tensorboard")
pytest.importorskip("yaml")

STEPS = 300


def healthy_loss(step: int) -> float:
    return 2.0 * math.exp(-step / 60) + 0.05


def diverging_loss(step: int) -> float:
    """Falls, then the learning rate's blow-up: rises without end from step 150."""
    return healthy_loss(step) + (0.0 if step < 150 else math.exp((step - 150) / 10) - 1.0)


def validation_loss(step: int) -> float:
    return healthy_loss(step) * 1.02


@pytest.fixture(scope="module")
def logdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two runs by torch's SummaryWriter (the PyTorch tutorial's tags: ``Loss/train``,
    ``Loss/test``, ``Accuracy/test``) and one by Keras' layout (``train/`` and
    ``validation/``, ``epoch_loss``), written with the tensorboard package's own writer."""
    torch_tb = pytest.importorskip("torch.utils.tensorboard")
    from tensorboard.summary import Writer

    root = tmp_path_factory.mktemp("logdir")
    for name, loss in (("healthy", healthy_loss), ("diverging", diverging_loss)):
        writer = torch_tb.SummaryWriter(str(root / name))
        for step in range(STEPS):
            writer.add_scalar("Loss/train", loss(step), step)
            if step % 50 == 49 and name == "healthy":
                writer.add_scalar("Loss/test", validation_loss(step), step)
                writer.add_scalar("Accuracy/test", 1 - math.exp(-step / 60), step)
        writer.add_histogram("weights", np.arange(10.0), 0)
        writer.close()
    for split in ("train", "validation"):
        writer = Writer(str(root / "keras" / split))
        for epoch in range(40):
            value = healthy_loss(epoch * 7) * (1.02 if split == "validation" else 1.0)
            writer.add_scalar("epoch_loss", value, epoch)
            writer.add_scalar("epoch_accuracy", 1 - value / 3, epoch)
        writer.close()
    return root


def test_a_tensorboard_logdir_is_imported_and_diagnosed(logdir: Path, tmp_path: Path) -> None:
    from tensorboard.backend.event_processing import event_accumulator

    out = tmp_path / "imported"
    code, text, err = run_cli("import", str(logdir), "-o", str(out))
    assert code == 0, err
    assert "imported 3 tensorboard runs" in text
    assert sorted(p.name for p in out.iterdir()) == ["diverging", "healthy", "keras"]

    with create_trial(out / "diverging") as trial:
        config = trial.config()
        assert trial.framework() == "tensorboard"
        assert config["imported"]["source"] == str(logdir / "diverging")
        assert config["imported"]["loss"] == "Loss/train"
        assert config["imported"]["diagnosis"]["verdict"] == "problem"
        # the values are TensorBoard's own reading of the same file, step for step
        accumulator = event_accumulator.EventAccumulator(
            str(logdir / "diverging"), size_guidance={event_accumulator.SCALARS: 0}
        )
        accumulator.Reload()
        expected = [(e.step, e.value) for e in accumulator.Scalars("Loss/train")]
        loss = trial.tensor("vitals/loss")
        got = [(trial.mode_step(s), float(loss.value(s))) for s in loss.steps()]
        assert [s for s, _ in got] == [s for s, _ in expected] and len(got) == STEPS
        assert np.allclose([v for _, v in got], [v for _, v in expected], rtol=1e-6)
        # the histogram is not a scalar: counted and said, not imported
        assert config["imported"]["histograms_not_imported"]["tags"] == 1

    with create_trial(out / "healthy") as trial:
        assert trial.config()["imported"]["validation_loss"] == "Loss/test"
        from tensortap.core._modes import ModeKeys

        assert len(trial.steps(mode=ModeKeys.EVAL)) == STEPS // 50
        assert "Accuracy/test" in trial.tensor_names(collection="metrics")

    with create_trial(out / "keras") as trial:  # train/ and validation/: one run, two modes
        lineage = trial.config()["imported"]
        assert (lineage["loss"], lineage["validation_loss"]) == ("epoch_loss", "epoch_loss")
        assert len(trial.steps(mode=ModeKeys.EVAL)) == 40
        assert len(trial.steps(mode=ModeKeys.TRAIN)) == 40

    code, text, err = run_cli("diagnose", str(out / "diverging"))
    assert code == 0, err
    assert "the learning rate is too high" in text
    code, text, err = run_cli("diagnose", str(out / "healthy"))
    assert code == 0 and "diagnosis: healthy" in text, text
    # diagnose straight on the logdir: imported into a temporary directory first
    code, text, err = run_cli("diagnose", str(logdir / "diverging"))
    assert code == 0, err
    assert "the learning rate is too high" in text


def test_the_runs_table_and_the_dashboard_show_imported_runs_beside_jobs(
    logdir: Path, tmp_path: Path, serve
) -> None:
    pytest.importorskip("starlette")
    runs = tmp_path / "runs"
    make_job(runs, "tensortap-job", lr=0.1, batch=32, losses=[2.0, 1.0, 0.5])
    import_runs(logdir, runs)
    dashboard = serve(runs)
    status, body = get(dashboard.url + "api/table?sort=name&reads=100")
    assert status == 200
    shown = {r["name"]: r for r in body["rows"]}
    assert {"tensortap-job", "healthy", "diverging", "keras"} <= set(shown)
    assert shown["diverging"]["verdict"] == "problem"
    assert shown["diverging"]["cause"] == "the learning rate is too high"
    assert shown["healthy"]["verdict"] == "healthy"
    assert shown["healthy"]["best_metric"]["name"] == "Accuracy/test"
    assert shown["healthy"]["steps"] == STEPS
    assert "imported from tensorboard" in shown["healthy"]["command"]


def test_loss_names_a_tag_the_usual_names_do_not(tmp_path: Path) -> None:
    from tensorboard.summary import Writer

    writer = Writer(str(tmp_path / "logs" / "custom"))
    for step in range(60):
        writer.add_scalar("objective/nll", diverging_loss(step * 5), step * 5)
    writer.close()
    result = import_runs(tmp_path / "logs", tmp_path / "a")
    lineage = result.runs[0].lineage
    assert lineage is not None and lineage["loss"] is None
    assert any("--loss TAG" in p for p in lineage["problems"])
    result = import_runs(tmp_path / "logs", tmp_path / "b", loss="objective/nll")
    lineage = result.runs[0].lineage
    assert lineage is not None and lineage["loss"] == "objective/nll"
    assert lineage["diagnosis"]["verdict"] == "problem"
    result = import_runs(tmp_path / "logs", tmp_path / "c", loss="no/such")
    lineage = result.runs[0].lineage
    assert lineage is not None
    assert any("--loss 'no/such' names no tag" in p for p in lineage["problems"])


def write_mlflow_run(
    root: Path, run_id: str, name: str, loss: Callable[[int], float], params: dict[str, str]
) -> None:
    """A run as MLflow's file store lays it out: meta.yaml, metrics/<key> lines of
    ``timestamp value step`` (milliseconds), params/<key>, tags/<key>."""
    run = root / "0" / run_id
    (run / "metrics" / "train").mkdir(parents=True)
    (run / "params").mkdir()
    (run / "tags").mkdir()
    (root / "0" / "meta.yaml").write_text("experiment_id: '0'\nname: Default\n")
    (run / "meta.yaml").write_text(
        f"run_id: {run_id}\nrun_name: {name}\nexperiment_id: '0'\nstatus: 3\n"
    )
    lines = [f"{1_790_000_000_000 + 1000 * s} {loss(s)} {s}" for s in range(0, STEPS, 2)]
    (run / "metrics" / "train" / "loss").write_text("\n".join(lines) + "\n")
    val = [f"{1_790_000_000_000 + 1000 * s} {validation_loss(s)} {s}" for s in range(49, STEPS, 50)]
    (run / "metrics" / "val_loss").write_text("\n".join(val) + "\n")
    for key, value in params.items():
        (run / "params" / key).write_text(value)
    (run / "tags" / "mlflow.runName").write_text(name)


def test_an_mlflow_file_store_is_imported_with_its_params(tmp_path: Path) -> None:
    store = tmp_path / "mlruns"
    write_mlflow_run(store, "a" * 32, "calm", healthy_loss, {"lr": "0.001", "optimizer": "adam"})
    write_mlflow_run(store, "b" * 32, "wild", diverging_loss, {"lr": "1.5", "batch_size": "64"})
    assert detect_format(store) == "mlflow"
    result = import_runs(store, tmp_path / "out")
    by_name = {r.name: r for r in result.runs}
    assert set(by_name) == {"calm-aaaaaaaa", "wild-bbbbbbbb"}
    with create_trial(by_name["wild-bbbbbbbb"].trial) as trial:
        config = trial.config()
        assert config["hparams"] == {"lr": 1.5, "batch_size": 64}
        assert (config["learning_rate"], config["batch_size"]) == (1.5, 64)
        assert config["imported"]["loss"] == "train/loss"
        assert config["imported"]["diagnosis"]["verdict"] == "problem"
        assert trial.wall_time(trial.steps()[0]) == pytest.approx(1_790_000_000.0)
    with create_trial(by_name["calm-aaaaaaaa"].trial) as trial:
        lineage = trial.config()["imported"]
        assert lineage["validation_loss"] == "val_loss"
        assert lineage["diagnosis"]["verdict"] == "healthy"


def write_wandb_run(root: Path, run_id: str, loss: Callable[[int], float]) -> Path:
    """A W&B run directory: files/wandb-history.jsonl, files/config.yaml."""
    files = root / f"run-20261130_120000-{run_id}" / "files"
    files.mkdir(parents=True)
    rows = []
    for step in range(STEPS):
        row: dict[str, object] = {"_step": step, "_timestamp": 1.79e9 + step, "loss": loss(step)}
        if step % 50 == 49:
            row["val_loss"] = validation_loss(step)
            row["val_accuracy"] = 0.9
            row["samples"] = {"_type": "table", "path": "media/x.json"}
        rows.append(json.dumps(row))
    (files / "wandb-history.jsonl").write_text("\n".join(rows) + "\n")
    (files / "config.yaml").write_text(
        "wandb_version: 1\n_wandb:\n  value:\n    cli_version: 0.17.0\n"
        "learning_rate:\n  desc: null\n  value: 0.003\nepochs:\n  value: 3\n"
    )
    (files / "wandb-summary.json").write_text(json.dumps({"loss": loss(STEPS - 1)}))
    return files.parent


def test_wandb_run_files_and_a_history_csv_are_imported(tmp_path: Path) -> None:
    wandb = tmp_path / "wandb"
    write_wandb_run(wandb, "calm01", healthy_loss)
    write_wandb_run(wandb, "wild02", diverging_loss)
    result = import_runs(wandb, tmp_path / "out")
    by_name = {r.name: r for r in result.runs}
    assert set(by_name) == {"calm01", "wild02"}
    with create_trial(by_name["calm01"].trial) as trial:
        config = trial.config()
        assert config["hparams"] == {"wandb_version": 1, "learning_rate": 0.003, "epochs": 3}
        assert config["learning_rate"] == 0.003
        assert config["imported"]["validation_loss"] == "val_loss"
        assert config["imported"]["diagnosis"]["verdict"] == "healthy"
        assert "samples" not in trial.tensor_names()  # a W&B table is not a scalar
    with create_trial(by_name["wild02"].trial) as trial:
        assert trial.config()["imported"]["diagnosis"]["verdict"] == "problem"

    csv = tmp_path / "wild-history.csv"
    lines = ["_step,loss,loss__MIN,loss__MAX"]
    lines += [f"{s},{diverging_loss(s)},0,0" for s in range(STEPS)]
    csv.write_text("\n".join(lines) + "\n")
    result = import_runs(csv, tmp_path / "csv")
    with create_trial(result.runs[0].trial) as trial:
        assert trial.tensor_names() == ["vitals/loss"]
        assert trial.config()["imported"]["diagnosis"]["verdict"] == "problem"


def neptune_row(run_id: str, attribute: str, kind: str, step: int | None, **value: object):
    """One row of Neptune's exporter (its README's schema), None where it holds nothing."""
    from decimal import Decimal

    row: dict[str, object] = dict.fromkeys(NEPTUNE_COLUMNS)
    row.update(project_id="org/proj", run_id=run_id, attribute_path=attribute)
    row.update(attribute_type=kind, step=None if step is None else Decimal(step), **value)
    return row


NEPTUNE_COLUMNS = (
    "project_id",
    "run_id",
    "attribute_path",
    "attribute_type",
    "step",
    "timestamp",
    "int_value",
    "float_value",
    "string_value",
    "bool_value",
)


def write_neptune_export(path: Path, runs: dict[str, Callable[[int], float]]) -> None:
    """Parquet as Neptune's exporter writes it: one ``<run id>_part_0.parquet`` per run."""
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    types = [pa.string()] * 4 + [pa.decimal128(18, 6), pa.timestamp("ms", tz="UTC")]
    types += [pa.int64(), pa.float64(), pa.string(), pa.bool_()]
    schema = pa.schema(list(zip(NEPTUNE_COLUMNS, types, strict=True)))
    path.mkdir(parents=True)
    for run_id, loss in runs.items():
        rows = [
            neptune_row(run_id, "parameters/lr", "float", None, float_value=0.01),
            neptune_row(run_id, "parameters/optimizer", "string", None, string_value="sgd"),
            neptune_row(run_id, "sys/name", "string", None, string_value="digits"),
        ]
        rows += [
            neptune_row(run_id, "train/loss", "float_series", s, float_value=loss(s))
            for s in range(STEPS)
        ]
        pq.write_table(pa.Table.from_pylist(rows, schema=schema), path / f"{run_id}_part_0.parquet")


def test_a_neptune_parquet_export_is_imported_and_diagnosed(tmp_path: Path) -> None:
    export = tmp_path / "exports" / "data" / "org_proj"
    write_neptune_export(export, {"DIG-1": healthy_loss, "DIG-2": diverging_loss})
    (export / "broken_part_0.parquet").write_bytes(b"PAR1 not a parquet file")
    assert detect_format(tmp_path / "exports") == "neptune"
    result = import_runs(tmp_path / "exports", tmp_path / "out")
    by_name = {r.name: r for r in result.runs}
    assert set(by_name) == {"DIG-1", "DIG-2"}
    with create_trial(by_name["DIG-2"].trial) as trial:
        config = trial.config()
        assert config["hparams"] == {"parameters/lr": 0.01, "parameters/optimizer": "sgd"}
        assert config["imported"]["loss"] == "train/loss"
        assert config["imported"]["diagnosis"]["verdict"] == "problem"
    with create_trial(by_name["DIG-1"].trial) as trial:
        lineage = trial.config()["imported"]
        assert lineage["diagnosis"]["verdict"] == "healthy"
        # the damaged file is said, and did not hide the good ones
        assert any("broken_part_0.parquet: not read" in p for p in lineage["problems"])


def test_hostile_files_are_refused_one_by_one(tmp_path: Path) -> None:
    from tensorboard.summary import Writer

    logs = tmp_path / "logs"
    writer = Writer(str(logs / "cut"))
    for step in range(100):
        writer.add_scalar("loss", healthy_loss(step), step)
    writer.close()
    (event,) = (logs / "cut").iterdir()
    data = bytearray(event.read_bytes())
    middle = len(data) // 2
    data[middle] ^= 0xFF  # a damaged record: the values before it are kept
    event.write_bytes(bytes(data))
    outside = tmp_path / "secret.tfevents.x"
    outside.write_bytes(b"not yours")
    (logs / "link").mkdir()
    os.symlink(outside, logs / "link" / "events.out.tfevents.1")
    (run,) = [r for r in read_runs(logs, "tensorboard") if r.name == "cut"]
    kept = run.series[0]
    assert 10 < len(kept.steps) < 100
    assert list(kept.steps) == list(range(len(kept.steps)))
    assert any("unreadable from byte" in p for p in run.problems)
    (linked,) = [r for r in read_runs(logs, "tensorboard") if r.name == "link"]
    assert linked.series == [] and any("not read" in p for p in linked.problems)

    # YAML that would run code under yaml.load is refused by safe_load: said, the run kept
    wandb = tmp_path / "wandb"
    files = write_wandb_run(wandb, "evil", healthy_loss) / "files"
    (files / "config.yaml").write_text("x: !!python/object/apply:os.system ['echo pwned']\n")
    with (files / "wandb-history.jsonl").open("a") as out:
        out.write('{"_step": 400, "loss": NaN, "x": \n[1, 2]\n{"_step": 401, "loss": 1e999}\n')
    (run,) = read_runs(wandb)
    assert run.params == {}
    assert any("config.yaml: not read" in p for p in run.problems)
    assert sum("not valid JSON" in p or "too large" in p for p in run.problems) >= 2
    assert len(run.series[0].steps) == STEPS  # the good lines all kept

    # an MLflow metric line that is not "timestamp value step" is said, the others kept
    store = tmp_path / "mlruns"
    write_mlflow_run(store, "c" * 32, "bad", healthy_loss, {})
    metric = store / "0" / ("c" * 32) / "metrics" / "train" / "loss"
    metric.write_text(metric.read_text() + "garbage\n1 nan-ish 3\n")
    (run,) = read_runs(store)
    assert any("expected 'timestamp value step'" in p for p in run.problems)
    assert any("not a number at a step" in p for p in run.problems)
    loss = next(s for s in run.series if s.tag == "train/loss")
    assert len(loss.steps) == STEPS // 2


def test_a_source_of_no_known_format_says_what_it_takes(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("hello")
    code, _, err = run_cli("import", str(tmp_path), "-o", str(tmp_path / "out"))
    assert code == 2
    assert "holds none of the formats tensortap imports" in err
    assert "--format" in err
