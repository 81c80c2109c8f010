"""Trials written by SageMaker Debugger: a fixture that smdebug 1.0.34 wrote with its MXNet hook
(tests/golden/smdebug, made by make_fixture.py there, with the values smdebug's own reader
returned in expected.json) opens with create_trial and reads the same values through tensortap's
Trial API; `tensortap convert` writes it in tensortap's format; several workers, and damage."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import tensortap as tt
from tensortap.cli import main
from tensortap.exceptions import FormatError
from tensortap.format._crc32c import crc32c, masked_crc32c
from tensortap.smdebug._wire import NO_CHECKSUM
from tensortap.testing._fuzz import fuzz_smdebug, with_checksums
from tensortap.testing._smdebug_mutations import append_tensor, float_tensor, string_tensor

FIXTURE = Path(__file__).parents[1] / "golden" / "smdebug"
MODES = {"TRAIN": tt.modes.TRAIN, "EVAL": tt.modes.EVAL}


@pytest.fixture(autouse=True)
def _cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TENSORTAP_CACHE", str(tmp_path / "cache"))


def _check_against_smdebug(trial: tt.trials.Trial) -> None:
    expected = json.loads((FIXTURE / "expected.json").read_text())
    assert trial.steps() == expected["steps"]
    assert sorted(trial.tensor_names()) == sorted(expected["tensors"])
    for collection, names in expected["collections"].items():
        assert sorted(trial.tensor_names(collection=collection)) == names, collection
    checked = 0
    for name, entries in expected["tensors"].items():
        tensor = trial.tensor(name)
        for key, want in entries.items():
            mode, step, worker = key.split(":")
            where = dict(mode=MODES[mode], worker=worker)
            if "value" in want:
                np.testing.assert_array_equal(
                    tensor.value(int(step), **where), np.asarray(want["value"]), err_msg=key
                )
                checked += 1
            for red in ("min", "max", "mean", "l2"):
                if red == "l2" and "value" in want and np.ndim(want["value"]) == 2:
                    # smdebug's reader computed a matrix's l2 from its raw value with
                    # np.linalg.norm(ord=2): the spectral norm. Ours is the vector 2-norm, which
                    # is also what smdebug's hooks saved as "l2".
                    vector = float(np.linalg.norm(np.asarray(want["value"]).ravel()))
                    got = tensor.reduction_value(int(step), red, **where)
                    assert got == pytest.approx(vector, rel=1e-6), (name, key)
                    continue
                if red in want:  # float32 sums (smdebug's) against float64 ones (ours)
                    got = tensor.reduction_value(int(step), red, **where)
                    slack = 1e-6 * float(np.abs(want.get("value", 0.0)).max())
                    assert got == pytest.approx(want[red], rel=1e-6, abs=slack), (name, key, red)
                    checked += 1
            if "abs_max" in want:
                got = tensor.reduction_value(int(step), "max", abs=True, **where)
                assert got == pytest.approx(want["abs_max"], rel=1e-6), (name, key)
    assert checked > 40  # raw values and reductions, TRAIN and EVAL


def test_create_trial_reads_an_smdebug_trial_as_smdebug_does() -> None:
    _check_against_smdebug(tt.create_trial(FIXTURE / "trial"))
    loss = tt.create_trial(FIXTURE / "trial").tensor("softmaxcrossentropyloss0_output_0")
    assert loss.steps(mode=tt.modes.TRAIN) == [0, 2, 4] and loss.steps(mode=tt.modes.EVAL) == [0]


def test_tensortap_convert_writes_our_format(tmp_path: Path, capsys) -> None:
    out = tmp_path / "converted"
    assert main(["convert", str(FIXTURE / "trial"), str(out)]) == 0
    assert "converted 4 worker-steps" in capsys.readouterr().out
    assert (out / "tensortap.json").is_file()
    _check_against_smdebug(tt.create_trial(out))
    assert main(["convert", str(FIXTURE / "trial"), str(out)]) == 2  # not over a trial
    assert "not empty" in capsys.readouterr().err
    assert main(["convert", str(out), str(tmp_path / "again")]) == 2  # ours, not smdebug's
    assert "holds no smdebug trial" in capsys.readouterr().err


def _copy_with_second_worker(tmp_path: Path) -> Path:
    """The fixture, with every file of worker_0 copied as worker_1's."""
    trial = tmp_path / "trial"
    shutil.copytree(FIXTURE / "trial", trial)
    for path in list(trial.rglob("*worker_0*")):
        twin = path.with_name(path.name.replace("worker_0", "worker_1"))
        if path.suffix == ".json" and "index" in path.parts:
            index = json.loads(path.read_text())
            index["meta"]["event_file_name"] = index["meta"]["event_file_name"].replace(
                "worker_0", "worker_1"
            )
            twin.write_text(json.dumps(index))
        else:
            shutil.copy(path, twin)
    return trial


def test_several_workers(tmp_path: Path) -> None:
    trial = tt.create_trial(_copy_with_second_worker(tmp_path))
    assert trial.workers() == ["worker_0", "worker_1"]
    weight = trial.tensor("dense0_weight")
    np.testing.assert_array_equal(
        weight.value(2, worker="worker_0"), weight.value(2, worker="worker_1")
    )


def test_a_damaged_event_file_is_reported_not_guessed(tmp_path: Path) -> None:
    trial = tmp_path / "trial"
    shutil.copytree(FIXTURE / "trial", trial)
    events = next(trial.glob("events/000000000002/*.tfevents"))
    events.write_bytes(events.read_bytes()[:100])  # cut short
    with pytest.raises(FormatError, match="smdebug event file"):
        tt.create_trial(trial, strict=True)
    opened = tt.create_trial(trial)  # the rest is read, the damage listed
    assert opened.steps() == [0, 4, 5]
    assert any("events/000000000002/" in p for p in opened.problems()), opened.problems()


def _healthy(tmp_path: Path) -> Path:
    """The fixture with real data CRCs (smdebug writes a placeholder unless asked)."""
    trial = tmp_path / "trial"
    shutil.copytree(FIXTURE / "trial", trial)
    return with_checksums(trial)


def _record(trial: Path, step: int, name: str) -> tuple[Path, int, int]:
    """The event file, offset and length of ``name``'s record at ``step``."""
    index = json.loads(next(trial.glob(f"index/*/{step:012d}_worker_0.json")).read_text())
    entry = next(e for e in index["tensor_payload"] if e["tensorname"] == name)
    return trial / index["meta"]["event_file_name"], entry["start_idx"], entry["length"]


def test_event_file_crcs_are_checked(tmp_path: Path) -> None:
    trial = _healthy(tmp_path)
    healthy = tt.create_trial(trial).tensor("dense0_weight").value(2)
    events, start, length = _record(trial, 2, "dense0_weight")
    data = bytearray(events.read_bytes())
    content = data.index(healthy.astype("<f4").tobytes(), start, start + length)
    data[content + 3] ^= 0x40  # the sign or exponent of the first value
    events.write_bytes(bytes(data))
    opened = tt.create_trial(trial)
    assert opened.tensor("dense0_weight").steps() == [0, 5]  # step 2 left out, not wrong
    assert healthy.size > 0
    assert any("data CRC" in p and str(events.relative_to(trial)) in p for p in opened.problems())
    with pytest.raises(FormatError, match="does not match its data CRC"):
        tt.create_trial(trial, strict=True)
    # a length field changed: its CRC catches it even where smdebug wrote no data CRC
    plain = tmp_path / "plain"
    shutil.copytree(FIXTURE / "trial", plain)
    events, start, length = _record(plain, 4, "softmaxcrossentropyloss0_output_0")
    data = bytearray(events.read_bytes())
    data[start] ^= 0x01
    events.write_bytes(bytes(data))
    with pytest.raises(FormatError, match="length .* does not match its CRC"):
        tt.create_trial(plain, strict=True)


def test_masked_crc32c_is_tfrecords() -> None:
    assert crc32c(b"123456789") == 0xE3069283  # the CRC-32C check value
    assert masked_crc32c(b"0x12345678") == NO_CHECKSUM == 103661747  # smdebug's placeholder


def test_collection_regexes_are_matched_with_re2(tmp_path: Path) -> None:
    trial = tmp_path / "trial"
    shutil.copytree(FIXTURE / "trial", trial)
    path = next(trial.glob("collections/*/*.json"))
    doc = json.loads(path.read_text())
    doc["collections"]["weights"]["include_regex"] = [r"(\w|\w)*!"]  # 2**33 paths in `re`
    doc["collections"]["biases"]["include_regex"] = [r"(a)\1"]  # not linear: listed names used
    path.write_text(json.dumps(doc))
    # in a subprocess: Python's `re` holds the GIL, so a thread could not be timed out
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run(
        [sys.executable, "-c", _COLLECTIONS, str(trial)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    weights, problems = json.loads(done.stdout)
    assert weights == ["dense0_weight", "dense1_weight"]
    assert any("linear time" in p for p in problems)


_COLLECTIONS = """
import json, sys
import tensortap as tt
trial = tt.create_trial(sys.argv[1])
print(json.dumps([trial.tensor_names(collection="weights"), trial.problems()]))
"""


@pytest.mark.parametrize(
    "craft",
    [
        lambda doc: [doc],  # not an object
        lambda doc: {**doc, "meta": ["TRAIN"]},
        lambda doc: {**doc, "tensor_payload": [{**doc["tensor_payload"][0], "length": 2**70}]},
        lambda doc: {**doc, "tensor_payload": [{**doc["tensor_payload"][0], "start_idx": 1e400}]},
        lambda doc: {**doc, "tensor_payload": [{**doc["tensor_payload"][0], "start_idx": -1}]},
        lambda doc: {**doc, "tensor_payload": "xyz"},
        lambda doc: {"meta": {**doc["meta"], "mode_step": "x"}},
        lambda doc: {
            "meta": {**doc["meta"], "event_file_name": "events/9/000000000002_w.tfevents"}
        },
        lambda doc: "[" * 100_000,
    ],
)
def test_a_crafted_index_is_a_listed_problem_not_an_untyped_error(
    tmp_path: Path, craft: Callable[[Any], Any]
) -> None:
    trial = tmp_path / "trial"
    shutil.copytree(FIXTURE / "trial", trial)
    path = next(trial.glob("index/*/000000000002_worker_0.json"))
    crafted = craft(json.loads(path.read_text()))
    path.write_text(crafted if isinstance(crafted, str) else json.dumps(crafted))
    opened = tt.create_trial(trial)
    assert 2 not in opened.steps()
    assert opened.steps() == [0, 4, 5]
    assert any("000000000002_worker_0.json" in p for p in opened.problems()), opened.problems()


def test_damaged_collections_and_missing_event_files_are_listed(tmp_path: Path) -> None:
    trial = tmp_path / "trial"
    shutil.copytree(FIXTURE / "trial", trial)
    path = next(trial.glob("collections/*/*.json"))
    path.write_text(json.dumps({"collections": {"weights": ["not", "an", "object"]}}))
    next(trial.glob("events/000000000004/*.tfevents")).unlink()
    opened = tt.create_trial(trial)
    assert opened.steps() == [0, 2, 5]
    problems = opened.problems()
    assert any(path.name in p for p in problems) and any("000000000004" in p for p in problems)


def test_the_cache_is_keyed_on_content_not_names(tmp_path: Path) -> None:
    trial = _healthy(tmp_path)
    before = tt.create_trial(trial).tensor("dense0_weight").value(2)
    # a re-run into the same place: same file names and sizes, other values
    events, start, length = _record(trial, 2, "dense0_weight")
    data = bytearray(events.read_bytes())
    content = data.index(before.astype("<f4").tobytes(), start, start + length)
    data[content + 3] ^= 0x40  # the sign or exponent of the first value
    events.write_bytes(bytes(data))
    with_checksums(trial)
    after = tt.create_trial(trial).tensor("dense0_weight").value(2)
    assert after.shape == before.shape and not np.array_equal(after, before)
    assert tt.create_trial(trial).problems() == []


_FULL_DISK = """
import resource, signal, sys
import tensortap as tt
from tensortap.exceptions import StorageError
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # writes past the limit fail with EFBIG
resource.setrlimit(resource.RLIMIT_FSIZE, (1500, 1500))
try:
    tt.create_trial(sys.argv[1])
except StorageError as exc:
    print("StorageError", exc)
    sys.exit(3)
sys.exit(0)
"""


def test_a_conversion_failing_part_way_is_never_cached(tmp_path: Path) -> None:
    trial = tmp_path / "trial"
    shutil.copytree(FIXTURE / "trial", trial)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run(
        [sys.executable, "-c", _FULL_DISK, str(trial)], env=env, capture_output=True, text=True
    )
    assert done.returncode == 3, (done.stdout, done.stderr)
    assert "could not be written in full" in done.stdout
    cache = Path(os.environ["TENSORTAP_CACHE"]) / "smdebug"
    assert not [p for p in cache.iterdir() if not p.name.startswith(".")]  # nothing finished
    _check_against_smdebug(tt.create_trial(trial))  # converted in full now


def test_the_cache_is_evicted_by_size_and_age(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first, second = tmp_path / "a", tmp_path / "b"
    shutil.copytree(FIXTURE / "trial", first)
    shutil.copytree(FIXTURE / "trial", second)
    cache = Path(os.environ["TENSORTAP_CACHE"]) / "smdebug"
    tt.create_trial(first)
    (old,) = list(cache.iterdir())
    monkeypatch.setenv("TENSORTAP_CACHE_MAX_BYTES", "1")  # only the copy in use is kept
    tt.create_trial(second)
    assert len(list(cache.iterdir())) == 1 and not old.exists()
    monkeypatch.delenv("TENSORTAP_CACHE_MAX_BYTES")
    (kept,) = list(cache.iterdir())
    os.utime(kept, (time.time() - 40 * 86400, time.time() - 40 * 86400))
    tt.create_trial(first)  # converted again (its copy was evicted); the 40-day-old one goes
    assert len(list(cache.iterdir())) == 1 and not kept.exists()


def test_a_read_only_cache_falls_back_to_a_temporary_copy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("the cache cannot be made here")
    monkeypatch.setenv("TENSORTAP_CACHE", str(blocker))
    _check_against_smdebug(tt.create_trial(FIXTURE / "trial"))


def test_an_smdebug_trial_on_s3_opens_and_the_bucket_is_left_alone(s3_bucket) -> None:
    pytest.importorskip("boto3")
    import boto3

    client = boto3.client("s3")
    for path in sorted((FIXTURE / "trial").rglob("*")):
        if path.is_file():
            key = f"smd/job/{path.relative_to(FIXTURE / 'trial').as_posix()}"
            client.put_object(Bucket=s3_bucket, Key=key, Body=path.read_bytes())
    before = sorted(o["Key"] for o in client.list_objects_v2(Bucket=s3_bucket)["Contents"])
    _check_against_smdebug(tt.create_trial(f"s3://{s3_bucket}/smd/job"))
    after = sorted(o["Key"] for o in client.list_objects_v2(Bucket=s3_bucket)["Contents"])
    assert after == before  # the copy lives in the local cache, not beside the trial


def test_fuzzed_smdebug_trials_never_hang_raise_untyped_or_read_wrong(tmp_path: Path) -> None:
    summary = fuzz_smdebug(_healthy(tmp_path), tmp_path / "work", cases=50, seed=3)
    assert summary.cases == 50
    assert not summary.failures, [(f.mutation, f.result, f.error) for f in summary.failures[:5]]
    assert len(summary.by_mutation) >= 8


_FLOATS = float_tensor([1.0, 2.0])


@pytest.mark.parametrize(
    ("tag", "proto", "wall", "reason"),
    [
        ("words", string_tensor(b"hello"), 1.0, "numeric tensors only"),
        ("late", _FLOATS, float("nan"), "wall time is nan"),
        ("early", _FLOATS, float("-inf"), "wall time is -inf"),
    ],
    ids=["DT_STRING", "nan-wall-time", "infinite-wall-time"],
)
def test_one_odd_record_drops_that_record_not_the_trial(
    tmp_path: Path, tag: str, proto: bytes, wall: float, reason: str
) -> None:
    """A DT_STRING tensor, or a record with a NaN wall time, in one step: that record is left
    out and listed; every other value of the trial (the same step's too) is read as before."""
    trial = tmp_path / "trial"
    shutil.copytree(FIXTURE / "trial", trial)
    append_tensor(trial, next(trial.glob("index/*/000000000002_worker_0.json")), tag, proto, wall)
    opened = tt.create_trial(trial)
    assert tag not in opened.tensor_names()
    assert any(reason in p and repr(tag) in p for p in opened.problems()), opened.problems()
    _check_against_smdebug(opened)
    with pytest.raises(FormatError, match=reason):
        tt.create_trial(trial, strict=True)


@pytest.mark.parametrize("mode_step", [2**63, -1, True])
def test_a_mode_step_out_of_range_drops_that_step_not_the_trial(tmp_path: Path, mode_step) -> None:
    trial = tmp_path / "trial"
    shutil.copytree(FIXTURE / "trial", trial)
    path = next(trial.glob("index/*/000000000002_worker_0.json"))
    index = json.loads(path.read_text())
    index["meta"]["mode_step"] = mode_step
    path.write_text(json.dumps(index))
    opened = tt.create_trial(trial)
    assert opened.steps() == [0, 4, 5]
    assert any("000000000002_worker_0.json" in p for p in opened.problems()), opened.problems()
    healthy = tt.create_trial(FIXTURE / "trial").tensor("dense0_weight")
    np.testing.assert_array_equal(opened.tensor("dense0_weight").value(5), healthy.value(5))


def test_a_step_number_over_64_bits_in_an_index_name_drops_that_file(tmp_path: Path) -> None:
    trial = tmp_path / "trial"
    shutil.copytree(FIXTURE / "trial", trial)
    path = next(trial.glob("index/*/000000000002_worker_0.json"))
    shutil.copy(path, path.with_name(f"{2**64}_worker_0.json"))
    opened = tt.create_trial(trial)
    assert opened.steps() == [0, 2, 4, 5]
    assert any("over 2**63" in p for p in opened.problems()), opened.problems()
