"""The GPU benchmark (bench/bench_gpu.py) still runs: a smoke run on the CPU with tiny shapes,
one step per configuration. It checks that every configuration trains and is reported, never
a timing."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
ROOT = Path(__file__).parents[2]


def test_the_gpu_benchmark_runs_every_configuration(tmp_path: Path) -> None:
    cmd = [sys.executable, str(ROOT / "bench" / "bench_gpu.py"), "--device", "cpu", "--small"]
    cmd += ["--model", "gpt", "--rounds", "1", "--steps", "1"]
    env = {"BENCH_DIR": str(tmp_path), "PATH": "/usr/bin:/bin"}
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    rows = [line for line in result.stdout.splitlines() if line.startswith("| ")][1:]
    names = [row.split("|")[1].strip() for row in rows]
    assert names == [
        "no hook",
        "default (losses)",
        "l2 of every gradient every step",
        "min/max/mean/l1/l2 of every gradient every step",
        "numerics of every gradient every step",
        "weights+gradients every 10 steps",
        "guard",
        "floor: foreach l2",
        "floor: foreach 5 statistics",
        "floor: copy + write every 10 steps",
    ]
    assert "of the floor" in rows[2]
