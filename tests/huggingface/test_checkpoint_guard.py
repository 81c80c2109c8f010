"""Checkpoints never poisoned in a real ``Trainer.train()`` (issue 46, item 2): a save whose
weights are NaN is refused, ``save_total_limit`` keeps the last good checkpoint, and a resume
passes over NaN or damaged checkpoints to the newest good one, with an event each."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

transformers: Any = pytest.importorskip("transformers")
import torch  # noqa: E402

import tensortap  # noqa: E402
import tensortap.pytorch as tt  # noqa: E402
from tensortap.huggingface import (  # noqa: E402
    CheckpointGuardCallback,
    HuggingFaceCheckpoints,
    last_good_checkpoint,
    verify_checkpoint,
)
from tests.conftest import helper_cmd  # noqa: E402
from tests.helpers.hf_checkpoint_guard_ranks import digests  # noqa: E402
from tests.helpers.hf_regression import BATCH, Regression, samples  # noqa: E402
from tests.helpers.ranks import run_ranks  # noqa: E402

SRC = str(Path(tensortap.__file__).parents[1])  # this tensortap, for the ranks
ROOT = Path(__file__).resolve().parents[2]


def trainer(
    out: Path,
    callbacks: list[Any],
    *,
    max_steps: int = 30,
    limit: int | None = 1,
    fault_at: int | None = 13,
) -> Any:
    args = transformers.TrainingArguments(
        str(out),
        max_steps=max_steps,
        per_device_train_batch_size=BATCH,
        learning_rate=0.05,
        lr_scheduler_type="constant",
        optim="sgd",
        save_strategy="steps",
        save_steps=5,
        save_total_limit=limit,
        report_to=[],
        use_cpu=True,
        disable_tqdm=True,
        max_grad_norm=0.0,
        seed=0,
    )
    return transformers.Trainer(
        Regression(fault_at), args, train_dataset=samples(), callbacks=callbacks
    )


def checkpoints(out: Path) -> list[str]:
    return sorted((p.name for p in out.glob("checkpoint-*")), key=lambda n: int(n.split("-")[1]))


@pytest.mark.parametrize("limit", [1, 2])
def test_a_nan_weight_save_is_refused_and_rotation_keeps_the_last_good_one(
    tmp_path: Path, limit: int
) -> None:
    callback = CheckpointGuardCallback()
    run = trainer(tmp_path / "out", [callback], limit=limit)
    run.train()  # step 13 makes the weights NaN: it is not stopped, nor crashed
    assert run.state.global_step == 30
    assert not all(torch.isfinite(p).all() for p in run.model.parameters())
    # saves at 5 and 10; those at 15, 20, 25, 30 refused: the rotation deleted nothing good
    assert checkpoints(tmp_path / "out") == ["checkpoint-5", "checkpoint-10"][-limit:]
    assert verify_checkpoint(tmp_path / "out" / "checkpoint-10") is None
    kinds = [(e.kind, e.step) for e in callback.guard.events]
    assert kinds == [
        ("refused", 15),
        ("pinned", 10),
        ("refused", 20),
        ("refused", 25),
        ("refused", 30),
    ]
    refused = callback.guard.events[0]
    assert "not finite" in refused.reason and "net." in refused.reason
    assert callback.guard.pinned == (10, str(tmp_path / "out" / "checkpoint-10"))


def test_a_resume_passes_over_nan_checkpoints_to_the_older_good_one(tmp_path: Path) -> None:
    out = tmp_path / "out"
    trainer(out, [], limit=None).train()  # unguarded: checkpoints 15 to 30 hold NaN weights
    assert checkpoints(out) == [f"checkpoint-{s}" for s in range(5, 31, 5)]
    assert "not finite" in (verify_checkpoint(out / "checkpoint-30") or "")
    guard = tt.CheckpointGuard()
    chosen = last_good_checkpoint(out, guard)
    assert chosen == str(out / "checkpoint-10")
    assert [(e.kind, e.step) for e in guard.events] == [("fallback", s) for s in (30, 25, 20, 15)]
    assert all("not finite" in e.reason for e in guard.events)
    # the user's resume from it trains on, with finite weights, to the end
    resumed = trainer(tmp_path / "again", [], max_steps=12, limit=None, fault_at=None)
    resumed.train(resume_from_checkpoint=chosen)
    assert resumed.state.global_step == 12
    assert all(torch.isfinite(p).all() for p in resumed.model.parameters())


def test_a_truncated_or_incomplete_checkpoint_is_passed_over(tmp_path: Path) -> None:
    out = tmp_path / "out"
    trainer(out, [], max_steps=10, limit=None).train()
    weights = out / "checkpoint-10" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    guard = tt.CheckpointGuard()
    assert last_good_checkpoint(out, guard) == str(out / "checkpoint-5")
    (event,) = guard.events
    assert event.kind == "fallback" and "cannot be read" in event.reason
    (out / "checkpoint-5" / "trainer_state.json").unlink()  # a save cut short
    assert last_good_checkpoint(out, guard) is None
    assert "incomplete" in guard.events[-1].reason


def test_the_rollback_falls_back_from_a_nan_checkpoint_with_an_event(tmp_path: Path) -> None:
    out = tmp_path / "out"
    trainer(out, [], max_steps=20, limit=None).train()  # 15 and 20 hold NaN weights
    rollback = tt.Rollback(HuggingFaceCheckpoints(out))
    rollback.request(19, [], "loss nan")
    assert rollback.restore() == 10
    kinds = [(e.kind, e.restored_step) for e in rollback.events]
    assert kinds == [("damaged", 15), ("rollback", 10)]
    assert "not finite" in rollback.events[0].reason


def test_a_save_while_the_guard_trips_is_refused_and_the_pin_released_once_it_clears(
    tmp_path: Path,
) -> None:
    """The guard undoes the NaN step (the weights stay finite), yet the saves while it is
    tripping are refused, and the first one after ``clear_after`` quiet steps is allowed."""
    model = Regression(fault_at=13)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    guard = tt.Guard(optimizer, model)  # the gradients' and the update's norms are judged
    callback = CheckpointGuardCallback(tt.CheckpointGuard(guard=guard, clear_after=3))
    args = transformers.TrainingArguments(
        str(tmp_path / "out"),
        max_steps=20,
        per_device_train_batch_size=BATCH,
        lr_scheduler_type="constant",
        save_strategy="steps",
        save_steps=5,
        save_total_limit=1,
        report_to=[],
        use_cpu=True,
        disable_tqdm=True,
        max_grad_norm=0.0,
        seed=0,
    )
    run = transformers.Trainer(
        model,
        args,
        train_dataset=samples(),
        callbacks=[callback],
        optimizers=(optimizer, None),
    )
    try:
        run.train()
    finally:
        guard.remove()
    assert [e.step for e in guard.events] == [12]  # the 13th step, counted from 0
    assert all(torch.isfinite(p).all() for p in model.parameters())
    assert [(e.kind, e.step) for e in callback.guard.events] == [
        ("refused", 15),
        ("pinned", 10),
        ("released", 10),
    ]
    assert "the guard is tripping (a trip at step 12" in callback.guard.events[0].reason
    assert checkpoints(tmp_path / "out") == ["checkpoint-20"]


def test_resume_point_sends_true_to_the_newest_good_one_and_names_it_for_a_path(
    tmp_path: Path,
) -> None:
    """What tensortap run does to train(resume_from_checkpoint=...): True becomes the newest
    good checkpoint; a path given by the script is kept, with an event naming the good one."""
    from tensortap.huggingface._checkpoint_guard import resume_point

    out = tmp_path / "out"
    trainer(out, [], limit=None, max_steps=20).train()  # 5, 10 finite; 15, 20 NaN
    guard = tt.CheckpointGuard()
    assert resume_point(str(out), True, guard) == str(out / "checkpoint-10")
    assert [(e.kind, e.step) for e in guard.events] == [
        ("fallback", 20),
        ("fallback", 15),
        ("resumed", 10),
    ]
    asked = str(out / "checkpoint-15")
    assert resume_point(str(out), asked, guard) == asked
    told = guard.events[-1]
    assert told.kind == "resumed" and told.checkpoint == str(out / "checkpoint-10")
    assert "resume_from_checkpoint=" in told.message and "not finite" in told.message
    assert resume_point(str(out), None, guard) is None
    nan_only = tmp_path / "nan_only"
    for name in ("checkpoint-15", "checkpoint-20"):
        shutil.copytree(out / name, nan_only / name)
    assert resume_point(str(nan_only), True, guard) is True  # as asked, with a warning
    assert guard.events[-1].kind == "resumed" and guard.events[-1].checkpoint is None
    assert "no checkpoint" in guard.events[-1].message
    assert resume_point(str(out / "checkpoint-10"), False, guard) is False


def saved_files(where: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(where.iterdir())}


def test_the_scripts_own_save_model_of_nan_weights_is_refused_and_the_earlier_save_kept(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """trainer.save_model() at the end of a run whose weights turned NaN at step 13: before,
    it wrote the NaN weights over the script's earlier (finite) save; now it is refused, the
    earlier save is left byte for byte, and the warning names the last good checkpoint."""
    callback = CheckpointGuardCallback()
    run = trainer(tmp_path / "out", [callback], limit=2)
    final = tmp_path / "final"
    run.save_model(str(final))  # step 0, finite: goes through
    before = saved_files(final)
    assert "model.safetensors" in before
    run.train()
    assert not all(torch.isfinite(p).all() for p in run.model.parameters())
    with caplog.at_level("WARNING", logger="tensortap"):
        assert run.save_model(str(final)) is None
    assert saved_files(final) == before
    assert verify_checkpoint(tmp_path / "out" / "checkpoint-10") is None
    refused = callback.guard.events[-1]
    assert (refused.kind, refused.step, refused.checkpoint) == ("refused", 30, None)
    assert "not finite" in refused.reason
    assert f"trainer.save_model({str(final)!r}) at step 30 was refused" in refused.message
    assert f"the file there is left as it was ({final})" in refused.message
    good = tmp_path / "out" / "checkpoint-10"
    assert f"the last good one is the checkpoint of step 10 ({good})" in refused.message
    assert refused.message in caplog.text
    # the Trainer's own checkpoints were decided once each, as before
    assert [e.step for e in callback.guard.events if e.kind == "refused"] == [15, 20, 25, 30, 30]


def test_a_finite_save_model_writes_the_same_bytes_as_without_the_guard(tmp_path: Path) -> None:
    """A healthy run's save_model goes through untouched, and is the last good checkpoint
    that a later refusal names (before: the guard never knew of it)."""
    guarded = trainer(tmp_path / "a", [CheckpointGuardCallback()], max_steps=10, fault_at=None)
    plain = trainer(tmp_path / "b", [], max_steps=10, fault_at=None)
    for run in (guarded, plain):
        run.train()
        run.save_model(str(run.args.output_dir) + "-final")
    on, off = saved_files(tmp_path / "a-final"), saved_files(tmp_path / "b-final")
    assert on.keys() == off.keys() and on["model.safetensors"] == off["model.safetensors"]
    (callback,) = [
        c for c in guarded.callback_handler.callbacks if isinstance(c, CheckpointGuardCallback)
    ]
    assert callback.guard.events == []
    assert callback.guard.last_good == (10, str(tmp_path / "a-final"))


class BrokenCheck(tt.CheckpointGuard):
    """A guard whose own check fails (as a bug in it, or a model it cannot read, would)."""

    def refusal(self, model: Any = None) -> str | None:
        raise RuntimeError("the check broke")


def test_a_check_that_fails_lets_save_model_through_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    callback = CheckpointGuardCallback(BrokenCheck())
    run = trainer(tmp_path / "out", [callback], max_steps=5, fault_at=None, limit=None)
    with caplog.at_level("WARNING", logger="tensortap"):
        run.train()  # the Trainer's own save at step 5 goes through unchecked
        run.save_model(str(tmp_path / "final"))
    assert (tmp_path / "final" / "model.safetensors").is_file()
    unchecked = "the checkpoint guard's check failed, the save goes on unchecked: RuntimeError"
    assert caplog.text.count(unchecked) == 2  # the Trainer's checkpoint-5, and save_model
    assert (tmp_path / "out" / "checkpoint-5" / "model.safetensors").is_file()


def weights_finite(file: Path) -> bool:
    from safetensors.torch import load_file

    return all(bool(torch.isfinite(t).all()) for t in load_file(str(file)).values())


@pytest.mark.parametrize(
    ("nan_rank", "install"),
    [(1, "guard_trainer"), (0, "callback")],
    ids=["nan-on-rank-1-guard_trainer", "nan-on-rank-0-callback"],
)
def test_two_ddp_ranks_refuse_a_save_alike_when_one_ranks_weights_are_nan(
    tmp_path: Path, helper_env: dict[str, str], nan_rank: int, install: str
) -> None:
    """Only rank ``nan_rank``'s weights are NaN at step 4, a save step. The Trainer writes
    the weights on rank 0 alone, but every rank runs ``_save_checkpoint`` (its ``store_flos``
    gathers from all ranks, and each rank writes its ``rng_state_<rank>.pth``): a rank that
    refused alone would hang the other (it did, with the ranks' agreement taken out). Both
    refuse step 4, leave ``checkpoint-2`` byte for byte, and save step 6 once the weight is
    put back."""
    out = tmp_path / "out"
    cmd = helper_cmd("hf_checkpoint_guard_ranks.py", out, nan_rank, install)
    done = run_ranks(cmd, 2, dict(helper_env, PYTHONPATH=SRC), timeout=240)
    assert [p.returncode for p in done] == [0, 0], [p.stderr[-3000:] for p in done]
    results = [json.loads(p.stdout.strip().splitlines()[-1]) for p in done]
    assert checkpoints(out) == ["checkpoint-2", "checkpoint-6"]
    assert results[0]["before"] == digests(out / "checkpoint-2")
    assert "rng_state_1.pth" in results[0]["before"]  # both ranks' files, all kept
    assert verify_checkpoint(out / "checkpoint-6") is None
    assert last_good_checkpoint(out) == str(out / "checkpoint-6")
    for rank, result in enumerate(results):
        assert result["rank"] == rank and result["finite"]
        kinds = [(kind, step) for kind, step, _ in result["events"]]
        assert kinds == [("refused", 4), ("pinned", 2), ("released", 2)]
        reason = result["events"][0][2]
        assert "not finite (net.0.weight)" in reason
        assert (f"on rank {nan_rank}" in reason) == (rank != nan_rank)
        assert "the checkpoint of step 4 was not saved" in done[rank].stderr  # the warning
    # The script's own save_model is not agreed under DDP: a script may call it on rank 0
    # alone, as it did first here (a gather there paired that call with rank 1's next one:
    # 'final-rank0' refused for rank 1's NaN, then a dead peer). Rank 0 writes the copy it
    # holds unless that copy is the NaN one; a rank judging a NaN copy records the refusal.
    assert (out / "final-rank0" / "model.safetensors").is_file()
    written = (out / "final" / "model.safetensors").is_file()
    assert written == (nan_rank != 0)
    if written:
        assert weights_finite(out / "final" / "model.safetensors")
    for rank, result in enumerate(results):
        refused = [(kind, step) for kind, step, _ in result["own"] if kind == "refused"]
        assert refused == ([("refused", 6)] if rank == nan_rank else [])
        if rank == nan_rank:
            assert result["own"][0][2].startswith(f"trainer.save_model({str(out / 'final')!r})")


def test_two_ddp_ranks_refuse_a_best_save_alike(tmp_path: Path, helper_env: dict[str, str]) -> None:
    """``save_strategy="best"``: the Trainer decides the save after evaluating, past the
    callbacks, on every rank. Rank 1's weight turns NaN after step 4's evaluation (a new best)
    and before its save: both ranks refuse it alike (a rank refusing alone would hang the
    other), put the Trainer's best back (step 2's), and save step 6, the next best."""
    out = tmp_path / "out"
    cmd = helper_cmd("hf_checkpoint_guard_ranks.py", out, 1, "guard_trainer", "best")
    done = run_ranks(cmd, 2, dict(helper_env, PYTHONPATH=SRC), timeout=240)
    assert [p.returncode for p in done] == [0, 0], [p.stderr[-3000:] for p in done]
    results = [json.loads(p.stdout.strip().splitlines()[-1]) for p in done]
    assert checkpoints(out) == ["checkpoint-2", "checkpoint-6"]
    assert results[0]["before"] == digests(out / "checkpoint-2")
    assert verify_checkpoint(out / "checkpoint-6") is None
    for rank, result in enumerate(results):
        kinds = [(kind, step) for kind, step, _ in result["events"]]
        assert kinds == [("refused", 4), ("pinned", 2), ("released", 2)]
        assert ("on rank 1" in result["events"][0][2]) == (rank == 0)
        assert result["best"] == [6, str(out / "checkpoint-6")]


def test_tensortap_run_over_torchrun_guards_every_rank_and_counts_a_save_once(
    tmp_path: Path,
) -> None:
    """``tensortap run -- torchrun script.py`` starts each rank through ``-m
    tensortap.attach`` (it ran the launcher as given, and the NaN rank's step was saved
    unguarded): both ranks are guarded with no code change and record into the job, and the
    summary counts the save of step 4, refused on both ranks, once."""
    from tensortap.jobs._live import checkpoint_lines
    from tests.jobs.test_framework_jobs import run_job

    torchrun = Path(sys.executable).parent / "torchrun"
    if not torchrun.exists():
        pytest.skip("torchrun is not installed beside this Python")
    out = tmp_path / "out"
    script = ROOT / "tests" / "helpers" / "hf_checkpoint_guard_ranks.py"
    launch = [str(torchrun), "--standalone", "--nproc_per_node", "2", str(script), str(out)]
    done, record = run_job(tmp_path, "--no-rules", "--", *launch, "1", "none")
    assert done.returncode == 0, done.stdout + done.stderr
    assert checkpoints(out) == ["checkpoint-2", "checkpoint-6"]
    refused = [e for e in record.iter_events() if e["event"] == "checkpoint_refused"]
    assert sorted((e["step"], e["rank"]) for e in refused) == [(4, 0), (4, 1), (6, 1)]
    (line,) = checkpoint_lines(record)
    assert "2 save(s) refused (step 4, 6)" in line and "not finite (net.0.weight)" in line
