"""Trial queries, their errors, and the live view."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import tensortap as tt
from tensortap import StepState, modes
from tensortap.exceptions import (
    InvalidConfigError,
    InvalidWorker,
    MissingCollectionFiles,
    NoMoreData,
    NotATrialError,
    StepNotYetAvailable,
    StepUnavailable,
    TensorUnavailable,
    TensorUnavailableForStep,
    UnsupportedFormatVersion,
)
from tensortap.storage import MemoryStore


def write(target, steps: int = 6, interval: int = 2, close: bool = True) -> tt.Hook:
    hook = tt.Hook(target, save_config=tt.SaveConfig(save_interval=interval))
    hook.set_mode(modes.TRAIN)
    for i in range(steps):
        hook.save_tensor("w", np.full(3, i, np.float32))
        if i % 4 == 0:
            hook.save_tensor("sometimes", float(i))
        hook.next_step()
    if close:
        hook.close()
    return hook


def test_errors_name_what_is_available() -> None:
    store = MemoryStore()
    write(store)
    trial = tt.create_trial(store)
    with pytest.raises(TensorUnavailable, match=r"'nope' was never saved.*'sometimes', 'w'"):
        trial.tensor("nope")
    with pytest.raises(StepUnavailable, match="step 1 .*TRAIN.* not saved"):
        trial.tensor("w").value(1, mode=modes.TRAIN)
    with pytest.raises(
        TensorUnavailableForStep, match=r"'sometimes' was not saved at step 2.*0, 4"
    ):
        trial.tensor("sometimes").value(2)
    with pytest.raises(NoMoreData, match="training has ended"):
        trial.tensor("w").value(100)
    with pytest.raises(InvalidWorker, match="worker_0"):
        trial.tensor("w").value(0, worker="worker_9")
    with pytest.raises(MissingCollectionFiles, match="no collection 'nope'"):
        trial.collection("nope")
    assert isinstance(TensorUnavailable("x"), LookupError)


def test_queries() -> None:
    store = MemoryStore()
    write(store)
    trial = tt.create_trial(store)
    assert trial.steps() == [0, 2, 4] and trial.steps(modes.TRAIN) == [0, 2, 4]
    assert trial.tensor_names(step=4) == ["sometimes", "w"]
    assert trial.tensor_names(step=2) == ["w"]
    assert trial.tensor_names(regex="^s") == ["sometimes"]
    assert trial.has_tensor("w") and not trial.has_tensor("x")
    assert trial.tensor("w").workers(0) == ["worker_0"]
    assert trial.workers() == ["worker_0"]
    assert trial.has_passed_step(2) == StepState.AVAILABLE
    assert trial.has_passed_step(3) == StepState.UNAVAILABLE
    assert trial.has_passed_step(50) == StepState.NOT_YET_AVAILABLE
    assert trial.loaded_all_steps
    assert [t.name for t in trial.tensors_in_collection("default")] == ["sometimes", "w"]
    assert trial.problems() == []
    assert trial.wall_time(0) is not None
    with pytest.raises(tt.exceptions.InvalidConfigError, match="invalid regex"):
        trial.tensor_names(regex="(")


def test_live_trial_sees_new_steps_without_reopening() -> None:
    store = MemoryStore()
    trial = tt.create_trial(store, refresh_interval=0)  # before training starts
    assert trial.steps() == [] and not trial.loaded_all_steps
    hook = write(store, steps=3, interval=1, close=False)
    hook.flush()
    assert trial.steps() == [0, 1, 2]
    with pytest.raises(StepNotYetAvailable, match="wait_for_steps"):
        trial.tensor("w").value(5)
    with pytest.raises(StepNotYetAvailable):
        trial.wait_for_steps([5], timeout=0.05)
    hook.save_tensor("w", np.zeros(3))
    hook.next_step()
    hook.flush()
    trial.wait_for_steps([3], mode=modes.TRAIN, timeout=5)
    assert trial.tensor("w").value(3).tolist() == [0, 0, 0]
    hook.close()
    with pytest.raises(NoMoreData, match=r"steps \[9\]"):
        trial.wait_for_steps([9], timeout=5)
    assert trial.loaded_all_steps


def test_not_a_trial(tmp_path) -> None:
    file = tmp_path / "file.txt"
    file.write_text("x")
    with pytest.raises(NotATrialError, match="is a file"):
        tt.create_trial(file)
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.md").write_text("x")
    with pytest.raises(NotATrialError, match="holds no tensortap trial.*notes.md"):
        tt.create_trial(other)
    assert tt.create_trial(tmp_path / "not-yet").steps() == []


def test_a_path_that_holds_nothing_yet_warns_at_once_or_raises_when_asked(tmp_path, caplog) -> None:
    """smdebug waits for a trial to appear (a notebook opens it before training writes it), so
    this is no error; but a mistyped path must not pass in silence."""
    missing, empty = tmp_path / "runs" / "jbo1", tmp_path / "empty"
    empty.mkdir()
    with caplog.at_level("WARNING", logger="tensortap"):
        assert tt.create_trial(missing).steps() == []
        assert tt.create_trial(out_dir=str(empty)).steps() == []
    warned = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warned) == 2
    assert str(missing) in warned[0] and "does not exist" in warned[0]
    assert str(empty) in warned[1] and "is an empty directory" in warned[1]
    assert "must_exist=True" in warned[0]
    caplog.clear()
    with caplog.at_level("WARNING", logger="tensortap"):  # a reader that starts first on purpose
        assert tt.Trial(missing, waiting=True).steps() == []
    assert not [r for r in caplog.records if r.levelname == "WARNING"]
    with pytest.raises(NotATrialError, match=f"no trial at {missing}.*does not exist"):
        tt.create_trial(missing, must_exist=True)
    with pytest.raises(NotATrialError, match="is an empty directory"):
        tt.Trial(empty, must_exist=True)
    write(empty)
    assert tt.create_trial(empty, must_exist=True).steps(modes.TRAIN) == [0, 2, 4]


def test_create_trial_opens_the_trial_of_a_job_directory(tmp_path, caplog) -> None:
    """What ``tensortap run`` makes keeps its trial in JOB/trial; every CLI command takes the
    job directory, and so does create_trial."""
    import sys

    from tensortap.jobs import TrainingJob

    go = tmp_path / "go"
    script = f"import os, time\nwhile not os.path.exists({str(go)!r}): time.sleep(0.05)\n"
    script += "import tensortap as tt\nwith tt.Hook.create_from_json_file() as hook:\n"
    script += "    hook.save_scalar('loss', 0.5)\n"
    job = TrainingJob(command=[sys.executable, "-c", script], output_path=tmp_path / "runs")
    job.fit(wait=False)
    with caplog.at_level("WARNING", logger="tensortap"):
        before = tt.create_trial(job.job_dir)  # opened before training wrote anything
    assert f"no trial at {tmp_path / 'runs' / job.name / 'trial'} yet" in caplog.text
    go.touch()
    assert job.wait(timeout=120, logs=False)["status"] == "Completed"
    assert before.tensor_names() == ["loss"]
    assert tt.create_trial(job.job_dir, must_exist=True).tensor("loss").value(0) == 0.5


def test_newer_format_version_is_refused(tmp_path) -> None:
    write(tmp_path / "t")
    marker = tmp_path / "t" / "tensortap.json"
    doc = json.loads(marker.read_text())
    doc["format_version"] = 99
    marker.write_text(json.dumps(doc))
    with pytest.raises(UnsupportedFormatVersion, match="version 99.*upgrade tensortap"):
        tt.create_trial(tmp_path / "t")
    with pytest.raises(UnsupportedFormatVersion):
        tt.Hook(tmp_path / "t")


def test_hook_output_dir_errors(tmp_path) -> None:
    file = tmp_path / "file"
    file.write_text("x")
    with pytest.raises(tt.exceptions.StorageError, match="is a file"):
        tt.Hook(file)
    with pytest.raises(tt.exceptions.StorageError, match="cannot write a trial.*writable"):
        tt.Hook(file / "sub")


def test_unwritable_directory(tmp_path) -> None:
    import os

    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        if os.access(locked, os.W_OK):
            pytest.skip("running as a user who can write anywhere (root)")
        with pytest.raises(tt.exceptions.StorageError, match="cannot write a trial"):
            tt.Hook(locked / "trial")
    finally:
        locked.chmod(0o700)


def test_unknown_url_scheme() -> None:
    with pytest.raises(tt.exceptions.InvalidConfigError, match="no storage backend for gs://"):
        tt.create_trial("gs://bucket/x")


def test_trial_opened_before_training_is_current_right_after_close(tmp_path) -> None:
    trial = tt.create_trial(tmp_path / "t")  # default refresh settings, nothing written yet
    write(tmp_path / "t")
    assert trial.loaded_all_steps
    assert trial.steps(modes.TRAIN) == [0, 2, 4]
    assert trial.tensor_names(collection="default") == ["sometimes", "w"]


def test_a_trial_created_between_its_two_first_looks_opens() -> None:
    """The reader misses the marker, then lists it (the writer made it meanwhile)."""
    from tensortap.storage import MemoryStore

    store = MemoryStore()
    with tt.Hook(store, save_config=tt.SaveConfig(save_interval=1)) as hook:
        hook.save_scalar("loss", 1.0)
        hook.next_step()
    real_get, missed = store.get, list[str]()

    def late_get(key: str) -> bytes:
        if key == "tensortap.json" and not missed:
            missed.append(key)
            raise KeyError(key)
        return real_get(key)

    store.get = late_get  # type: ignore[method-assign]
    assert tt.create_trial(store).steps() == [0] and missed


def test_global_steps_pair_with_the_steps_of_a_mode(tmp_path) -> None:
    hook = tt.Hook(tmp_path / "t", save_config=tt.SaveConfig(save_interval=1))
    for step in range(6):
        hook.set_mode(tt.modes.EVAL if step % 3 == 2 else tt.modes.TRAIN)
        hook.save_scalar("loss", float(step))
        hook.next_step()
    hook.close()
    loss = tt.create_trial(tmp_path / "t").tensor("loss")
    for mode in (tt.modes.TRAIN, tt.modes.EVAL, None):
        expected = [
            s if mode is None else loss.trial.global_step(mode, s) for s in loss.steps(mode)
        ]
        assert loss.global_steps(mode) == expected
    assert loss.global_steps(tt.modes.EVAL) == [2, 5]


def test_an_outline_answers_what_was_saved_and_refuses_saved_values(tmp_path: Path) -> None:
    """``records=False`` keeps each index's header, not its rows: steps, modes, names,
    collections, sessions, problems and series as the trial read whole says (merged segments
    too), and a clear error where saved values would be read."""
    from tensortap.writer import WriterOptions

    hook = tt.Hook(
        tmp_path,
        save_config=tt.SaveConfig(save_interval=1),
        include_collections=["scalars"],
        writer_options=WriterOptions(compact=True),
    )
    for step in range(60):
        hook.set_mode(tt.modes.TRAIN if step < 40 else tt.modes.EVAL)
        for i in range(3):
            hook.save_scalar(f"s{i}", float(step + i))
        hook.next_step()
        if step % 5 == 4:
            hook.flush()
    assert hook.close().healthy
    whole, outline = tt.create_trial(tmp_path), tt.create_trial(tmp_path, records=False)
    assert whole.records and not outline.records
    for ask in (
        lambda t: t.steps(),
        lambda t: t.steps(mode=tt.modes.EVAL),
        lambda t: t.modes(),
        lambda t: t.tensor_names(),
        lambda t: t.tensor_names(collection="scalars"),
        lambda t: t.has_tensor("s1"),
        lambda t: t.mode_step(45),
        lambda t: [(s.index, s.first_step, s.last_step) for s in t.sessions()],
        lambda t: t.problems(),
        lambda t: t.series("s2")["value"].tolist(),
    ):
        assert ask(outline) == ask(whole)
    for refused in (
        lambda: outline.tensor("s0"),
        lambda: outline.step_block(3),
        lambda: outline.tensor_names(step=3),
    ):
        with pytest.raises(InvalidConfigError, match="records=False"):
            refused()
