"""Completeness from the writer's own record: a worker's end marker names every index the
worker published, and a reader lists each one the trial no longer holds (deleted) instead of
losing its steps silently; an end marker from before that record is compared by its count."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

import tensortap as tt
from tensortap.exceptions import FormatError
from tensortap.writer import WriterOptions


def _write(out: Path, steps: int, flush_every: int = 1, worker: int = 0) -> None:
    """A worker that publishes a segment every ``flush_every`` steps."""
    with tt.Hook(
        out,
        save_config=tt.SaveConfig(save_interval=1),
        worker=worker,
        writer_options=WriterOptions(compact=False),  # each segment kept, as published
    ) as hook:
        for step in range(steps):
            hook.save_scalar("loss", 1.0 / (1 + step))
            hook.save_tensor("w", np.full(3, float(step)))
            hook.next_step()
            if step % flush_every == flush_every - 1:
                hook.flush()


def _indexes(out: Path, worker: str = "worker_0") -> list[Path]:
    return sorted((out / "workers" / worker / "index").glob("*.ttidx"))


def _end(out: Path, worker: str = "worker_0") -> Path:
    return out / "workers" / worker / "end.json"


def _seqs(paths: list[Path]) -> list[int]:
    return [int(p.name.split(".")[0]) for p in paths]


def test_the_end_marker_names_every_published_index_of_every_session(tmp_path: Path) -> None:
    _write(tmp_path, steps=4)
    _write(tmp_path, steps=3)  # a second session resumes the worker
    claimed = json.loads(_end(tmp_path).read_text())["published_segments"]
    runs = [seq for first, last in claimed for seq in range(first, last + 1)]
    assert runs == _seqs(_indexes(tmp_path)) and len(runs) == 7
    assert tt.create_trial(tmp_path).problems() == []
    # the claims are the worker's segment numbers, not paths: a copy reads clean
    shutil.copytree(tmp_path / "workers", tmp_path / "copy" / "workers")
    shutil.copy(tmp_path / "tensortap.json", tmp_path / "copy")
    assert tt.create_trial(tmp_path / "copy").problems() == []


def test_a_deleted_index_is_named_and_the_rest_is_read(tmp_path: Path) -> None:
    _write(tmp_path, steps=6)
    gone = _indexes(tmp_path)[2]
    gone.unlink()
    trial = tt.create_trial(tmp_path)
    key = gone.relative_to(tmp_path).as_posix()
    assert [p for p in trial.problems() if key in p and "end marker" in p], trial.problems()
    assert trial.tensor("loss").steps() == [0, 1, 3, 4, 5]
    assert trial.series("loss").rows == 5
    with pytest.raises(FormatError, match="end marker says this index was published"):
        tt.create_trial(tmp_path, strict=True)
    # a live worker (no end marker yet) is not judged: its missing index may be on its way
    _end(tmp_path).unlink()
    assert not any("published" in p for p in tt.create_trial(tmp_path).problems())


def test_many_missing_indexes_are_named_up_to_a_bound_and_counted(tmp_path: Path) -> None:
    _write(tmp_path, steps=12)
    for path in _indexes(tmp_path)[1:11]:
        path.unlink()
    problems = tt.create_trial(tmp_path).problems()
    assert len([p for p in problems if "this index was published" in p]) == 8
    assert any("2 more indexes" in p for p in problems), problems


def test_an_end_marker_from_before_the_record_is_compared_by_its_count(tmp_path: Path) -> None:
    _write(tmp_path, steps=5)
    doc = json.loads(_end(tmp_path).read_text())
    del doc["published_segments"]
    _end(tmp_path).write_text(json.dumps(doc))
    assert tt.create_trial(tmp_path).problems() == []
    _indexes(tmp_path)[0].unlink()
    problems = tt.create_trial(tmp_path).problems()
    assert any("1 of the 5 segments its last session" in p for p in problems), problems


@pytest.mark.parametrize(
    "claim",
    [[[0, 2**62]], [[3, 1]], [[0, 1], [1, 2]], [[-1, 0]], [[True, 1]], [["0", 1]], "x"],
    ids=["huge", "backwards", "overlapping", "negative", "bool", "string", "not-a-list"],
)
def test_a_hostile_claim_is_bounded_work_or_a_damaged_end_marker(tmp_path: Path, claim) -> None:
    _write(tmp_path, steps=3)
    doc = json.loads(_end(tmp_path).read_text())
    _end(tmp_path).write_text(json.dumps({**doc, "published_segments": claim}))
    trial = tt.create_trial(tmp_path)
    problems = trial.problems()
    if claim == [[0, 2**62]]:  # named up to the bound, the rest counted (never walked)
        assert len([p for p in problems if "this index was published" in p]) == 8
        assert any(f"{2**62 + 1 - 3 - 8} more indexes" in p for p in problems), problems
    else:
        assert any("end.json" in p and "published_segments" in p for p in problems), problems
    assert trial.tensor("loss").steps() == [0, 1, 2]


# -- the writer's record is runs of numbers; a flat list reads the same --


def test_the_writer_keeps_runs_not_every_number(tmp_path: Path) -> None:
    """A worker resumed after 40 segments starts from one run, not 40 numbers (a 10**6-step
    run kept every number for the whole run)."""
    from tensortap.storage import LocalStore
    from tensortap.writer._sessions import read_history

    _write(tmp_path, steps=40)
    seqs = _seqs(_indexes(tmp_path))
    published = read_history(LocalStore(str(tmp_path)), "worker_0").published
    assert published is not None and len(seqs) == 40 and len(published) <= 2
    assert [s for a, b in published for s in range(a, b + 1)] == seqs
    _write(tmp_path, steps=3)
    claimed = json.loads(_end(tmp_path).read_text())["published_segments"]
    assert [s for a, b in claimed for s in range(a, b + 1)] == _seqs(_indexes(tmp_path))
    assert len(claimed) <= 3


def test_runs_are_bounded_in_memory_and_the_marker_then_counts() -> None:
    from tensortap.format._documents import MAX_PUBLISHED_RANGES, SeqRuns

    runs = SeqRuns()
    for seq in range(10**6):
        runs.add(seq)
    assert runs.runs() == [[0, 10**6 - 1]]
    gaps = SeqRuns()
    for seq in range(0, 2 * MAX_PUBLISHED_RANGES + 2, 2):  # every other number: a run each
        gaps.add(seq)
    assert gaps.runs() is None and len(gaps) == 0  # past the bound: nothing more is kept
    assert SeqRuns([(5, 9), (0, 3), (4, 4), (20, 20)]).runs() == [[0, 9], [20, 20]]


@pytest.mark.parametrize("deleted", [[], [0], [3], [1, 2, 5], list(range(12))])
def test_a_flat_list_of_an_older_marker_gives_the_same_answers_as_runs(
    tmp_path: Path, deleted: list[int]
) -> None:
    answers = []
    for form in ("runs", "flat"):
        out = tmp_path / form
        _write(out, steps=12)
        if form == "flat":
            doc = json.loads(_end(out).read_text())
            runs = doc["published_segments"]
            doc["published_segments"] = [s for a, b in runs for s in range(a, b + 1)]
            _end(out).write_text(json.dumps(doc))
        paths = _indexes(out)
        for at in deleted:
            paths[at].unlink()
        answers.append([p.replace(str(out), "") for p in tt.create_trial(out).problems()])
    assert answers[0] == answers[1]
    assert bool(answers[0]) == bool(deleted)


@pytest.mark.parametrize("claim", [[3, 1], [0, 0], [0, [1, 2]], [2**63]])
def test_a_flat_list_out_of_order_or_mixed_is_a_damaged_end_marker(tmp_path: Path, claim) -> None:
    _write(tmp_path, steps=3)
    doc = json.loads(_end(tmp_path).read_text())
    _end(tmp_path).write_text(json.dumps({**doc, "published_segments": claim}))
    trial = tt.create_trial(tmp_path)
    assert any("end.json" in p and "published_segments" in p for p in trial.problems())
    assert trial.tensor("loss").steps() == [0, 1, 2]
