"""Sessions: every writing session of a worker is recorded, and a restarted or resumed run
continues the trial's step numbers instead of writing over them (a plain script started again,
the PyTorch hook, zero code change, a script killed with SIGKILL and started again, a loop that
restores its own count); old trials without session records still read; a worker whose
history cannot be read is refused rather than shadowed. The trainers' own resumes are tested
in test_huggingface.py, test_lightning.py and test_jax.py."""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import tensortap as tt
from tensortap.exceptions import ResumeRefused

HELPERS = Path(__file__).parents[1] / "helpers"

from tests.helpers.expected import NAMES, expected_value  # noqa: E402


@pytest.fixture(params=["local", "s3"])
def location(request, tmp_path: Path) -> str:
    if request.param == "local":
        return str(tmp_path / "run")
    return f"s3://{request.getfixturevalue('s3_bucket')}/run"


def plain_script(out: Path | str, train_steps: int, offset: float = 0.0) -> None:
    """What a user's loop does: TRAIN steps with an evaluation every 5th."""
    with tt.Hook(out, save_config=tt.SaveConfig(save_interval=1)) as hook:
        for k in range(train_steps):
            hook.set_mode(tt.modes.TRAIN)
            hook.save_scalar("loss", offset + k)
            hook.next_step()
            if k % 5 == 4:
                hook.set_mode(tt.modes.EVAL)
                hook.save_scalar("loss", offset + 100 + k)
                hook.next_step()


def test_a_script_started_again_continues_the_trials_steps(location: str, caplog) -> None:
    from tensortap.hook import _session_steps

    out = location
    plain_script(out, 10)
    # started again: in another process, which has not written this trial (one process writing
    # on after its own session, as Trainer.evaluate() after train(), is not warned of)
    _session_steps._WRITTEN_HERE.clear()
    with caplog.at_level(logging.WARNING, logger="tensortap"):
        plain_script(out, 10, offset=1000.0)  # the same script, started again
    trial = tt.create_trial(out)
    assert trial.steps() == list(range(24))  # 2 x (10 TRAIN + 2 EVAL), none written twice
    loss = trial.tensor("loss")
    assert loss.steps(mode=tt.modes.TRAIN) == list(range(20))
    assert loss.steps(mode=tt.modes.EVAL) == [0, 1, 2, 3]
    assert [loss.value(k, mode=tt.modes.TRAIN) for k in (0, 9, 10, 19)] == [0, 9, 1000, 1009]
    assert loss.value(1, mode=tt.modes.EVAL) == 109 and loss.value(2, mode=tt.modes.EVAL) == 1104
    first, second = trial.sessions()
    assert (first.worker, first.index, first.resumed_from_step) == ("worker_0", 0, None)
    assert (first.first_step, first.last_step) == (0, 11)
    assert (second.index, second.resumed_from_step, second.first_step) == (1, 11, 12)
    assert second.last_step == 23 and second.resumed
    assert second.mode_steps == {"TRAIN": 10, "EVAL": 2}
    assert second.host == socket.gethostname() and second.pid == os.getpid()
    assert first.started is not None and second.started is not None
    assert first.started <= second.started <= time.time()
    said = [r.getMessage() for r in caplog.records if "continues" in r.getMessage()]
    assert len(said) == 1 and "global step 12 (TRAIN 10, EVAL 2)" in said[0]


def test_a_killed_script_started_again_continues_after_its_last_published_step(
    tmp_path: Path,
) -> None:
    out = str(tmp_path / "run")
    cmd = [sys.executable, str(HELPERS / "writer_proc.py"), out]
    owner = subprocess.Popen([*cmd, "0", "1", "-1", "0.02"], stdout=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        trial = tt.create_trial(out)
        while len(trial.steps()) < 6:  # published every 20 ms
            assert time.monotonic() < deadline, "the script never published"
            time.sleep(0.02)
            trial.refresh()
    finally:
        owner.send_signal(signal.SIGKILL)
        owner.wait(30)
    published = tt.create_trial(out).steps()  # whatever it published before it died
    assert published == list(range(len(published)))
    again = subprocess.run([*cmd, "0", "1", "5", "0.02"], capture_output=True, text=True)
    assert again.returncode == 0, again.stderr
    trial = tt.create_trial(out)
    last = published[-1]
    assert trial.steps() == list(range(last + 6))  # no step lost, none written twice
    assert trial.steps(mode=tt.modes.TRAIN) == list(range(last + 6))
    for step in published:  # the killed run's values, untouched
        np.testing.assert_array_equal(
            trial.tensor(NAMES[0]).value(step), expected_value(NAMES[0], step)
        )
    for k in range(5):  # the restarted run's own steps 0-4 follow them
        np.testing.assert_array_equal(
            trial.tensor(NAMES[0]).value(last + 1 + k), expected_value(NAMES[0], k)
        )
    killed, restarted = trial.sessions()
    assert killed.pid == owner.pid and killed.last_step == last
    assert restarted.resumed_from_step == last and restarted.first_step == last + 1
    assert "resumed" in again.stderr and f"global step {last + 1}" in again.stderr


def test_the_pytorch_hook_started_again_continues(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    import tensortap.pytorch as ttp

    def train(steps: int) -> None:
        torch.manual_seed(0)
        model = torch.nn.Linear(4, 2)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        hook = ttp.Hook(tmp_path, save_config=tt.SaveConfig(save_interval=1))
        hook.register_module(model)
        for _ in range(steps):
            loss = model(torch.ones(3, 4)).pow(2).mean()
            hook.record_loss(loss)
            opt.zero_grad()
            loss.backward()
            opt.step()
        hook.close()

    train(3)
    train(4)
    trial = tt.create_trial(tmp_path)
    assert trial.tensor("loss").steps(mode=tt.modes.TRAIN) == list(range(7))
    assert trial.steps() == list(range(7))
    assert [s.first_step for s in trial.sessions()] == [0, 3]


def test_zero_code_change_started_again_continues(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    config = {
        "out_dir": str(tmp_path / "run"),
        "hook_parameters": {"save_interval": "1"},
        "collection_configurations": [{"name": "losses"}],
    }
    (tmp_path / "hook.json").write_text(json.dumps(config))
    cmd = [sys.executable, "-m", "tensortap.attach", "--config", str(tmp_path / "hook.json")]
    cmd += [str(HELPERS / "zcc_train.py"), "3", "functional", "1"]
    printed = []
    for _ in range(2):
        result = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        assert result.returncode == 0, result.stderr
        printed += [float(line.split()[-1]) for line in result.stdout.splitlines()]
    trial = tt.create_trial(tmp_path / "run")
    loss = trial.tensor("loss")
    assert loss.steps(mode=tt.modes.TRAIN) == list(range(6))
    first, second = trial.sessions()
    assert second.first_step is not None and first.last_step is not None
    assert second.first_step > first.last_step  # the first run's evaluation step kept its place
    got = [loss.value(k, mode=tt.modes.TRAIN) for k in range(6)]
    np.testing.assert_allclose(got, printed, rtol=1e-5)


def test_a_loop_that_restores_its_own_count_numbers_from_it(tmp_path: Path, caplog) -> None:
    with tt.Hook(tmp_path, save_config=tt.SaveConfig(save_interval=1)) as hook:
        hook.set_mode(tt.modes.TRAIN)
        for k in range(6):
            hook.save_scalar("loss", k)
            hook.next_step()
    # restarted from its checkpoint of step 4: steps 4 and 5 are done again
    with (
        caplog.at_level(logging.WARNING, logger="tensortap"),
        tt.Hook(tmp_path, save_config=tt.SaveConfig(save_interval=1)) as hook,
    ):
        hook.continue_at(4, tt.modes.TRAIN, source="the checkpoint")
        hook.set_mode(tt.modes.TRAIN)
        for k in range(4, 8):
            hook.save_scalar("loss", 10 + k)
            hook.next_step()
    trial = tt.create_trial(tmp_path)
    loss = trial.tensor("loss")
    assert trial.steps() == list(range(10))  # global steps never repeat
    assert loss.steps(mode=tt.modes.TRAIN) == list(range(8))  # each step number once
    assert [loss.value(k, mode=tt.modes.TRAIN) for k in (3, 4, 7)] == [3, 14, 17]
    assert [loss.value(g) for g in (4, 5, 6)] == [4, 5, 14]  # the first run's 4 and 5 stay
    assert trial.mode_step(6) == 4 and trial.global_step(tt.modes.TRAIN, 4) == 6
    second = trial.sessions()[1]
    assert second.rolled_back == (("TRAIN", 4, 5),) and second.step_source == "the checkpoint"
    assert second.mode_steps["TRAIN"] == 4
    said = " ".join(r.getMessage() for r in caplog.records)
    assert "TRAIN steps 4-5 again" in said and "the checkpoint" in said


def test_a_jump_forward_moves_the_global_step_as_far(tmp_path: Path) -> None:
    with tt.Hook(tmp_path, save_config=tt.SaveConfig(save_interval=1)) as hook:
        hook.continue_at(100)  # e.g. resumed from a checkpoint into a new out_dir
        hook.set_mode(tt.modes.TRAIN)
        hook.save_scalar("loss", 1.0)
        with pytest.raises(tt.exceptions.InvalidConfigError, match="an int >= 0"):
            hook.continue_at(-1)
    trial = tt.create_trial(tmp_path)
    assert trial.steps() == [100] and trial.steps(mode=tt.modes.TRAIN) == [100]
    assert trial.sessions()[0].resumed_from_step is None


def test_a_trial_written_before_sessions_were_recorded_reads_and_continues(
    tmp_path: Path,
) -> None:
    plain_script(tmp_path, 5)
    for record in (tmp_path / "workers" / "worker_0" / "sessions").iterdir():
        record.unlink()  # what an older tensortap left: no session records
    (tmp_path / "workers" / "worker_0" / "end.json").unlink()  # and a killed writer
    trial = tt.create_trial(tmp_path)
    assert trial.steps() == list(range(6))
    (old,) = trial.sessions()
    assert (old.index, old.first_step, old.last_step, old.started) == (0, 0, 5, None)
    plain_script(tmp_path, 5, offset=50.0)
    trial = tt.create_trial(tmp_path)
    assert trial.steps() == list(range(12))
    old, new = trial.sessions()
    assert (old.index, new.index, new.resumed_from_step, new.first_step) == (0, 1, 5, 6)


def test_a_worker_whose_history_cannot_be_read_is_refused(tmp_path: Path) -> None:
    plain_script(tmp_path, 5)
    index = next((tmp_path / "workers" / "worker_0" / "index").iterdir())
    index.write_bytes(b"damaged")
    before = sorted(p.name for p in tmp_path.rglob("*"))
    with pytest.raises(ResumeRefused, match="cannot tell where") as refused:
        tt.Hook(tmp_path)
    assert str(index.name) in str(refused.value) and "new out_dir" in str(refused.value)
    assert sorted(p.name for p in tmp_path.rglob("*")) == before  # nothing written
    tt.Hook(tmp_path, worker=1, num_workers=2).close()  # another worker is not held back


def test_a_reader_that_saw_the_end_sees_the_resumed_session(tmp_path: Path) -> None:
    plain_script(tmp_path, 5)
    trial = tt.create_trial(tmp_path)
    assert trial.loaded_all_steps and len(trial.steps()) == 6
    hook = tt.Hook(tmp_path, save_config=tt.SaveConfig(save_interval=1))
    hook.set_mode(tt.modes.TRAIN)
    hook.save_scalar("loss", 7.0)
    hook.next_step()
    assert hook.flush()
    assert trial.refresh()  # as the dashboard does, every half second
    assert not trial.loaded_all_steps
    assert trial.steps() == list(range(7)) and len(trial.sessions()) == 2  # type: ignore[unreachable]
    hook.close()
    trial.refresh()
    assert trial.loaded_all_steps
