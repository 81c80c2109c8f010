"""Many steps of numbers published at once (``StepRecorder.publish_scalar_steps``): a reader
sees exactly what the same steps published one by one show, for one recorder pass and one
writer submission per call (docs/benchmarks.md, "Vital signs every step")."""

from __future__ import annotations

import json
import zlib
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from tensortap import Hook, SaveConfig
from tensortap.core import _recorder
from tensortap.core._modes import ModeKeys
from tensortap.core._recorder import due_at
from tensortap.core._records import F8_NAME, ScalarSteps, StepBatch
from tensortap.core._save_config import SaveConfigMode
from tensortap.format._checksum import crc32_of_words
from tensortap.format._index import decode_index
from tensortap.storage import MemoryStore
from tensortap.trials import create_trial
from tensortap.writer import TrialWriter, WriterOptions

_NAMES = ("vitals/loss", "vitals/grad_norm", "vitals/lr", "vitals/update_norm", "vitals/step_time")
_VITALS = ("vitals",)


def _steps_and_values(count: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """TRAIN step numbers (with a gap) and their values, some NaN (not saved), one step
    with none at all."""
    rng = np.random.default_rng(seed)
    steps = np.concatenate([np.arange(0, count // 2), np.arange(count // 2 + 7, count + 7)])
    values = rng.normal(size=(len(steps), len(_NAMES)))
    values[rng.random(values.shape) < 0.15] = np.nan
    values[3] = np.nan  # a step that keeps nothing: no step at all
    values[5, 0] = -0.0
    return steps, values


def _hook(out_dir: Path) -> Hook:
    # losses every 10th step: the steps where they are due go through the normal path
    return Hook(
        str(out_dir),
        save_config=SaveConfig(save_interval=10),
        include_collections=["vitals", "losses"],
        writer_options=WriterOptions(flush_secs=3600),
    )


def _one_by_one(hook: Hook, steps: np.ndarray, values: np.ndarray) -> None:
    """What the zero-code attachments did before: advance, save each value, next step."""
    for step, row in zip(steps.tolist(), values.tolist(), strict=True):
        recorder = hook._recorder
        while recorder.mode_step < step:
            recorder.next_step()
        if row[0] == row[0] and recorder.is_collection_due("losses"):
            hook.save_scalar("loss", row[0], "losses")
        hook.save_vitals({n: v for n, v in zip(_NAMES, row, strict=True) if v == v})
        hook.next_step()


def _at_once(hook: Hook, steps: np.ndarray, values: np.ndarray) -> list[int]:
    """The same through publish_scalar_steps for every run of steps where nothing but the
    vital signs is due; the sizes of the blocks handed on."""
    recorder = hook._recorder
    other = recorder.due_beyond("vitals", steps)
    blocks: list[int] = []
    start = 0
    for i in range(len(steps) + 1):
        if i < len(steps) and not other[i]:
            continue
        if i > start:
            columns = dict(zip(_NAMES, values[start:i].T, strict=True))
            blocks.append(
                recorder.publish_scalar_steps(
                    steps[start:i], columns, _VITALS, kept=~np.isnan(values[start:i])
                )
            )
        if i < len(steps):
            _one_by_one(hook, steps[i : i + 1], values[i : i + 1])
        start = i + 1
    return blocks


def _objects(out_dir: Path) -> dict[str, bytes]:
    """The trial's data, index, series and collections objects (index headers without their
    session and publication time)."""
    found = {}
    worker = out_dir / "workers" / "worker_0"
    for path in sorted(worker.rglob("*")):
        key = str(path.relative_to(worker))
        if not path.is_file() or key.split("/")[0] not in (
            "data",
            "index",
            "series",
            "collections",
        ):
            continue
        raw = path.read_bytes()
        if key.startswith("index"):
            index = decode_index(raw)
            header = {k: v for k, v in index.header.items() if k not in ("session", "published")}
            raw = json.dumps(header, sort_keys=True).encode() + index.records.tobytes()
        found[key] = raw
    assert len(found) >= 4
    return found


def test_many_steps_at_once_read_back_as_the_same_steps_one_by_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # every step's wall time the same, so that the objects can be compared byte for byte
    monkeypatch.setattr(_recorder, "time", SimpleNamespace(time=lambda: 1000.0))
    steps, values = _steps_and_values(300, seed=1)
    one, many = tmp_path / "one", tmp_path / "many"
    for out_dir, publish in ((one, _one_by_one), (many, _at_once)):
        hook = _hook(out_dir)
        hook.set_mode(ModeKeys.TRAIN)
        publish(hook, steps[:150], values[:150])
        hook.set_mode(ModeKeys.EVAL)  # another mode between, step by step
        hook.save_vitals({"loss": 1.5})
        hook.next_step()
        hook.set_mode(ModeKeys.TRAIN)
        publish(hook, steps[150:], values[150:])
        hook.save_vitals({"loss": 9.0})  # the step after the blocks, left open until close
        hook.close()
    assert _objects(one) == _objects(many)
    trials = [create_trial(str(one)), create_trial(str(many))]
    for mode in (None, ModeKeys.TRAIN, ModeKeys.EVAL):
        assert trials[0].steps(mode=mode) == trials[1].steps(mode=mode)
    assert trials[0].tensor_names() == trials[1].tensor_names()
    for name in (*_NAMES, "loss"):
        a, b = trials[0].tensor(name), trials[1].tensor(name)
        assert a.steps() == b.steps()
        for mode in (ModeKeys.TRAIN, ModeKeys.EVAL):
            assert a.steps(mode=mode) == b.steps(mode=mode)
        for step in a.steps():
            np.testing.assert_array_equal(a.value(step), b.value(step))
    columns = [t.series(list(_NAMES)) for t in trials]
    assert list(columns[0]) == list(columns[1])
    for key in columns[0]:
        if key != "wall_time":
            np.testing.assert_array_equal(columns[0][key], columns[1][key])
    saved = ~np.isnan(values[:, 1])
    loss = trials[1].tensor("vitals/grad_norm")
    assert loss.steps(mode=ModeKeys.TRAIN) == steps[saved].tolist()


def test_a_block_costs_one_submission_and_its_steps_follow_the_schedule(
    tmp_path: Path,
) -> None:
    steps, values = _steps_and_values(300, seed=2)
    hook = _hook(tmp_path / "t")
    submits: list[int] = []
    writer = hook._writer
    original = writer.submit_steps

    def counting(block: ScalarSteps) -> None:
        submits.append(len(block))
        original(block)

    writer.submit_steps = counting  # type: ignore[method-assign]
    hook.set_mode(ModeKeys.TRAIN)
    blocks = _at_once(hook, steps, values)
    hook.close()
    # losses are due every 10th TRAIN step: the steps between two of them are one block
    # (one submission), 30 of them over steps 0-306; a step that keeps nothing is left out
    due = steps % 10 == 0
    runs = int(np.count_nonzero(~due[1:] & due[:-1]))
    assert len(submits) == len(blocks) == runs == 30
    saving = ~due & ~np.isnan(values).all(axis=1)
    assert sum(blocks) == sum(submits) == int(saving.sum())
    assert writer.status.steps_submitted == writer.status.steps_written


def test_a_plan_other_than_a_raw_number_every_step_is_taken_step_by_step(
    tmp_path: Path,
) -> None:
    """Names whose collection is not saved every step: nothing is handed on as a block, and
    the steps the schedule skips save nothing."""
    hook = Hook(
        str(tmp_path / "t"),
        save_config=SaveConfig(save_interval=3),
        include_collections=["scalars"],
        writer_options=WriterOptions(flush_secs=3600),
    )
    writer = hook._writer
    hook.set_mode(ModeKeys.TRAIN)
    column = np.arange(10, dtype=np.float64)
    done = hook._recorder.publish_scalar_steps(range(10), {"x": column}, ("scalars",))
    assert done == 4  # steps 0, 3, 6, 9
    assert writer.status.steps_submitted == 4
    hook.close()
    trial = create_trial(str(tmp_path / "t"))
    assert trial.tensor("x").steps() == [0, 3, 6, 9]
    assert [float(trial.tensor("x").value(s)) for s in (0, 9)] == [0.0, 9.0]


def test_a_block_is_written_in_one_call_and_a_reader_sees_all_of_it_or_none() -> None:
    store = MemoryStore()
    writer = TrialWriter(store, "worker_0", WriterOptions(flush_secs=3600))
    seen: list[StepBatch] = []
    writer.add_listener("test", seen.append)
    n = 128
    block = ScalarSteps(
        np.arange(n, dtype=np.int64),
        ModeKeys.TRAIN,
        np.arange(n, dtype=np.int64),
        1000.0,
        _NAMES,
        np.arange(n * 5, dtype=np.float64).reshape(n, 5),
    )
    try:
        writer.submit_steps(block)
        assert writer.flush(timeout=60)
        assert writer.status.steps_written == n
        assert len(seen) == n and [r.name for r in seen[7].records] == list(_NAMES)
        assert all(r.dtype == F8_NAME for r in seen[7].records)
    finally:
        writer.close()
    trial = create_trial(store)
    assert trial.steps() == list(range(n))
    assert float(trial.tensor("vitals/lr").value(100)) == 100 * 5 + 2


@pytest.mark.parametrize("count", [7, 1000])  # one call each, and the table's passes
def test_crc_of_many_words_is_zlibs(count: int) -> None:
    words = np.random.default_rng(count).normal(size=count)
    words[:7] = [0.0, -0.0, np.nan, np.inf, 1e-300, 3.5, -7.25]
    assert crc32_of_words(words).tolist() == [zlib.crc32(w.tobytes()) for w in words]


@pytest.mark.parametrize(
    "config",
    [
        SaveConfigMode(save_interval=1),
        SaveConfigMode(save_interval=7, start_step=5, end_step=40),
        SaveConfigMode(save_steps=[0, 3, 99]),
        SaveConfigMode(save_interval=10, save_steps=[4]),
    ],
)
def test_due_at_is_should_save_for_each_step(config: SaveConfigMode) -> None:
    steps = np.arange(120, dtype=np.int64)
    expected: list[Any] = [config.should_save(int(s)) for s in steps]
    assert due_at(config, steps).tolist() == expected


def test_a_current_step_that_saved_something_is_closed_first_then_the_rest_at_once(
    tmp_path: Path,
) -> None:
    hook = _hook(tmp_path / "t")
    handed: list[int] = []
    original = hook._writer.submit_steps

    def counting(block: ScalarSteps) -> None:
        handed.append(len(block))
        original(block)

    hook._writer.submit_steps = counting  # type: ignore[method-assign]
    hook.set_mode(ModeKeys.TRAIN)
    hook.save_vitals({"lr": 0.5})  # step 0 holds a value already
    steps = np.arange(0, 9)
    loss = np.arange(9, dtype=np.float64)
    done = hook._recorder.publish_scalar_steps(steps, {"vitals/loss": loss}, _VITALS)
    hook.close()
    assert done == 9 and handed == [8]
    trial = create_trial(str(tmp_path / "t"))
    assert trial.tensor("vitals/lr").steps() == [0]
    assert trial.tensor("vitals/loss").steps() == list(range(9))
    assert float(trial.tensor("vitals/loss").value(0)) == 0.0
