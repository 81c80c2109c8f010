"""One writer per worker (local disk and S3, real processes), and a trial whose out_dir is
deleted while training writes to it."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import tensortap as tt
from tensortap.exceptions import WorkerInUse
from tensortap.writer import _ownership as ownership

HELPERS = Path(__file__).parents[1] / "helpers"

from tests.helpers.expected import NAMES, expected_value  # noqa: E402


def _writer(out: str, steps: int) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(HELPERS / "writer_proc.py"), out, "0", "1", str(steps), "0.05"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _wait_for_line(proc: subprocess.Popen[str], line: str, deadline: float = 60.0) -> None:
    end = time.monotonic() + deadline
    assert proc.stdout is not None
    while time.monotonic() < end:
        got = proc.stdout.readline()
        if got.strip() == line:
            return
        if not got and proc.poll() is not None:
            pytest.fail(f"the writer exited ({proc.returncode}): {proc.stderr.read()}")  # type: ignore[union-attr]
    pytest.fail(f"the writer never printed {line!r}")


@pytest.fixture(params=["local", "s3"])
def location(request, tmp_path: Path) -> str:
    if request.param == "local":
        return str(tmp_path / "trial")
    bucket = request.getfixturevalue("s3_bucket")
    return f"s3://{bucket}/owned"


def test_a_script_started_twice_is_refused_and_loses_nothing(location: str) -> None:
    owner = _writer(location, -1)
    try:
        _wait_for_line(owner, "step 5")
        second = _writer(location, 20)  # the same script started again
        _, err = second.communicate(timeout=120)
        assert second.returncode != 0
        assert "WorkerInUse" in err and f"pid {owner.pid}" in err and "worker=rank" in err
        with pytest.raises(WorkerInUse, match=f"pid {owner.pid} on host"):
            tt.Hook(location, worker=0)
        other = tt.Hook(location, worker=1, num_workers=2)  # another worker is free
        other.close()
        deadline = time.monotonic() + 60
        while len(published := tt.create_trial(location).steps()) < 6:  # flushed every 50 ms
            assert time.monotonic() < deadline, "the owner never published"
            time.sleep(0.02)
        owner.send_signal(signal.SIGKILL)
        owner.wait(30)
        # the dead owner's claim goes with it: the script restarted resumes the worker at once
        with tt.Hook(location, worker=0, save_config=tt.SaveConfig(save_interval=1)) as hook:
            hook.save_scalar("loss", 0.5)
            restarted = hook.step
    finally:
        owner.kill()
        owner.wait(30)
    # nothing the owner published was lost: the restarted script continued after its steps
    trial = tt.create_trial(location)
    assert set(published) <= set(trial.steps())
    assert restarted > published[-1]
    # the values of a spread of the published steps, the last ones (just before the kill) among
    # them: the owner writes flat out, so thousands are published (a read is ~15 ms on S3)
    spread = published[:: max(1, len(published) // 80)] + published[-20:]
    for step in sorted(set(spread)):
        np.testing.assert_array_equal(
            trial.tensor(NAMES[0]).value(step, worker="worker_0"), expected_value(NAMES[0], step)
        )
    assert trial.tensor("loss").value(0, worker="worker_0") == 1.0
    assert trial.tensor("loss").value(restarted, worker="worker_0") == 0.5


def test_a_deleted_out_dir_is_recreated_and_reported(tmp_path: Path) -> None:
    out = tmp_path / "trial"
    hook = tt.Hook(
        out,
        save_config=tt.SaveConfig(save_interval=1),
        writer_options=tt.WriterOptions(flush_secs=0.05, check_secs=0.1),
    )
    for step in range(3):
        hook.save_scalar("loss", float(step))
        hook.next_step()
    assert hook.flush()
    shutil.rmtree(out)
    deadline = time.monotonic() + 30
    while not (out / "tensortap.json").exists():
        assert time.monotonic() < deadline, "the trial was never re-created"
        time.sleep(0.02)
    for step in range(3, 6):
        hook.save_scalar("loss", float(step))
        hook.next_step()
    status = hook.close()
    assert not status.healthy
    assert "tensortap.json disappeared" in (status.writer.last_error or "")
    trial = tt.create_trial(out)
    assert trial.tensor("loss").steps() == [3, 4, 5]
    assert trial.tensor("loss").value(5) == 5.0
    assert any("disappeared" in p for p in trial.problems())


def test_a_second_hook_in_one_process_is_refused_until_the_first_closes(tmp_path: Path) -> None:
    first = tt.Hook(tmp_path / "t")
    with pytest.raises(WorkerInUse, match=str(os.getpid())):
        tt.Hook(tmp_path / "t")
    first.close()
    tt.Hook(tmp_path / "t").close()


def test_a_writer_whose_clock_runs_120_s_ahead_does_not_evict_a_live_owner(
    s3_bucket, monkeypatch
) -> None:
    """The S3 lease is judged by the server's clock: a taker's own clock never enters."""
    from tensortap.storage._s3 import S3Store

    location = f"s3://{s3_bucket}/skewed"
    owner = _writer(location, -1)
    try:
        _wait_for_line(owner, "step 3")
        monkeypatch.setattr(ownership, "wall_clock", lambda: time.time() + 120.0)
        with pytest.raises(WorkerInUse, match=f"pid {owner.pid} on host.*by the S3 server's clock"):
            tt.Hook(location, worker=0)
        _wait_for_line(owner, "step 8")  # the owner writes on, still holding its lease
        lease = json.loads(S3Store(location).get(ownership.owner_key("worker_0")))
        assert lease["pid"] == owner.pid
    finally:
        owner.kill()
        owner.wait(30)


@pytest.mark.parametrize("skew", [-120.0, 120.0])
def test_a_dead_owner_elsewhere_is_taken_over_whatever_the_clocks_say(
    s3_bucket, monkeypatch, skew: float
) -> None:
    """An owner on another host that died (its clock an hour ahead) leaves a lease nobody
    renews: once the server says it went its lease period without renewal, a writer (its own
    clock 120 s behind or ahead) takes the worker over."""
    from tensortap.storage._s3 import S3Store

    location = f"s3://{s3_bucket}/dead"
    dead = {"pid": 4242, "host": "a-host-that-died", "session": "gone", "started": 0.0}
    lease = {**dead, "lease_secs": 3.0, "expires": time.time() + 3600.0}
    S3Store(location).put(ownership.owner_key("worker_0"), json.dumps(lease).encode())
    monkeypatch.setattr(ownership, "wall_clock", lambda: time.time() + skew)
    with pytest.raises(WorkerInUse, match="pid 4242 on host a-host-that-died.*renewed [0-3] s ago"):
        tt.Hook(location, worker=0)  # just written: live, whatever its "expires" says
    deadline = time.monotonic() + 30
    hook = None
    while hook is None:
        assert time.monotonic() < deadline, "the dead owner's lease was never taken over"
        try:
            hook = tt.Hook(location, worker=0)
        except WorkerInUse:
            time.sleep(0.2)  # polling the server's clock, with a deadline
    taken = json.loads(S3Store(location).get(ownership.owner_key("worker_0")))
    assert taken["pid"] == os.getpid() and taken["lease_secs"] == ownership.LEASE_SECS
    hook.close()
