"""Checkpoints never poisoned with no code change (issue 46, item 2): unmodified Hugging Face
and Lightning scripts under ``tensortap run`` whose weights turn NaN mid-run end with their last
finite checkpoint on disk, not rotated away, and a ``checkpoint_refused`` event; a
``save_strategy="best"`` save of NaN weights is refused too; ``resume_from_checkpoint=True``
passes over a NaN checkpoint to the newest good one; a healthy run saves what it saved without
the guard (``--no-checkpoint-guard``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from tensortap.jobs._record import JobRecord
from tests.jobs.test_framework_jobs import run_job

HERE = Path(__file__).parent
HF_SCRIPT = str(HERE / "checkpoint_hf_script.py")
PL_SCRIPT = str(HERE / "checkpoint_lightning_script.py")


def _run(tmp_path: Path, *args: str) -> tuple[dict[str, Any], JobRecord]:
    """``tensortap run [OPTIONS] -- python SCRIPT ...`` (``--no-rules`` unless ``--rules``);
    what the script wrote to ``--log``, and the job."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    options, script = args[: args.index("--")], args[args.index("--") + 1 :]
    rules = () if "--rules" in options else ("--no-rules",)
    options = tuple(o for o in options if o != "--rules")
    done, record = run_job(tmp_path, *rules, *options, "--", "python", *script, "--log", "log.json")
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads((tmp_path / "log.json").read_text()), record


def _plain(tmp_path: Path, *script: str) -> dict[str, Any]:
    """``python SCRIPT ...`` alone, no tensortap anywhere; what it wrote to ``--log``."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        [sys.executable, *script, "--log", "log.json"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads((tmp_path / "log.json").read_text())


def _events(record: JobRecord, kind: str) -> list[dict[str, Any]]:
    return [e for e in record.iter_events() if e["event"] == f"checkpoint_{kind}"]


def test_a_hugging_face_run_whose_weights_turn_nan_keeps_its_last_finite_checkpoint(
    tmp_path: Path,
) -> None:
    """save_steps=5, save_total_limit=1, NaN weights from step 13: without the guard the run
    ended with checkpoint-30 alone, NaN."""
    pytest.importorskip("transformers")
    from tensortap.huggingface import verify_checkpoint

    log, record = _run(tmp_path, "--rules", "--", HF_SCRIPT, "--fault-at", "13")
    assert log["checkpoints"] == ["checkpoint-10"] and not log["finite"]
    assert verify_checkpoint(tmp_path / "out" / "checkpoint-10") is None
    refused = _events(record, "refused")
    assert [e["step"] for e in refused] == [15, 20, 25, 30]
    assert "not finite" in refused[0]["reason"]
    assert [e["step"] for e in _events(record, "pinned")] == [10]
    summary = subprocess.run(
        [sys.executable, "-m", "tensortap.cli", "summary", str(record.dir)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "checkpoints: 4 save(s) refused (step 15, 20, 25, 30)" in summary
    assert "kept: the checkpoint of step 10" in summary
    from tensortap.serve import _data as dashboard
    from tensortap.serve._catalog import Catalog

    (run,) = Catalog([str(tmp_path / "runs")]).runs()
    with run.lock:
        timeline = dashboard.detail(run)["timeline"]
    shown = [(e["event"], e["step"]) for e in timeline if e["event"].startswith("checkpoint_")]
    assert shown[:2] == [("checkpoint_refused", 15), ("checkpoint_pinned", 10)]


def test_a_best_save_of_nan_weights_is_refused_and_the_best_put_back(tmp_path: Path) -> None:
    """save_strategy="best" decides after the callbacks ran; NaN logits predict class 0, the
    evaluation set's one class, so the NaN model scores best: it was saved (checkpoint-15) and
    named the best before."""
    pytest.importorskip("transformers")
    from tensortap.huggingface import verify_checkpoint

    log, record = _run(tmp_path, "--", HF_SCRIPT, "--fault-at", "13", "--best")
    assert log["checkpoints"] and not log["finite"]
    for name in log["checkpoints"]:
        assert verify_checkpoint(tmp_path / "out" / name) is None, name
    assert [e["step"] for e in _events(record, "refused")] == [15]
    assert log["best"] is not None and (tmp_path / log["best"]).is_dir()
    assert int(log["best"].rsplit("-", 1)[1]) <= 10


def test_a_resume_passes_over_a_nan_checkpoint_to_the_newest_good_one(tmp_path: Path) -> None:
    """A run without the guard left checkpoint-15 NaN beside checkpoint-10; a resume with
    resume_from_checkpoint=True loaded checkpoint-15 and trained on NaN weights."""
    pytest.importorskip("transformers")
    common = ("--limit", "2")
    first = _plain(  # no guard: no tensortap at all
        tmp_path / "a",
        HF_SCRIPT,
        "--fault-at",
        "13",
        "--steps",
        "15",
        "--out",
        str(tmp_path / "out"),
        *common,
    )
    assert first["checkpoints"] == ["checkpoint-10", "checkpoint-15"] and not first["finite"]
    log, record = _run(
        tmp_path / "b",
        "--",
        HF_SCRIPT,
        "--resume",
        "--steps",
        "20",
        "--out",
        str(tmp_path / "out"),
        *common,
    )
    assert log["finite"]
    assert [e["step"] for e in _events(record, "fallback")] == [15]
    (resumed,) = _events(record, "resumed")
    assert resumed["step"] == 10 and resumed["checkpoint"].endswith("checkpoint-10")
    assert log["steps"] == list(range(1, 21))


def test_a_lightning_run_whose_weights_turn_nan_keeps_its_last_finite_checkpoint(
    tmp_path: Path,
) -> None:
    """ModelCheckpoint(every_n_train_steps=5, save_top_k=1), NaN weights from step 13:
    without the guard the run ended with step=30's file alone, NaN."""
    pytest.importorskip("lightning")
    from tensortap.lightning import verify_checkpoint

    log, record = _run(tmp_path, "--", PL_SCRIPT, "--fault-at", "13")
    assert log["checkpoints"] == ["ckpts/epoch=0-step=10.ckpt"] and not log["finite"]
    assert verify_checkpoint(tmp_path / log["checkpoints"][0]) is None
    assert [e["step"] for e in _events(record, "refused")] == [15, 20, 25, 30]
    assert [e["step"] for e in _events(record, "pinned")] == [10]


def test_a_pytorch_lightning_run_is_guarded_like_a_lightning_one(tmp_path: Path) -> None:
    """The same script with the older ``pytorch_lightning`` package: its ModelCheckpoint is
    that package's own class (before, it was not guarded and ended with step=30's file, NaN)."""
    pytest.importorskip("pytorch_lightning")
    from tensortap.lightning import verify_checkpoint

    log, record = _run(
        tmp_path, "--", PL_SCRIPT, "--fault-at", "13", "--package", "pytorch_lightning"
    )
    assert log["checkpoints"] == ["ckpts/epoch=0-step=10.ckpt"] and not log["finite"]
    assert verify_checkpoint(tmp_path / log["checkpoints"][0]) is None
    assert [e["step"] for e in _events(record, "refused")] == [15, 20, 25, 30]


def test_a_lightning_resume_from_last_takes_the_newest_good_file(tmp_path: Path) -> None:
    """A run without the guard left last.ckpt and step=15 NaN beside a good step=10;
    fit(ckpt_path="last") loaded last.ckpt and trained on NaN weights."""
    pytest.importorskip("lightning")
    first = _plain(  # no guard: no tensortap at all
        tmp_path,
        PL_SCRIPT,
        "--fault-at",
        "13",
        "--steps",
        "15",
        "--resume",
    )
    assert first["checkpoints"] == [
        "ckpts/epoch=0-step=10.ckpt",
        "ckpts/epoch=1-step=15.ckpt",
        "ckpts/last.ckpt",
    ]
    assert not first["finite"]
    log, record = _run(tmp_path, "--", PL_SCRIPT, "--steps", "20", "--resume")
    assert log["finite"]
    assert [e["step"] for e in _events(record, "fallback")] == [15]
    (resumed,) = _events(record, "resumed")
    assert resumed["step"] == 10 and resumed["checkpoint"].endswith("epoch=0-step=10.ckpt")


def _weights(path: Path) -> dict[str, torch.Tensor]:
    if path.suffix == ".ckpt":
        state: dict[str, torch.Tensor] = torch.load(path, weights_only=True)["state_dict"]
        return state
    from safetensors.torch import load_file

    return load_file(path / "model.safetensors")


@pytest.mark.parametrize(
    ("script", "extra"),
    [(HF_SCRIPT, ()), (PL_SCRIPT, ()), (PL_SCRIPT, ("--default",))],
    ids=["huggingface", "lightning", "lightning-default-checkpoint"],
)
def test_a_healthy_run_saves_the_same_checkpoints_as_without_the_guard(
    tmp_path: Path, script: str, extra: tuple[str, ...]
) -> None:
    """What the guarded job saved is what the script saves without tensortap at all (no job,
    no hook: a stricter baseline than ``--no-checkpoint-guard``, and one process fewer)."""
    pytest.importorskip("transformers" if script == HF_SCRIPT else "lightning")
    guarded, record = _run(tmp_path / "on", "--", script, *extra)
    plain = _plain(tmp_path / "off", script, *extra)
    assert guarded["checkpoints"] == plain["checkpoints"] and guarded["checkpoints"]
    assert not [e for e in record.iter_events() if e["event"].startswith("checkpoint_")]
    for name in guarded["checkpoints"]:
        where = "out" if script == HF_SCRIPT else "."
        on = _weights(tmp_path / "on" / where / name)
        off = _weights(tmp_path / "off" / where / name)
        assert on.keys() == off.keys()
        assert all(torch.equal(on[k], off[k]) for k in on), name
    if script == HF_SCRIPT:
        assert os.listdir(tmp_path / "on" / "out" / "checkpoint-30") == os.listdir(
            tmp_path / "off" / "out" / "checkpoint-30"
        )


def test_a_hugging_face_scripts_own_save_model_of_nan_weights_is_refused(tmp_path: Path) -> None:
    """The script's own trainer.save_model("final") before and after a run whose weights turn
    NaN at step 13: before, the second wrote NaN weights over the first."""
    pytest.importorskip("transformers")
    log, record = _run(tmp_path, "--", HF_SCRIPT, "--fault-at", "13", "--own-save", "final")
    before, after = log["own_saves"]
    assert before is not None and after == before  # the finite save of step 0, left whole
    assert log["checkpoints"] == ["checkpoint-10"] and not log["finite"]
    own = [e for e in _events(record, "refused") if "save_model" in e["message"]]
    assert [e["step"] for e in own] == [30]
    assert "trainer.save_model('final') at step 30 was refused" in own[0]["message"]
    assert "the last good one is the checkpoint of step 10" in own[0]["message"]


@pytest.mark.parametrize("package", ["lightning", "pytorch_lightning"])
def test_a_lightning_scripts_own_save_checkpoint_of_nan_weights_is_refused(
    tmp_path: Path, package: str
) -> None:
    """trainer.save_checkpoint("final.pt") from the script's callback every 5 steps and after
    fit(), NaN weights from step 13: before, the saves from step 15 on overwrote step 10's."""
    pytest.importorskip(package)
    log, record = _run(
        tmp_path,
        "--",
        PL_SCRIPT,
        "--fault-at",
        "13",
        "--own-save",
        "final.pt",
        "--package",
        package,
    )
    own = log["own_saves"]
    assert sorted(own) == ["10", "15", "20", "25", "30", "5", "end"]
    assert own["5"] != own["10"]
    assert {own[s] for s in ("15", "20", "25", "30", "end")} == {own["10"]}
    refused = [e for e in _events(record, "refused") if "save_checkpoint" in e["message"]]
    assert [e["step"] for e in refused] == [15, 20, 25, 30, 30]
    assert "trainer.save_checkpoint('final.pt') at step 15 was refused" in refused[0]["message"]


def test_saves_refused_at_one_step_are_counted_there_once(tmp_path: Path) -> None:
    """The trainer's save and the script's own save refused at one step: the summary says
    the step once, with how many saves it refused there (it said "step 13, 13")."""
    from tensortap.jobs._live import checkpoint_lines

    record = JobRecord(tmp_path / "job")
    record.create({"name": "job", "created": 1_700_000_000.0, "command": ["train.py"]})
    for step in (13, 13, 20):
        record.append_event("checkpoint_refused", step=step, reason="weights not finite")
    (line,) = checkpoint_lines(record)
    assert "3 save(s) refused (step 13 x2, 20): weights not finite" in line


def test_a_save_refused_on_every_rank_is_counted_once(tmp_path: Path) -> None:
    """Under DDP each rank records the save they refused together (with its rank): the
    summary counted it once per rank ("step 4 x2"). A save refused on one rank only (the
    script's own save_model under DDP) still counts, and two saves of one step on one rank
    twice."""
    from tensortap.jobs._live import checkpoint_lines

    record = JobRecord(tmp_path / "job")
    record.create({"name": "job", "created": 1_700_000_000.0, "command": ["torchrun"]})
    for step, rank in ((4, 0), (4, 1), (6, 1), (8, 0), (8, 0), (8, 1), (8, 1)):
        record.append_event("checkpoint_refused", step=step, rank=rank, reason="not finite")
    (line,) = checkpoint_lines(record)
    assert "4 save(s) refused (step 4, 6, 8 x2): not finite" in line
