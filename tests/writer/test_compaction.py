"""Compaction (issue 48, item 2): small segments merged into large ones lose and duplicate
nothing, whether the writer merges its own, a finished trial is compacted, a reader follows
the trial meanwhile, or the merging process is killed (SIGKILL) at any point; and the parts
whose data objects are large keep them (index version 3), the merge copying only the rest."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import tensortap as tt
from tensortap.exceptions import FormatError, InvalidConfigError, TensorUnavailableForStep
from tensortap.format import _layout as layout
from tensortap.format._index import INDEX_KEPT_DATA, INDEX_PACKED, decode_index
from tensortap.storage import LocalStore
from tensortap.writer import WriterOptions, _compaction
from tensortap.writer import _series as writer_series
from tensortap.writer._compaction import compact_trial, merge_segments

SRC = str(Path(tt.__file__).resolve().parents[1])


def write_run(
    out: Path | str,
    steps: int,
    flush_every: int,
    compact: bool,
    seed: int = 0,
    sessions: int = 1,
    flush_steps: set[int] | None = None,
) -> None:
    """Scalars, reductions of a small tensor and a raw tensor each step; a segment published
    every ``flush_every`` steps (as a paced job publishes one every ``flush_secs``), or after
    each of ``flush_steps``."""
    rng = np.random.default_rng(seed)
    per_session = -(-steps // sessions)
    done = 0
    for _ in range(sessions):
        hook = tt.Hook(
            out,
            save_config=tt.SaveConfig(save_interval=1),
            include_collections=["losses", "gradients", "scalars", "default"],
            writer_options=WriterOptions(compact=compact),
        )
        hook.get_collection("gradients").reduction_config = tt.ReductionConfig(norms=["l2"])
        for step in range(done, min(steps, done + per_session)):
            hook.save_scalar("lr", float(rng.random()))
            hook.save_tensor("loss", np.float32(rng.random()), collections="losses")
            hook.save_tensor("w_grad", rng.normal(size=(2, 3)), collections="gradients")
            hook.save_tensor("act", rng.normal(size=4).astype(np.float32))
            hook.next_step()
            if (
                (step in flush_steps)
                if flush_steps is not None
                else step % flush_every == flush_every - 1
            ):
                hook.flush()
        done = min(steps, done + per_session)
        hook.close()


def everything(path: Path | str, ids: bool = True) -> dict[str, Any]:
    """Every value a reader serves: each series row, each raw tensor at each step, the steps,
    the problems."""
    trial = tt.create_trial(path)
    cols = trial.series()
    rows = sorted(
        zip(
            cols["worker"].tolist(),
            cols["tensor"].tolist(),
            cols["statistic"].tolist(),
            [str(m) for m in cols["mode"].tolist()],
            cols["global_step"].tolist(),
            cols["value"].tolist(),
            strict=True,
        )
    )
    tensors = {}
    for name in trial.tensor_names():
        tensor = trial.tensor(name)
        for step in tensor.steps():
            try:
                tensors[(name, step)] = np.asarray(tensor.value(step)).tolist()
            except TensorUnavailableForStep:  # reductions only
                tensors[(name, step)] = tensor.reduction_value(step, "l2")
    out = {
        "sessions": [
            (s.index, s.id if ids else "", s.first_step, s.last_step)
            for s in trial.sessions("worker_0")
        ],
        "series": rows,
        "tensors": tensors,
        "steps": trial.steps(),
        "problems": trial.problems(),
    }
    trial.close()
    return out


def objects(path: Path, folder: str) -> list[Path]:
    where = path / "workers" / "worker_0" / folder
    return (
        sorted(p for p in where.iterdir() if not p.name.startswith(".")) if where.exists() else []
    )


@pytest.fixture
def small_rollups(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(writer_series, "ROLLUP_SEGMENTS", 8)


#: A segment of write_run holds about 32 bytes of values a step: with this, a merge keeps the
#: data of every part of 2 steps or more, and copies that of a part of one step.
KEEP_TWO_STEPS = 48


def kept_version(path: Path) -> list[int]:
    """The index version of each merged index of worker_0."""
    found = []
    for key in objects(path, "index"):
        index = decode_index(key.read_bytes())
        if index.parts:
            found.append(index.version)
    return found


@pytest.mark.usefixtures("small_rollups")
def test_a_merge_keeps_large_parts_data_and_copies_the_rest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Parts of one step copied, of two or more kept in their own data objects (a merged
    index of version 3); every value reads as before the merge, by a new reader and by one
    that read the parts before; the merged data object holds only the copied parts' bytes."""
    monkeypatch.setattr(_compaction, "KEEP_DATA_BYTES", KEEP_TWO_STEPS)
    flushes = {0, 2, 3, 6, 7, 8, 12, 13, 15}  # segments of 1, 2, 1, 3, 1, 1, 4, 1, 2 steps, ...
    write_run(tmp_path, steps=20, flush_every=1, compact=False, flush_steps=flushes)
    want = everything(tmp_path)
    sizes = {int(p.stem): p.stat().st_size for p in objects(tmp_path, "data") if p.stat().st_size}
    kept = {seq for seq, size in sizes.items() if size >= KEEP_TWO_STEPS}
    copied = set(sizes) - kept
    assert kept and copied
    reader = tt.create_trial(tmp_path)
    before = {step: reader.tensor("act").value(step).tolist() for step in (0, 1, 19)}
    (merge,) = compact_trial(LocalStore(tmp_path))
    assert kept_version(tmp_path) == [INDEX_KEPT_DATA]
    data = {int(p.stem): p for p in objects(tmp_path, "data")}
    assert set(data) == kept | {merge.seq}  # the copied parts' objects deleted, the kept not
    assert merge.data_bytes == sum(-(-sizes[s] // 8) * 8 for s in copied)
    assert len(objects(tmp_path, "index")) == 1
    reader.refresh()
    assert {step: reader.tensor("act").value(step).tolist() for step in before} == before
    assert everything(tmp_path) == want
    # compacted again: nothing to do, nothing lost
    assert compact_trial(LocalStore(tmp_path)) == []
    assert everything(tmp_path) == want


@pytest.mark.usefixtures("small_rollups")
def test_the_writer_keeps_large_segments_data_objects(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_compaction, "KEEP_DATA_BYTES", KEEP_TWO_STEPS)
    write_run(tmp_path / "kept", steps=60, flush_every=2, compact=False)
    write_run(tmp_path / "merged", steps=60, flush_every=2, compact=True)
    merged = tmp_path / "merged"
    assert len(objects(merged, "index")) == 4
    assert kept_version(merged) == [INDEX_KEPT_DATA] * 4
    # each segment's own data object, and the 4 merged ones (empty: nothing was copied)
    assert len(objects(merged, "data")) == 30 + 4
    assert everything(merged, ids=False) == everything(tmp_path / "kept", ids=False)


@pytest.mark.usefixtures("small_rollups")
def test_a_merge_that_copies_everything_writes_index_version_2(tmp_path: Path) -> None:
    """What an older reader of version 2 reads is still written where no part is kept."""
    write_run(tmp_path, steps=10, flush_every=1, compact=False)
    compact_trial(LocalStore(tmp_path))
    assert kept_version(tmp_path) == [INDEX_PACKED]


def test_a_corrupt_number_in_a_kept_part_stops_the_merge(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The merged series reads a kept part's numbers from its own data object, checked
    against their CRCs: a flipped byte there is not copied into a series unnoticed (nothing is
    merged)."""
    monkeypatch.setattr(_compaction, "KEEP_DATA_BYTES", 1)
    write_run(tmp_path, steps=4, flush_every=1, compact=False)
    store = LocalStore(tmp_path)
    seqs = [int(p.stem) for p in objects(tmp_path, "index")]
    index = decode_index(store.get(layout.index_key("worker_0", seqs[1])))
    (row,) = [r for r in index.records if index.names[r["name"]] == "lr" and r["data_length"] == 8]
    target = tmp_path / layout.data_key("worker_0", seqs[1])
    raw = bytearray(target.read_bytes())
    raw[int(row["data_offset"])] ^= 0x40
    target.write_bytes(bytes(raw))
    with pytest.raises(FormatError, match="checksum"):
        merge_segments(store, "worker_0", seqs, 99)
    assert not (tmp_path / layout.index_key("worker_0", 99)).exists()
    assert len(objects(tmp_path, "index")) == 4


def test_a_kept_parts_numbers_are_read_in_spans_not_one_range_each(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The merged series reads the numbers of a kept part from its data object in spans (one
    range for numbers close together), not one range a number: a merge at close of a long
    vital-signs run read 9,600 ranges (about 0.3 s of a 1 s fit locally; on S3 each range is a
    request). The merged trial holds the same values."""
    monkeypatch.setattr(_compaction, "KEEP_DATA_BYTES", 1)
    write_run(tmp_path / "a", steps=40, flush_every=10, compact=False)
    write_run(tmp_path / "b", steps=40, flush_every=10, compact=False)
    store = LocalStore(tmp_path / "a")
    asked: list[int] = []
    reading = store.get_ranges

    def counted(ranges: Any) -> Any:
        asked.append(len(ranges))
        return reading(ranges)

    monkeypatch.setattr(store, "get_ranges", counted)
    seqs = [int(p.stem) for p in objects(tmp_path / "a", "index")]
    merge = merge_segments(store, "worker_0", seqs, 99)
    assert len(seqs) == 4 and merge.steps == 40
    assert asked == [4]  # one span for each kept part (was 80: one for each number)
    merged, plain = tt.create_trial(tmp_path / "a"), tt.create_trial(tmp_path / "b")
    got, want = merged.series(), plain.series()  # the merged series, against the unmerged
    assert len(got["value"]) == len(want["value"]) == 120  # lr, loss, the l2 of w_grad
    for column in ("tensor", "statistic", "step", "value"):
        np.testing.assert_array_equal(got[column], want[column])


def test_the_spans_cover_every_number_once_and_stay_bounded() -> None:
    """Each number lies in exactly one span, at the offset the span says; numbers under the gap
    apart share a span, but no span is longer than its bound: an index packing numbers 60 KiB
    apart over 5 MiB (each gap under 64 KiB) is read in spans of at most 1 MiB, not as one
    5 MiB range. Checked on random layouts, the index's order shuffled."""
    from tensortap.writer._compaction import READ_SPAN_BYTES, _spans

    starts = np.arange(0, 5 << 20, 60 << 10, dtype=np.int64)
    spans = _spans(starts, starts + 8)
    assert len(spans) == 5 and max(end - start for start, end, _, _ in spans) <= READ_SPAN_BYTES
    assert sorted(i for _, _, members, _ in spans for i in members.tolist()) == list(
        range(len(starts))
    )
    rng = np.random.default_rng(0)
    for _ in range(500):
        n = int(rng.integers(1, 60))
        starts = rng.integers(0, 5_000_000, n).astype(np.int64)
        ends = starts + rng.integers(1, 17, n)
        gap, most = int(rng.integers(0, 100_000)), int(rng.integers(16, 2_000_000))
        seen = np.zeros(n, int)
        for start, end, members, within in _spans(starts, ends, gap, most):
            seen[members] += 1
            assert (starts[members] - start == within).all() and (ends[members] <= end).all()
            assert end - start <= most or len(members) == 1
        assert (seen == 1).all()
    # two numbers under the gap apart: one span
    assert len(_spans(np.array([0, 1000]), np.array([8, 1008]))) == 1


@pytest.mark.usefixtures("small_rollups")
def test_the_writer_merges_its_small_segments(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_run(tmp_path / "kept", steps=60, flush_every=2, compact=False)
    read_back: list[int] = []
    reading = _compaction._read_index

    def counted(store: LocalStore, worker: str, seq: int) -> Any:
        read_back.append(seq)
        return reading(store, worker, seq)

    monkeypatch.setattr(_compaction, "_read_index", counted)
    write_run(tmp_path / "merged", steps=60, flush_every=2, compact=True)
    assert read_back == []  # the writer merges its segments from the indexes it built
    kept, merged = tmp_path / "kept", tmp_path / "merged"
    assert len(objects(kept, "index")) == 30
    # 30 segments: 3 merges of 8, then the last 6 merged at close
    assert len(objects(merged, "index")) == 4
    assert len(objects(merged, "data")) == 4
    assert objects(merged, "series") == []
    want = everything(kept, ids=False)
    assert want["problems"] == [] and len(want["series"]) == 60 * 3
    assert everything(merged, ids=False) == want
    status = tt.create_trial(merged).worker_status("worker_0")
    assert status is not None


@pytest.mark.usefixtures("small_rollups")
def test_a_finished_trial_is_compacted_and_reads_the_same(tmp_path: Path) -> None:
    write_run(tmp_path, steps=40, flush_every=1, compact=False, sessions=2)
    want = everything(tmp_path)
    merges = compact_trial(LocalStore(tmp_path))
    # both sessions' segments in one merge: each part keeps its session
    assert [len(m.replaced) for m in merges] == [40]
    assert len(objects(tmp_path, "index")) == 1
    assert objects(tmp_path, "series") == []
    got = everything(tmp_path)
    assert got == want
    # a writer that resumes after compaction counts after the merged segments
    write_run(tmp_path, steps=4, flush_every=1, compact=False)
    assert len(tt.create_trial(tmp_path).steps()) == 44
    assert tt.create_trial(tmp_path).problems() == []


@pytest.mark.usefixtures("small_rollups")
def test_a_reader_open_during_the_merge_keeps_reading(tmp_path: Path) -> None:
    write_run(tmp_path, steps=30, flush_every=1, compact=False)
    want = everything(tmp_path)
    trial = tt.create_trial(tmp_path)
    first = trial.tensor("act").value(3).tolist()
    trial.series()
    compact_trial(LocalStore(tmp_path))
    assert objects(tmp_path, "data") == [tmp_path / "workers/worker_0/data/000000000031.ttdat"]
    # the data it read from is gone: its values come from the merged segment now
    trial.refresh()
    assert trial.tensor("act").value(3).tolist() == first
    assert trial.tensor("act").value(29).tolist() == want["tensors"][("act", 29)]
    cols = trial.series()
    assert len(cols["value"]) == len(want["series"])
    assert trial.problems() == []


def test_a_writer_holding_the_worker_is_left_alone(tmp_path: Path) -> None:
    hook = tt.Hook(tmp_path, save_config=tt.SaveConfig(save_interval=1))
    for _ in range(3):
        hook.save_scalar("lr", 0.1)
        hook.next_step()
        hook.flush()
    assert compact_trial(LocalStore(tmp_path)) == []
    hook.close()


_KILLER = textwrap.dedent(
    """
    import os, signal, sys
    sys.path.insert(0, {src!r})
    from tensortap.storage import LocalStore
    from tensortap.writer import _compaction
    from tensortap.writer._compaction import compact_trial

    _compaction.KEEP_DATA_BYTES = int(sys.argv[3])

    class Dying(LocalStore):
        left = int(sys.argv[2])

        def _step(self):
            Dying.left -= 1
            if Dying.left < 0:
                os.kill(os.getpid(), signal.SIGKILL)

        def put(self, key, data):
            self._step()
            super().put(key, data)
            self._step()

        def delete(self, key):
            self._step()
            super().delete(key)

    compact_trial(Dying(sys.argv[1]))
    print("done")
    """
)


def compact_killed(path: Path, after: int, keep_bytes: int = 1 << 62) -> bool:
    """Compact ``path`` in a real process that SIGKILLs itself at its ``after``-th write or
    delete (a part of ``keep_bytes`` or more keeps its data object); True if it finished
    first."""
    script = path.parent / "killer.py"
    script.write_text(_KILLER.format(src=SRC))
    done = subprocess.run(
        [sys.executable, str(script), str(path), str(after), str(keep_bytes)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if done.returncode == -signal.SIGKILL:
        return False
    assert done.returncode == 0, done.stderr
    return True


@pytest.mark.parametrize("keep", [False, True], ids=["copied", "kept"])
def test_a_merge_killed_at_any_point_loses_and_duplicates_nothing(
    tmp_path: Path, keep: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = tmp_path / "source"
    flushes = set(range(12)) if not keep else {0, 1, 3, 5, 6, 9, 10, 11}  # kept: 2+ steps
    write_run(source, steps=12, flush_every=1, compact=False, seed=3, flush_steps=flushes)
    want = everything(source)
    keep_bytes = KEEP_TWO_STEPS if keep else 1 << 62
    monkeypatch.setattr(_compaction, "KEEP_DATA_BYTES", keep_bytes)  # the later passes'
    after = 0
    while True:
        trial = tmp_path / f"killed_{after}"
        subprocess.run(["cp", "-r", str(source), str(trial)], check=True)
        finished = compact_killed(trial, after, keep_bytes)
        assert everything(trial) == want, f"killed after {after} writes and deletes"
        # compacted again (what a later pass does): still the same
        compact_trial(LocalStore(trial))
        assert everything(trial) == want, f"compacted again after a kill at {after}"
        if finished:
            break
        after += 1
    segments = len(flushes)
    kept = 3 if keep else 0  # the segments of 2+ steps
    # 3 puts (two steps each) then the deletions of the segments' 3 objects, less kept data
    assert after >= 6 + 3 * segments - kept
    if keep:
        assert kept_version(trial) == [INDEX_KEPT_DATA]


@pytest.mark.parametrize("seed", range(6))
def test_fuzz_random_runs_random_kills(tmp_path: Path, seed: int) -> None:
    """Random runs (steps, segment sizes, sessions), killed at a random point of their
    compaction, then read: every value equal to the run's before it."""
    rng = np.random.default_rng(100 + seed)
    source = tmp_path / "source"
    write_run(
        source,
        steps=int(rng.integers(3, 30)),
        flush_every=int(rng.integers(1, 4)),
        compact=False,
        seed=seed,
        sessions=int(rng.integers(1, 3)),
    )
    want = everything(source)
    segments = len(objects(source, "index"))
    keep_bytes = int(rng.choice([1 << 62, KEEP_TWO_STEPS, 1]))  # copied, mixed or kept
    for _ in range(3):
        after = int(rng.integers(0, 6 + 3 * segments))
        trial = tmp_path / f"killed_{after}"
        if trial.exists():
            continue
        subprocess.run(["cp", "-r", str(source), str(trial)], check=True)
        compact_killed(trial, after, keep_bytes)
        assert everything(trial) == want, f"seed {seed}, killed after {after}"
        compact_trial(LocalStore(trial))
        assert everything(trial) == want


def test_merge_refuses_what_is_not_a_run(tmp_path: Path) -> None:
    write_run(tmp_path, steps=4, flush_every=1, compact=False)
    store = LocalStore(tmp_path)
    with pytest.raises(ValueError, match="increasing"):
        merge_segments(store, "worker_0", [1, 0], 9)
    with pytest.raises(ValueError, match="increasing"):
        merge_segments(store, "worker_0", [0, 1], 1)
    assert os.path.exists(tmp_path / layout.index_key("worker_0", 0))


@pytest.mark.usefixtures("small_rollups")
@pytest.mark.parametrize("keep", [False, True], ids=["copied", "kept"])
def test_compaction_on_s3(
    s3_bucket: str, tmp_path: Path, keep: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through the storage interface: the writer's merges and a finished trial's, on a real
    S3-compatible server (its lease keeps a merge and a writer apart, as on local disk), with
    the parts' data copied or kept."""
    pytest.importorskip("boto3")
    from tensortap.storage import open_store

    if keep:
        monkeypatch.setattr(_compaction, "KEEP_DATA_BYTES", 1)

    write_run(tmp_path / "kept", steps=20, flush_every=1, compact=False, seed=7)
    want = everything(tmp_path / "kept", ids=False)
    live = f"s3://{s3_bucket}/by-the-writer-{keep}"
    write_run(live, steps=20, flush_every=1, compact=True, seed=7)
    store = open_store(live)
    assert len([k for k in store.list("workers/worker_0/index/")]) == 3  # 8 + 8 + 4
    assert everything(live, ids=False) == want
    finished = f"s3://{s3_bucket}/finished-{keep}"
    write_run(finished, steps=20, flush_every=1, compact=False, seed=7)
    reader = tt.create_trial(finished)
    before = reader.tensor("act").value(2).tolist()
    merges = compact_trial(open_store(finished))
    assert [len(m.replaced) for m in merges] == [20]
    assert reader.tensor("act").value(2).tolist() == before
    # a value it had not read: its segment's object is gone, the merged one holds it
    assert reader.tensor("act").value(15).tolist() == want["tensors"][("act", 15)]
    assert everything(finished, ids=False) == want


def test_a_merged_segment_deleted_with_its_end_marker_is_a_problem(tmp_path: Path) -> None:
    """Its series without its index, while another worker ended: rows lost, and said so (a
    merge killed before its index, its parts still there, is not a problem)."""
    for worker in (0, 1):
        hook = tt.Hook(
            tmp_path,
            save_config=tt.SaveConfig(save_interval=1),
            worker=worker,
            writer_options=WriterOptions(compact=True),
        )
        for _ in range(4):
            hook.save_scalar("lr", 0.5)
            hook.next_step()
            hook.flush()
        hook.close()
    folder = tmp_path / "workers" / "worker_1"
    (merged,) = sorted((folder / "index").iterdir())
    merged.unlink()
    (folder / "end.json").unlink()
    trial = tt.create_trial(tmp_path)
    assert set(trial.series()["worker"].tolist()) == {"worker_0"}
    problems = trial.problems()
    assert any("worker_1/rollups/" in p and "without its index" in p for p in problems), problems


def test_the_compact_option_is_checked() -> None:
    assert WriterOptions.from_dict({"compact": "true"}).compact is True
    assert WriterOptions().compact is True  # on by default (see docs/format.md)
    with pytest.raises(InvalidConfigError, match="compact must be true or false"):
        WriterOptions.from_dict({"compact": "maybe"})
    with pytest.raises(InvalidConfigError, match="compact must be true or false"):
        WriterOptions(compact=1)  # type: ignore[arg-type]
