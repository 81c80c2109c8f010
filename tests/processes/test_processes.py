"""Real processes: a live reader beside a writer, a writer killed with SIGKILL, two workers."""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest

import tensortap as tt
from tensortap import StepState
from tests.conftest import helper_cmd
from tests.helpers.expected import NAMES, expected_value

DEADLINE = 60.0


def wait_for_line(proc: subprocess.Popen[str], prefix: str) -> str:
    """Read the process's output until a line starts with `prefix` (or it exits)."""
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith(prefix):
            return line
    raise AssertionError(f"process exited before printing {prefix!r}")


@pytest.fixture(params=["local", "s3"])
def location(request, trial_dir: Path) -> str:
    """Where the trial lives: a directory, or a prefix on the local S3 server."""
    if request.param == "s3":
        return f"s3://{request.getfixturevalue('s3_bucket')}/live/trial"
    return str(trial_dir)


def test_reader_process_never_sees_partial_steps(location: str, helper_env) -> None:
    steps = 300
    reader = subprocess.Popen(
        helper_cmd("reader_proc.py", location, steps, DEADLINE),
        stdout=subprocess.PIPE,
        text=True,
        env=helper_env,
    )
    writer = subprocess.run(
        helper_cmd("writer_proc.py", location, 0, 1, steps, 0.01),
        capture_output=True,
        text=True,
        env=helper_env,
        timeout=DEADLINE,
    )
    assert writer.returncode == 0, writer.stderr
    out, _ = reader.communicate(timeout=DEADLINE)
    assert reader.returncode == 0, out
    assert out.startswith("ok")


def test_sigkill_leaves_every_published_step_readable(location: str, helper_env) -> None:
    """Killed at any moment (mid-upload on S3), the writer leaves a trial that opens with
    every step published before the kill, read live while it ran."""
    proc = subprocess.Popen(
        helper_cmd("writer_proc.py", location, 0, 1, -1, 0.01),
        stdout=subprocess.PIPE,
        text=True,
        env=helper_env,
    )
    try:
        trial = tt.create_trial(location, refresh_interval=0)
        deadline = time.monotonic() + DEADLINE
        while len(trial.steps()) < 20:  # poll with a deadline: published steps to compare
            assert time.monotonic() < deadline, "writer published nothing"
            assert proc.poll() is None
            time.sleep(0.01)
        before = trial.steps()
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=DEADLINE)
    after = tt.create_trial(location)
    steps = after.steps()
    assert set(before) <= set(steps)
    assert steps == list(range(len(steps)))  # no holes, no partial step
    for step in steps:
        assert sorted(after.tensor_names(step=step)) == sorted([*NAMES, "loss"])
    for name in NAMES:
        values = after.tensor(name).values()  # all steps, fetched together
        assert sorted(values) == steps
        for step, got in values.items():
            np.testing.assert_array_equal(got, expected_value(name, step))
    assert not after.loaded_all_steps  # the end was never marked
    assert after.worker_status("worker_0") is None


@pytest.mark.parametrize("steps", [[40, 40], [40, 25]])
def test_two_workers_write_one_trial(trial_dir: Path, helper_env, steps) -> None:
    procs = [
        subprocess.Popen(
            helper_cmd("writer_proc.py", trial_dir, rank, 2, steps[rank], 0.01),
            stdout=subprocess.PIPE,
            text=True,
            env=helper_env,
        )
        for rank in (0, 1)
    ]
    for proc in procs:
        proc.communicate(timeout=DEADLINE)
        assert proc.returncode == 0
    trial = tt.create_trial(trial_dir)
    assert trial.workers() == ["worker_0", "worker_1"]
    assert trial.loaded_all_steps
    assert trial.steps() == list(range(max(steps)))
    common = min(steps) - 1
    assert trial.tensor(NAMES[0]).workers(common) == ["worker_0", "worker_1"]
    np.testing.assert_array_equal(
        trial.tensor(NAMES[1]).value(common, worker="worker_1"), expected_value(NAMES[1], common)
    )
    if steps[0] != steps[1]:
        assert trial.tensor(NAMES[0]).workers(max(steps) - 1) == ["worker_0"]


def test_steps_complete_only_when_every_worker_has_them(trial_dir: Path) -> None:
    hooks = [
        tt.Hook(trial_dir, save_config=tt.SaveConfig(save_interval=1), worker=r, num_workers=2)
        for r in (0, 1)
    ]
    trial = tt.create_trial(trial_dir, refresh_interval=0)
    for step in range(3):
        hooks[0].save_scalar("loss", float(step))
        hooks[0].next_step()
    hooks[0].flush()
    assert trial.steps() == []
    assert trial.steps(show_incomplete_steps=True) == [0, 1, 2]
    assert trial.has_passed_step(0) == StepState.NOT_YET_AVAILABLE
    hooks[1].save_scalar("loss", 0.0)
    hooks[1].next_step()
    hooks[1].flush()
    assert trial.steps() == [0]
    for hook in hooks:
        hook.close()
    assert trial.steps() == [0, 1, 2] and trial.loaded_all_steps
