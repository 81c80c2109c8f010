"""The long-run benchmark (bench/bench_long.py) still runs, and gives both tools the same
data: a smoke run on tiny runs (reading and the report; the paint measures need Chromium and
are left to the benchmark itself). It checks figures are reported, never a timing."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("tensorboard")
ROOT = Path(__file__).parents[2]

from bench import bench_long  # noqa: E402


@pytest.mark.parametrize("name", ["grid-40x3", "reference-25", "wide-3x50"])
def test_both_tools_get_the_same_values(tmp_path: Path, name: str) -> None:
    from tensorboard.backend.event_processing import event_accumulator as ea

    from tensortap.trials._series import SeriesReader

    spec = bench_long.RunSpec.parse(name)
    bench_long.write_tensortap(spec, tmp_path / "tt")
    bench_long.write_tensorboard(spec, tmp_path / "tb")
    acc = ea.EventAccumulator(str(tmp_path / "tb"), size_guidance={ea.SCALARS: 0})
    acc.Reload()
    board = {tag: [e.value for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}
    ours = {}
    for key, columns in SeriesReader(tmp_path / "tt").series().groups():
        tag = key.tensor + ("" if key.statistic == "value" else f"/{key.statistic}")
        assert list(columns["global_step"]) == list(range(spec.steps)), tag
        ours[tag] = columns["value"]
    assert sorted(ours) == sorted(board)
    assert len(ours) == spec.series
    for tag, values in board.items():  # TensorBoard keeps float32, as the grid writes
        np.testing.assert_allclose(ours[tag], values, rtol=1e-6, err_msg=tag)


@pytest.mark.slow
def test_the_benchmark_reads_and_reports_every_run(tmp_path: Path) -> None:
    cmd = [sys.executable, str(ROOT / "bench" / "bench_long.py"), "--out", str(tmp_path)]
    # two kinds (each run's reads start TensorBoard's reader afresh: ~12 s a run); the
    # reference and wide writers are read by test_both_tools_get_the_same_values
    cmd += ["--runs", "grid-30x4,paced-30x4", "--measures", "read,report"]
    cmd += ["--repeat", "1"]
    env = {"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin"}
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env, cwd=ROOT)
    assert result.returncode == 0, result.stderr[-3000:]
    (found,) = tmp_path.glob("results-*.json")
    doc = json.loads(found.read_text())
    runs = ["grid-30x4", "paced-30x4"]
    assert [r["run"] for r in doc["runs"]] == runs
    for run in doc["runs"]:
        reads = run["read"]
        assert "rows_differ" not in reads, reads
        assert reads["tensorboard"]["rows"] == run["values"]
        assert reads[doc["tensortap_reader"]]["rows"] == run["values"]
        assert reads["tensorboard"]["cpu_s"] > 0
        assert run["report"]["html_mib"] > 0
    table = next(tmp_path.glob("results-*.md")).read_text()
    assert "| read every series (CPU) |" in table
    assert table.count(" / ") >= 3  # tensortap / TensorBoard in the read row's cells
    # a second run takes the cached copies
    again = subprocess.run(
        [*cmd[:-2], "--repeat", "1", "--generate-only"],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=ROOT,
    )
    assert again.returncode == 0
    assert "wrote it in" not in again.stdout
