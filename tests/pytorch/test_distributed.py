"""DDP with two real gloo processes: each rank writes as worker_<rank> into one trial."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np

import tensortap.pytorch as tt
from tests.conftest import free_port

HELPERS = Path(__file__).parents[1] / "helpers"


def test_two_ddp_ranks_write_one_trial(tmp_path: Path, helper_env) -> None:
    out = tmp_path / "run"
    port = free_port()
    procs = []
    for rank in range(2):
        env = dict(
            helper_env,
            RANK=str(rank),
            WORLD_SIZE="2",
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=str(port),
            PYTHONPATH=str(HELPERS),
        )
        cmd = [sys.executable, str(HELPERS / "ddp_train.py"), str(out), "5"]
        procs.append(
            subprocess.Popen(
                cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
            )
        )
    outputs = [p.communicate(timeout=120) for p in procs]
    for p, (_, stderr) in zip(procs, outputs):
        assert p.returncode == 0, stderr
    assert "rank 0 done as worker_0" in outputs[0][0]
    assert "rank 1 done as worker_1" in outputs[1][0]

    trial = tt.create_trial(out)
    assert trial.workers() == ["worker_0", "worker_1"]
    assert trial.steps() == [0, 2, 4]  # complete on every worker
    grad = trial.tensor("gradient/fc1.weight")
    assert grad.workers(2) == ["worker_0", "worker_1"]
    for step in trial.steps():
        # DDP averages gradients across ranks, so both workers saved the same values ...
        np.testing.assert_allclose(
            grad.value(step, worker="worker_0"), grad.value(step, worker="worker_1"), rtol=1e-6
        )
        np.testing.assert_array_equal(
            trial.tensor("fc1.weight").value(step, worker="worker_0"),
            trial.tensor("fc1.weight").value(step, worker="worker_1"),
        )
    # ... while each rank's loss is its own batch's.
    loss = trial.tensor("loss")
    assert loss.value(0, worker="worker_0") != loss.value(0, worker="worker_1")
    assert all(trial.worker_status(w) is not None for w in trial.workers())
