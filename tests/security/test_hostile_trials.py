"""Reading a damaged or hostile trial: typed errors, skipped parts listed in problems(), no
hang, no read outside the trial, no allocation beyond the trial's real size; and the fuzz suite
that keeps it so (a larger run: ``python -m bench.fuzz``)."""

from __future__ import annotations

import json
import os
import shutil
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

import tensortap as tt
from tensortap.exceptions import FormatError, StorageError, TensortapError
from tensortap.storage import LocalStore
from tensortap.testing._fuzz import (
    MUTATIONS,
    build_healthy,
    build_merged,
    check_one,
    fuzz,
    read_everything,
    read_rows,
    rewrite_index_header,
    row_damage,
)
from tensortap.testing._mutations import negative_steps, rewrite_index_records


@pytest.fixture(scope="module")
def healthy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_healthy(tmp_path_factory.mktemp("healthy") / "trial")


@pytest.fixture
def trial_copy(healthy: Path, tmp_path: Path) -> Path:
    root = tmp_path / "trial"
    shutil.copytree(healthy, root)
    return root


def _index(root: Path, worker: str = "worker_0") -> Path:
    return sorted((root / "workers" / worker / "index").glob("*.ttidx"))[0]


def test_missing_data_segment_is_a_typed_error_naming_it(trial_copy: Path) -> None:
    (data,) = (trial_copy / "workers" / "worker_0" / "data").glob("*.ttdat")
    data.unlink()
    trial = tt.create_trial(trial_copy)
    with pytest.raises(
        FormatError, match=r"data object workers/worker_0/data/0+\.ttdat is missing"
    ):
        trial.tensor("fc.weight").value(0)
    assert any("is missing behind its index" in p for p in trial.problems())
    # the other worker's values are still there
    assert trial.tensor("fc.weight").value(0, worker="worker_1").shape == (4, 3)


def test_a_huge_claimed_length_is_refused_before_allocating(trial_copy: Path) -> None:
    # a CRC-valid index whose first raw record claims 1.5 GiB
    def claim(header, records):
        row = int(np.flatnonzero(records["kind"] == 0)[0])
        records["data_length"][row] = 3 << 29
        return header

    rewrite_index_records(_index(trial_copy), claim)
    tracemalloc.start()
    trial = tt.create_trial(trial_copy)
    read_everything(trial_copy)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 64 << 20
    assert any("claims bytes" in p for p in trial.problems())
    with pytest.raises(FormatError, match="claims bytes"):
        tt.create_trial(trial_copy, strict=True)


def test_the_store_checks_a_range_against_the_real_size(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    store.put("a/b", b"0123456789")
    tracemalloc.start()
    with pytest.raises(StorageError, match="has 10 bytes"):
        store.get_range("a/b", 4, 10**15)
    assert tracemalloc.get_traced_memory()[1] < 1 << 20
    tracemalloc.stop()
    assert store.get_range("a/b", 4, 3) == bytearray(b"456")


@pytest.mark.parametrize(
    "change",
    [
        lambda h: {**h, "names": 5},
        lambda h: {**h, "steps": [[0, 9, 0, 1.0]]},
        lambda h: {**h, "steps": "x"},
        lambda h: {**h, "dtypes": ["O"] * len(h["dtypes"])},
        lambda h: {**h, "hook_errors": "many"},
        lambda h: {**h, "dropped": [["a", 1, 2]]},
        lambda h: [h],
    ],
    ids=["names", "mode", "steps", "dtype", "hook_errors", "dropped", "not-an-object"],
)
def test_wrong_field_types_skip_the_part_with_a_problem(trial_copy: Path, change) -> None:
    rewrite_index_header(_index(trial_copy), change)
    trial = tt.create_trial(trial_copy)
    assert any("index workers/worker_0/index" in p for p in trial.problems())
    assert trial.tensor("fc.weight").value(0, worker="worker_1").shape == (4, 3)
    with pytest.raises(FormatError):
        tt.create_trial(trial_copy, strict=True)


@pytest.mark.parametrize("doc", ["worker.json", "end.json"])
def test_deep_nesting_and_wrong_types_in_json_are_problems(trial_copy: Path, doc: str) -> None:
    path = trial_copy / "workers" / "worker_0" / doc
    path.write_text("[" * 100_000 + "]" * 100_000)
    trial = tt.create_trial(trial_copy)
    assert any("nested too deeply" in p for p in trial.problems())
    assert trial.tensor("fc.weight").value(0).shape == (4, 3)
    good = json.loads((trial_copy / "workers" / "worker_1" / doc).read_text())
    key = "num_workers" if doc == "worker.json" else "status"
    path.write_text(json.dumps({**good, key: [1, 2]}))
    assert any(key in p for p in tt.create_trial(trial_copy).problems())


def test_a_flipped_version_bit_is_corruption_not_a_newer_format(trial_copy: Path) -> None:
    index = _index(trial_copy)
    raw = bytearray(index.read_bytes())
    raw[4] ^= 0x04
    index.write_bytes(bytes(raw))
    problems = tt.create_trial(trial_copy).problems()
    assert any("checksum" in p for p in problems)
    assert not any("upgrade" in p for p in problems)
    worker = trial_copy / "workers" / "worker_0" / "worker.json"
    worker.write_text(worker.read_text().replace('"format_version": 1', '"format_version": 3'))
    problems = tt.create_trial(trial_copy).problems()
    assert any("corrupt" in p and "worker info" in p for p in problems)


def test_an_index_copied_into_another_worker_is_not_trusted(trial_copy: Path) -> None:
    theirs = _index(trial_copy, "worker_1")
    shutil.copyfile(theirs, trial_copy / "workers" / "worker_0" / "index" / "000000000099.ttidx")
    trial = tt.create_trial(trial_copy)
    assert any("copied or moved here" in p for p in trial.problems())
    for step in trial.tensor("fc.weight").steps():
        a = trial.tensor("fc.weight").value(step, worker="worker_0")
        b = trial.tensor("fc.weight").value(step, worker="worker_1")
        assert not np.array_equal(a, b)


def test_symlinks_out_of_the_trial_are_not_followed(trial_copy: Path, tmp_path: Path) -> None:
    secret = tmp_path / "secret.bin"
    secret.write_bytes(b"S" * 4096)
    (data,) = (trial_copy / "workers" / "worker_0" / "data").glob("*.ttdat")
    data.unlink()
    os.symlink(secret, data)
    end = trial_copy / "workers" / "worker_1" / "end.json"
    end.unlink()
    os.symlink("/dev/zero", end)
    trial = tt.create_trial(trial_copy)
    with pytest.raises(TensortapError, match="symbolic link"):
        trial.tensor("fc.weight").value(0)
    assert any("symbolic link" in p for p in trial.problems())
    # a worker folder that is a symlink out of the trial is not listed at all
    os.symlink(tmp_path, trial_copy / "workers" / "worker_9")
    assert "worker_9" not in tt.create_trial(trial_copy).workers()


def test_a_fifo_does_not_hang_the_reader(trial_copy: Path) -> None:
    for path in [trial_copy / "tensortap.json", _index(trial_copy)]:
        path.unlink()
        os.mkfifo(path)
    # read in a thread joined with a deadline: a blocking open() would leave it "hang"
    assert check_one(trial_copy, "fifo", deadline=60, measure_memory=False).result == "ok"
    trial = tt.create_trial(trial_copy)
    assert any("not a regular file" in p for p in trial.problems()), trial.problems()


def test_a_catastrophic_regex_in_a_trial_cannot_hang_the_reader(trial_copy: Path) -> None:
    for snapshot in trial_copy.rglob("collections/*.json"):
        doc = json.loads(snapshot.read_text())
        for entry in doc["collections"]:
            entry["include_regex"] = ["(a+)+$"]
        snapshot.write_text(json.dumps(doc))
    # every collection is asked for its names (with Python's re that took minutes)
    assert check_one(trial_copy, "regex", deadline=60, measure_memory=False).result == "ok"
    trial = tt.create_trial(trial_copy)
    assert "a" * 30 + "!" not in trial.tensor_names(collection="weights")
    assert "fc.weight" in trial.tensor_names(collection="weights")  # listed by name


def test_an_unsupported_regex_falls_back_to_the_listed_names(trial_copy: Path) -> None:
    for snapshot in trial_copy.rglob("collections/*.json"):
        doc = json.loads(snapshot.read_text())
        for entry in doc["collections"]:
            entry["include_regex"] = [r"(fc)\1"]
        snapshot.write_text(json.dumps(doc))
    trial = tt.create_trial(trial_copy)
    assert trial.tensor_names(collection="norms") == ["norm/h"]
    assert any("linear time" in p for p in trial.problems())


def test_tensorboard_export_survives_a_lone_surrogate(tmp_path: Path) -> None:
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from tensortap.tensorboard import export_trial

    name = "bad\udcffname"
    with tt.Hook(tmp_path / "t", save_config=tt.SaveConfig(save_interval=1)) as hook:
        hook.save_scalar(name, 1.5)
        hook.next_step()
    assert tt.create_trial(tmp_path / "t").tensor_names() == [name]
    export_trial(tmp_path / "t", tmp_path / "tb")
    acc = EventAccumulator(str(tmp_path / "tb" / "global"))
    acc.Reload()
    assert acc.Tags()["scalars"] == ["bad\\udcffname"]


def test_fuzzed_trials_raise_only_typed_errors_and_never_hang(
    healthy: Path, tmp_path: Path
) -> None:
    """Nor lose or change a row silently: every case's series and steps are compared with the
    healthy trial's (a row missing or differing while problems() is empty is a failure)."""
    summary = fuzz(healthy, tmp_path, cases=150, seed=19, deadline=20.0)
    assert summary.cases == 150
    assert not summary.failures, [(f.mutation, f.result, f.error) for f in summary.failures[:5]]
    # every kind of damage was tried, and most trials stayed readable in part
    assert len(summary.by_mutation) == len(MUTATIONS) == 12
    assert summary.results["ok"] > summary.results["typed"]


def test_fuzzed_merged_trials_with_kept_data_raise_only_typed_errors(tmp_path: Path) -> None:
    """The same over a compacted trial whose merged indexes keep half of their parts' data
    objects (index version 3): damage to a merged index, a kept data object or the merged
    one is a typed error or a listed problem, never a row lost or changed silently."""
    from tensortap.format._index import INDEX_KEPT_DATA, decode_index

    merged = build_merged(tmp_path / "healthy")
    indexes = [decode_index(p.read_bytes()) for p in merged.rglob("*.ttidx")]
    assert [i.version for i in indexes] == [INDEX_KEPT_DATA] * 2
    kept = [p for i in indexes for p in i.parts if p.kept_data]
    assert 0 < len(kept) < sum(len(i.parts) for i in indexes)
    summary = fuzz(merged, tmp_path / "work", cases=80, seed=23, deadline=20.0)
    assert not summary.failures, [(f.mutation, f.result, f.error) for f in summary.failures[:5]]
    assert summary.results["ok"] > summary.results["typed"]


def test_the_fuzzer_checks_values_not_only_exceptions(healthy: Path) -> None:
    rows, problems = read_rows(healthy)
    assert not problems and len(rows) > 50
    a_row = next(key for key in rows if key[0] != "steps")
    assert row_damage(rows, {k: v for k, v in rows.items() if k != a_row})[0] == "lost"
    assert row_damage(rows, {**rows, a_row: (0.5,)})[0] == "wrong"
    assert row_damage(rows, {**rows, ("steps", "trial"): (-1.0,)})[0] == "wrong"
    assert row_damage(rows, dict(rows)) == ("", "")


def _only_index(root: Path, worker: str) -> Path:
    (index,) = (root / "workers" / worker / "index").glob("*.ttidx")
    return index


@pytest.mark.parametrize("how", ["deleted", "fifo", "symlink", "directory"])
def test_a_workers_only_index_lost_is_a_problem_not_a_silent_loss(
    trial_copy: Path, tmp_path: Path, how: str
) -> None:
    """The issue's probe: worker_1's only index deleted, made a FIFO, a symlink (to its own
    bytes outside the trial) or a directory: its rows are gone from trial.series, and
    problems() says which index and why; worker_0 reads as before."""
    healthy_rows, _ = read_rows(trial_copy)
    index = _only_index(trial_copy, "worker_1")
    outside = tmp_path / "outside.ttidx"
    shutil.copyfile(index, outside)
    index.unlink()
    if how == "fifo":
        os.mkfifo(index)
    elif how == "symlink":
        os.symlink(outside, index)
    elif how == "directory":
        index.mkdir()
    rows, problems = read_rows(trial_copy)
    key = index.relative_to(trial_copy).as_posix()
    reason = {
        "deleted": "end marker says",
        "fifo": "not a regular file",
        "symlink": "symbolic link",
        "directory": "end marker says",
    }[how]
    assert any(key in p and reason in p for p in problems), problems
    # lost (or, where its series object still holds them, kept), never changed
    assert row_damage(healthy_rows, rows)[0] in ("lost", "")
    assert {k: v for k, v in healthy_rows.items() if k[0] == "worker_0"} == {
        k: v for k, v in rows.items() if k[0] == "worker_0"
    }
    with pytest.raises(TensortapError):
        tt.create_trial(trial_copy, strict=True)


def test_a_worker_folder_replaced_by_a_symlink_is_a_problem(
    trial_copy: Path, tmp_path: Path
) -> None:
    shutil.rmtree(trial_copy / "workers" / "worker_1")
    os.symlink(tmp_path, trial_copy / "workers" / "worker_1")
    trial = tt.create_trial(trial_copy)
    assert trial.workers() == ["worker_0"]  # not followed
    assert any("2 workers were expected" in p for p in trial.problems()), trial.problems()
    assert any("workers/worker_1: a symbolic link" in p for p in trial.problems())
    # both folders replaced (a fuzz case): nothing is read, and problems() says why
    shutil.rmtree(trial_copy / "workers" / "worker_0")
    os.symlink("/etc/hostname", trial_copy / "workers" / "worker_0")
    trial = tt.create_trial(trial_copy)
    assert trial.workers() == []
    assert len([p for p in trial.problems() if "where a worker's folder belongs" in p]) == 2
    with pytest.raises(StorageError, match="worker's folder"):
        tt.create_trial(trial_copy, strict=True)


def test_an_index_numbering_steps_below_zero_is_a_problem(trial_copy: Path) -> None:
    import random

    negative_steps(trial_copy, random.Random(1))
    trial = tt.create_trial(trial_copy)
    assert any("negative step" in p or "is negative" in p for p in trial.problems())
    assert all(step >= 0 for step in trial.steps(show_incomplete_steps=True))


@pytest.mark.parametrize("data", ["deleted", "fifo"])
def test_series_lost_with_their_series_object_and_data_are_a_problem(
    trial_copy: Path, data: str
) -> None:
    """A fuzz case the value check found: worker_0's series object damaged (read from its index
    instead) and the data object the index reads one-element values from gone: trial.series
    loses those rows, and problems() (of the trial that read them) says so and why."""
    healthy_rows, _ = read_rows(trial_copy)
    worker = trial_copy / "workers" / "worker_0"
    (series,) = (worker / "series").glob("*.ttser")
    series.write_bytes(series.read_bytes()[:-8])
    (data_object,) = (worker / "data").glob("*.ttdat")
    data_object.unlink()
    if data == "fifo":
        os.mkfifo(data_object)
    rows, problems = read_rows(trial_copy)
    assert row_damage(healthy_rows, rows)[0] == "lost"
    assert any(series.name in p for p in problems), problems
    assert any(data_object.name in p for p in problems), problems


def test_a_workers_index_and_end_marker_both_deleted_is_a_problem(trial_copy: Path) -> None:
    """A fuzz case the value check found: worker_1's index and its end marker deleted, so it
    looks like a worker still writing; worker_0 has ended, and worker_1's series object without
    its index is listed (its rows are not read)."""
    healthy_rows, _ = read_rows(trial_copy)
    _only_index(trial_copy, "worker_1").unlink()
    (trial_copy / "workers" / "worker_1" / "end.json").unlink()
    rows, problems = read_rows(trial_copy)
    assert row_damage(healthy_rows, rows)[0] == "lost"
    assert any(
        ("worker_1/series/" in p or "worker_1/rollups/" in p)  # its own, or a merged segment's
        and "without its index" in p
        for p in problems
    ), problems
    # while no worker has ended, a segment being published is not called lost
    (trial_copy / "workers" / "worker_0" / "end.json").unlink()
    assert not any("without its index" in p for p in read_rows(trial_copy)[1])
