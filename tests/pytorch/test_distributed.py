"""DDP with two real gloo processes: each rank writes as worker_<rank> into one trial."""

from __future__ import annotations

from pathlib import Path

import numpy as np

import tensortap.pytorch as tt
from tests.conftest import helper_cmd
from tests.helpers.ranks import run_ranks

HELPERS = Path(__file__).parents[1] / "helpers"


def test_two_ddp_ranks_write_one_trial(tmp_path: Path, helper_env) -> None:
    out = tmp_path / "run"
    env = dict(helper_env, PYTHONPATH=str(HELPERS))
    done = run_ranks(helper_cmd("ddp_train.py", out, 5), 2, env, timeout=120)
    for p in done:
        assert p.returncode == 0, p.stderr
    assert "rank 0 done as worker_0" in done[0].stdout
    assert "rank 1 done as worker_1" in done[1].stdout

    trial = tt.create_trial(out)
    assert trial.workers() == ["worker_0", "worker_1"]
    grad = trial.tensor("gradient/fc1.weight")
    # the hook's schedule, kept by the gradients (vitals alone are saved at every step)
    assert grad.steps() == [0, 2, 4]
    assert all(grad.workers(step) == ["worker_0", "worker_1"] for step in grad.steps())
    for step in grad.steps():
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
