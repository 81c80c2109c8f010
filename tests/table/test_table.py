"""Saved statistics as a Parquet dataset and SQL over it: ``export_parquet`` / ``tensortap
export`` write each trial's reductions and scalars as a run partition, appending only what a
live trial published since (nothing rewritten, nothing twice, also after a crash between a part
and its manifest); ``query`` / ``tensortap query`` run DuckDB over it, locally and on the local
S3 server, with values equal to the trial API's."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("pyarrow")
pytest.importorskip("duckdb")

import tensortap as tt
from tensortap.cli import main
from tensortap.exceptions import InvalidConfigError
from tensortap.table import ExportError, connect, export_parquet, query

COLUMNS = [
    "worker",
    "mode",
    "step",
    "global_step",
    "wall_time",
    "tensor",
    "collection",
    "statistic",
    "value",
    "run",
]


def _train(
    out: str | Path,
    steps: range,
    lr: float = 0.1,
    worker: int = 0,
    workers: int = 1,
    compact: bool = False,
):
    """A made-up run: a loss, a learning rate metric, reductions of a weight and of a
    gradient, raw weights (not exported); an evaluation after the last step."""
    hook = tt.Hook(
        out,
        save_config=tt.SaveConfig(save_interval=1),
        include_collections=["losses", "metrics", "weights", "gradients"],
        worker=worker,
        num_workers=workers,
        writer_options=tt.WriterOptions(compact=compact),
    )
    hook.get_collection("gradients").reduction_config = tt.ReductionConfig(
        norms=["l2"], abs_reductions=["max"]
    )
    hook.set_mode(tt.modes.TRAIN)
    for step in steps:
        hook.save_scalar("loss", 2.0 / (1 + step * lr) + worker, "losses")
        hook.save_scalar("learning_rate", lr, "metrics")
        hook.save_tensor("gradient/fc.weight", np.full(4, 0.5 + step + worker), "gradients")
        hook.save_tensor("fc.weight", np.arange(6.0).reshape(2, 3), "weights")
        hook.next_step()
    return hook


def _finish(hook: tt.Hook, eval_loss: float) -> None:
    hook.set_mode(tt.modes.EVAL)
    hook.save_scalar("loss", eval_loss, "losses")
    hook.close()


def test_every_reduction_and_scalar_becomes_a_row_equal_to_the_trials(tmp_path: Path) -> None:
    for worker in (0, 1):
        _finish(_train(tmp_path / "run-a", range(5), worker=worker, workers=2), 9.0)
    _finish(_train(tmp_path / "run-b", range(3), lr=1.0), 7.0)
    done = export_parquet([tmp_path / "run-a", tmp_path / "run-b"], tmp_path / "stats")
    assert [(d.run, d.rows) for d in done] == [("run-a", 2 * (5 * 4) + 2), ("run-b", 3 * 4 + 1)]
    table = query(
        "SELECT * FROM stats ORDER BY run, worker, global_step, tensor, statistic",
        tmp_path / "stats",
    )
    assert table.column_names == COLUMNS
    rows = table.to_pylist()
    assert {r["tensor"] for r in rows} == {"loss", "learning_rate", "gradient/fc.weight"}
    trial = tt.create_trial(tmp_path / "run-a")
    for row in (r for r in rows if r["run"] == "run-a"):
        tensor = trial.tensor(row["tensor"])
        mode = getattr(tt.modes, row["mode"])
        want: np.ndarray | float
        if row["statistic"] == "value":
            want = tensor.value(row["step"], mode=mode, worker=row["worker"])
        else:
            name, on_abs = (
                row["statistic"].removeprefix("abs_"),
                row["statistic"] != (row["statistic"].removeprefix("abs_")),
            )
            want = tensor.reduction_value(
                row["step"], name, mode=mode, worker=row["worker"], abs=on_abs
            )
        assert row["value"] == pytest.approx(float(want))
        assert trial.mode(row["global_step"]) == mode
    by = {(r["tensor"], r["statistic"]): r["collection"] for r in rows}
    assert by[("loss", "value")] == "losses"  # its own collection, not "scalars"
    assert by[("learning_rate", "value")] == "metrics"
    assert by[("gradient/fc.weight", "l2")] == "gradients"
    assert by.keys() >= {("gradient/fc.weight", "abs_max")}
    # The queries the dataset is for: a value at a step for every run, and spikes.
    at_step = query(
        "SELECT run, value FROM stats WHERE tensor = 'loss' AND mode = 'TRAIN' AND step = 2 "
        "AND worker = 'worker_0' ORDER BY run",
        tmp_path / "stats",
    ).to_pylist()
    assert at_step == [
        {"run": "run-a", "value": pytest.approx(2.0 / 1.2)},
        {"run": "run-b", "value": pytest.approx(2.0 / 3.0)},
    ]
    spikes = query(
        "SELECT run, worker, max(value) AS top FROM stats WHERE statistic = 'l2' "
        "AND step > (SELECT max(step) FROM stats) - 1000 GROUP BY run, worker "
        "HAVING top > 10 ORDER BY run, worker",
        tmp_path / "stats",
    ).to_pylist()
    assert spikes == [{"run": "run-a", "worker": "worker_1", "top": pytest.approx(11.0)}]


def test_a_live_trial_is_appended_to_without_rewriting(tmp_path: Path) -> None:
    live = tmp_path / "live"
    hook = _train(live, range(4))
    hook.flush()
    first = export_parquet([live], tmp_path / "stats")[0]
    assert first.part == "run=live/part-000000.parquet" and first.rows == 4 * 4
    part0 = (tmp_path / "stats" / first.part).read_bytes()
    assert export_parquet([live], tmp_path / "stats")[0].part is None  # nothing new
    for step in range(4, 7):
        hook.save_scalar("loss", float(step), "losses")
        hook.next_step()
    _finish(hook, 5.0)
    second = export_parquet([live], tmp_path / "stats")[0]
    assert second.part == "run=live/part-000001.parquet" and second.rows == 3 + 1
    assert (tmp_path / "stats" / first.part).read_bytes() == part0  # not rewritten
    counts = query(
        "SELECT mode, count(*) AS n, count(DISTINCT step) AS steps FROM stats "
        "WHERE tensor = 'loss' GROUP BY mode ORDER BY mode",
        tmp_path / "stats",
    ).to_pylist()
    assert counts == [{"mode": "EVAL", "n": 1, "steps": 1}, {"mode": "TRAIN", "n": 7, "steps": 7}]


def test_a_part_whose_manifest_was_lost_is_written_again_not_twice(tmp_path: Path) -> None:
    _finish(_train(tmp_path / "r", range(3)), 1.0)
    manifest = tmp_path / "stats" / "_tensortap" / "runs" / "r.json"
    export_parquet([tmp_path / "r"], tmp_path / "stats")
    manifest.unlink()  # as if the export died after writing the part
    again = export_parquet([tmp_path / "r"], tmp_path / "stats")[0]
    assert again.part == "run=r/part-000000.parquet"
    assert sorted(p.name for p in (tmp_path / "stats" / "run=r").iterdir()) == [
        "part-000000.parquet"
    ]
    n = query("SELECT count(*) AS n FROM stats", tmp_path / "stats").to_pylist()[0]["n"]
    assert n == 3 * 4 + 1
    assert json.loads(manifest.read_text())["rows"] == n


def test_run_names_are_checked_before_anything_is_written(tmp_path: Path) -> None:
    _finish(_train(tmp_path / "a", range(2)), 1.0)
    _finish(_train(tmp_path / "b", range(2)), 1.0)
    for bad in ("../escape", "a/b", "", ".hidden", "x" * 200):
        with pytest.raises(InvalidConfigError, match="run name"):
            export_parquet([tmp_path / "a"], tmp_path / "stats", runs=[bad])
    with pytest.raises(InvalidConfigError, match="two trials would be exported as run 'same'"):
        export_parquet([tmp_path / "a", tmp_path / "b"], tmp_path / "stats", runs=["same"] * 2)
    assert not (tmp_path / "stats").exists()
    export_parquet([tmp_path / "a"], tmp_path / "stats", runs=["x"])
    with pytest.raises(InvalidConfigError, match="give this trial another run name"):
        export_parquet([tmp_path / "b"], tmp_path / "stats", runs=["x"])


def test_a_dataset_that_is_not_there_is_an_error_not_zero_rows(tmp_path: Path, capsys) -> None:
    with pytest.raises(InvalidConfigError, match=r"no dataset at .*nothing-here.*does not exist"):
        query("SELECT count(*) AS n FROM stats", tmp_path / "nothing-here")
    assert main(["query", "SELECT * FROM stats", "--data", str(tmp_path / "nothing-here")]) == 2
    assert "tensortap export" in capsys.readouterr().err  # what to do
    _finish(_train(tmp_path / "a", range(2)), 1.0)
    export_parquet([tmp_path / "a"], tmp_path / "stats")
    none = query("SELECT count(*) AS n FROM stats", tmp_path / "stats", runs=["other"])
    assert none.to_pylist() == [{"n": 0}]  # a dataset without that run: truly 0 rows


def test_the_commands_export_and_query(tmp_path: Path, capsys) -> None:
    _finish(_train(tmp_path / "r1" / "tensortap", range(3)), 1.5)  # a job's trial: run r1
    assert main(["export", str(tmp_path / "r1/tensortap"), "--parquet", str(tmp_path / "ds")]) == 0
    assert "r1: 13 rows from 1 new segments" in capsys.readouterr().out
    sql = "SELECT run, step, value FROM stats WHERE tensor='loss' AND mode='EVAL'"
    assert main(["query", sql, "--data", str(tmp_path / "ds"), "--format", "csv"]) == 0
    assert capsys.readouterr().out.splitlines() == ["run,step,value", "r1,0,1.5"]
    assert main(["query", "SELECT nope FROM stats", "--data", str(tmp_path / "ds")]) == 2
    assert "the query failed" in capsys.readouterr().err


def test_the_readme_export_and_query_lines_work_as_printed_on_a_tensortap_run_job(
    tmp_path: Path,
) -> None:
    """`tensortap run` keeps a job's trial in runs/JOB/trial, and a PyTorch job's loss is
    named after its loss module: the README's lines, run by a shell where runs/ is, must
    export the job and find its loss."""
    root = Path(__file__).parents[2]
    lines = [
        line.split("  #")[0].strip()
        for line in (root / "README.md").read_text(encoding="utf-8").splitlines()
        if line.startswith(("tensortap export", "tensortap query"))
    ]
    assert len(lines) == 2
    cli = f"{shlex.quote(sys.executable)} -m tensortap.cli"
    script = root / "tests" / "jobs" / "train_script.py"  # plain PyTorch, no tensortap in it
    job = f"{cli} run --quiet --rule loss_not_decreasing -- python {script} --steps 20"
    for command in (job, *(cli + line[len("tensortap") :] for line in lines)):
        done = subprocess.run(command, shell=True, cwd=tmp_path, capture_output=True, text=True)
        assert done.returncode == 0, (command, done.stdout, done.stderr)
    (name,) = [p.name for p in (tmp_path / "runs").iterdir()]
    rows = done.stdout.splitlines()
    assert rows[-1] == "(1 rows)" and rows[1].startswith(name), done.stdout
    assert "CrossEntropyLoss_output_0" in rows[1]


def test_export_and_query_on_the_local_s3_server(s3_bucket) -> None:
    pytest.importorskip("boto3")
    trial = f"s3://{s3_bucket}/jobs/s3run"
    _finish(_train(trial, range(4)), 3.0)
    dataset = f"s3://{s3_bucket}/stats"
    assert export_parquet([trial], dataset)[0].rows == 4 * 4 + 1
    rows = query(
        "SELECT run, mode, step, value FROM stats WHERE tensor = 'loss' ORDER BY global_step",
        dataset,
    ).to_pylist()
    assert [(r["run"], r["mode"], r["step"]) for r in rows][-2:] == [
        ("s3run", "TRAIN", 3),
        ("s3run", "EVAL", 0),
    ]
    assert rows[-1]["value"] == 3.0


@pytest.mark.parametrize("given", ["run[1]", "a*", "a?"])
def test_a_dataset_path_is_taken_literally_never_as_a_glob(tmp_path: Path, given: str) -> None:
    """DuckDB's read_parquet expands ``[``, ``*`` and ``?``: a dataset named ``run[1]`` must not
    answer from its sibling ``run1`` (nor ``a*`` from ``ab``)."""
    sibling = {"run[1]": "run1", "a*": "ab", "a?": "ab"}[given]
    _finish(_train(tmp_path / "t1", range(2)), 1.0)
    _finish(_train(tmp_path / "t2", range(5)), 2.0)
    export_parquet([tmp_path / "t2"], tmp_path / sibling, runs=["r"])  # the same file names
    export_parquet([tmp_path / "t1"], tmp_path / given, runs=["r"])
    sql = "SELECT run, count(*) AS n FROM stats GROUP BY run"
    assert query(sql, tmp_path / given).to_pylist() == [{"run": "r", "n": 2 * 4 + 1}]
    assert query(sql, tmp_path / sibling).to_pylist() == [{"run": "r", "n": 5 * 4 + 1}]
    con = connect(tmp_path / given, runs=["r"])
    try:
        assert con.sql("SELECT count(*) FROM stats WHERE step = 1").fetchall() == [(4,)]
    finally:
        con.close()


def _rows(dataset: Path) -> list[tuple]:
    """Every row of a dataset, duplicates kept, in a fixed order."""
    table = query(
        "SELECT worker, mode, step, tensor, statistic, value FROM stats "
        "ORDER BY worker, global_step, mode, tensor, statistic, value",
        dataset,
    )
    return [tuple(r.values()) for r in table.to_pylist()]


def test_an_unreadable_segment_is_left_pending_and_exported_once_readable(
    tmp_path: Path, capsys
) -> None:
    hook = _train(tmp_path / "r", range(0))
    for step in range(5):  # a segment per step
        hook.save_scalar("loss", float(step), "losses")
        hook.next_step()
        hook.flush()
    _finish(hook, 9.0)
    indexes = sorted((tmp_path / "r" / "workers" / "worker_0" / "index").iterdir())
    assert len(indexes) >= 4
    victim = indexes[1]
    saved = victim.read_bytes()
    victim.write_bytes(saved[: len(saved) // 2])  # unreadable now (a failed read, damage)
    first = export_parquet([tmp_path / "r"], tmp_path / "stats")[0]
    assert first.pending == 1 and first.segments == len(indexes) - 1
    manifest = json.loads((tmp_path / "stats/_tensortap/runs/r.json").read_text())
    seq = int(victim.name.split(".")[0])
    assert manifest["pending"] == {"worker_0": [seq]}
    assert manifest["segments"]["worker_0"] < seq  # the mark does not pass it
    assert main(["export", str(tmp_path / "r"), "--parquet", str(tmp_path / "stats")]) == 0
    assert "1 segments unreadable now, left pending" in capsys.readouterr().out
    victim.write_bytes(saved)  # readable again
    second = export_parquet([tmp_path / "r"], tmp_path / "stats")[0]
    assert (second.segments, second.pending) == (1, 0)
    assert export_parquet([tmp_path / "r"], tmp_path / "stats")[0].segments == 0
    export_parquet([tmp_path / "r"], tmp_path / "whole")  # the trial in one export
    assert _rows(tmp_path / "stats") == _rows(tmp_path / "whole")
    assert len(_rows(tmp_path / "whole")) == len(set(_rows(tmp_path / "whole")))


_EXPORTER = """
import sys, pathlib
from tensortap.table import export_parquet
trial, out, stop = sys.argv[1:]
print("started", flush=True)
while True:
    last = pathlib.Path(stop).exists()
    export_parquet([trial], out, runs=["r"])
    if last:
        break
"""


@pytest.mark.parametrize("compact", [False, True])
def test_two_exporters_of_one_run_at_once_neither_duplicate_nor_lose_rows(
    tmp_path: Path, helper_env: dict[str, str], compact: bool
) -> None:
    """Two real processes export a live trial over and over while it grows: one exporter per
    run at a time (the other waits), so the dataset holds every row of the trial once; also
    while the writer merges its segments (a merged index published after an export listed
    the trial once moved the mark past segments it had not read: 6 of 602 rows lost)."""
    live, dataset, stop = tmp_path / "live", tmp_path / "stats", tmp_path / "stop"
    hook = _train(live, range(1), compact=compact)
    hook.flush()
    helper_env["PYTHONPATH"] = os.pathsep.join(sys.path)
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _EXPORTER, str(live), str(dataset), str(stop)],
            env=helper_env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    try:
        for proc in procs:
            assert proc.stdout is not None and proc.stdout.readline() == "started\n"
        manifest = dataset / "_tensortap" / "runs" / "r.json"
        for step in range(1, 200):
            hook.save_scalar("loss", float(step), "losses")
            hook.save_tensor("gradient/fc.weight", np.full(4, float(step)), "gradients")
            hook.next_step()
            hook.flush()
            if step % 50 == 0:  # let the exporters catch up now and then (poll, deadline)
                deadline = time.monotonic() + 60
                while not manifest.exists() or json.loads(manifest.read_text())["rows"] < step:
                    assert time.monotonic() < deadline, "no export caught up in 60 s"
                    time.sleep(0.01)
        _finish(hook, 5.0)
        stop.touch()
        for proc in procs:
            _, err = proc.communicate(timeout=120)
            assert proc.returncode == 0, err
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    export_parquet([live], tmp_path / "whole", runs=["r"])
    got, want = _rows(dataset), _rows(tmp_path / "whole")
    assert len(got) == len(want) and got == want


_HOLDER = """
import sys
from tensortap.table import export_parquet
from tensortap.storage import open_store
from tensortap.table._export import _claim_run
claim = _claim_run(open_store(sys.argv[1]), "r", 0.0)
print("held", flush=True)
sys.stdin.read()
"""


def test_a_second_exporter_waits_for_the_first_or_is_refused_naming_it(
    tmp_path: Path, helper_env: dict[str, str], capsys
) -> None:
    _finish(_train(tmp_path / "r", range(3)), 1.0)
    helper_env["PYTHONPATH"] = os.pathsep.join(sys.path)
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, str(tmp_path / "stats")],
        env=helper_env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        with pytest.raises(ExportError, match=rf"being exported by pid {holder.pid} .*wait"):
            export_parquet([tmp_path / "r"], tmp_path / "stats", wait=0.2)
        assert not (tmp_path / "stats" / "run=r").exists()
        cmd = ["export", str(tmp_path / "r"), "-o", str(tmp_path / "stats"), "--wait", "0"]
        assert main(cmd) == 2
        assert f"being exported by pid {holder.pid}" in capsys.readouterr().err
        assert holder.stdin is not None
        holder.stdin.close()  # the first exporter ends: the second, waiting, goes on
        assert export_parquet([tmp_path / "r"], tmp_path / "stats", wait=60)[0].rows == 13
    finally:
        if holder.poll() is None:
            holder.kill()
        holder.wait()


def test_one_exporter_per_run_on_the_local_s3_server_too(s3_bucket) -> None:
    pytest.importorskip("boto3")
    from tensortap.storage import open_store
    from tensortap.table._export import _claim_run

    trial = f"s3://{s3_bucket}/jobs/claimed"
    _finish(_train(trial, range(2)), 3.0)
    dataset = f"s3://{s3_bucket}/claimed-stats"
    held = _claim_run(open_store(dataset), "claimed", 0.0)  # a lease, as another exporter's
    try:
        with pytest.raises(ExportError, match="is being exported by pid"):
            export_parquet([trial], dataset, wait=0.2)
    finally:
        held.release()
    assert export_parquet([trial], dataset, wait=0.2)[0].rows == 2 * 4 + 1


def test_a_segment_whose_values_cannot_be_read_is_left_pending_too(tmp_path: Path) -> None:
    hook = _train(tmp_path / "r", range(0))
    for step in range(4):  # a segment per step; the loss's value is in the data object
        hook.save_scalar("loss", float(step), "losses")
        hook.next_step()
        hook.flush()
    _finish(hook, 9.0)
    data = sorted((tmp_path / "r" / "workers" / "worker_0" / "data").iterdir())
    series = (
        tmp_path / "r" / "workers" / "worker_0" / "series" / data[1].name.replace("ttdat", "ttser")
    )
    victims = [(data[1], tmp_path / "aside"), (series, tmp_path / "aside2")]
    for victim, aside in victims:  # gone for now (a failed read, a copy not finished)
        victim.rename(aside)
    first = export_parquet([tmp_path / "r"], tmp_path / "stats")[0]
    assert first.pending == 1 and first.segments == len(data) - 1
    for victim, aside in victims:
        aside.rename(victim)
    assert export_parquet([tmp_path / "r"], tmp_path / "stats")[0].segments == 1
    export_parquet([tmp_path / "r"], tmp_path / "whole")
    assert _rows(tmp_path / "stats") == _rows(tmp_path / "whole")
