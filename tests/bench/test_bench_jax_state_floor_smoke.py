"""The JAX state floor benchmark (bench/bench_jax_state_floor.py) still runs: a smoke run of a
few steps. It checks that every configuration trains and is reported, and that the step it
times with the attachment's in-step work really fills the tap's ring; never a timing."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("jax")
pytest.importorskip("flax")
pytest.importorskip("optax")
ROOT = Path(__file__).parents[2]


def test_the_jax_state_floor_benchmark_reports_every_configuration() -> None:
    cmd = [sys.executable, str(ROOT / "bench" / "bench_jax_state_floor.py")]
    cmd += ["--rounds", "1", "--steps", "3", "--hidden", "8", "--batch", "4"]
    env = {"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin", "JAX_PLATFORMS": "cpu"}
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    names = [line[:36].strip() for line in lines[2:5]]
    assert names == ["plain", "+ the tap's two arrays, untouched", "+ the shipped in-step work"]
    assert lines[5].startswith("1.10x of the plain step allows")


def test_the_shipped_step_writes_every_steps_vital_signs_and_keeps_due_arrays() -> None:
    from bench import bench_jax_state_floor as floor
    from tensortap.attach._jax_state import RING, _header, init_tap

    steps, params, tx = floor.make_steps(8, 4)
    tap = init_tap(params)
    state, ring, kept = tx.init(params), tap.ring, tap.kept
    losses = []
    for _ in range(12):
        params, state, loss, ring, kept = steps[floor.CONFIGS[2]](params, state, ring, kept)
        losses.append(float(loss))
    ring = np.asarray(ring)
    assert _header(ring) == (12, 10)  # 12 steps taken; step 10's arrays kept (every 10th)
    np.testing.assert_allclose(ring[:12, 0], losses, rtol=1e-6)  # each step's own loss
    assert np.isfinite(ring[:12, 1:3]).all() and np.isnan(ring[12:RING, 0]).all()
    assert float(np.abs(np.asarray(kept)).sum()) > 0
