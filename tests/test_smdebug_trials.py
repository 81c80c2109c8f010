"""Trials written by SageMaker Debugger: a fixture that smdebug 1.0.34 wrote with its MXNet hook
(tests/golden/smdebug, made by make_fixture.py there, with the values smdebug's own reader
returned in expected.json) opens with create_trial and reads the same values through tensortap's
Trial API; `tensortap convert` writes it in tensortap's format; several workers, and damage."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

import tensortap as tt
from tensortap.cli import main
from tensortap.exceptions import FormatError

FIXTURE = Path(__file__).parent / "golden" / "smdebug"
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
        tt.create_trial(trial)


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
