"""Checkpoints never poisoned in a real Lightning ``Trainer.fit()`` (issue 46, item 2): a save
whose weights are NaN is refused, ``ModelCheckpoint``'s ``save_top_k`` keeps the last good
file, and a resume passes over NaN or damaged files to the newest good one, with an event
each."""

from __future__ import annotations

import copy
import hashlib
import json
import pickle
from pathlib import Path
from typing import Any

import pytest

L: Any = pytest.importorskip("lightning.pytorch")
import torch  # noqa: E402
from lightning.pytorch.callbacks import ModelCheckpoint  # noqa: E402

import tensortap  # noqa: E402
import tensortap.pytorch as tt  # noqa: E402
from tensortap.lightning import (  # noqa: E402
    GuardedModelCheckpoint,
    LightningCheckpoints,
    last_good_checkpoint,
    verify_checkpoint,
)
from tests.conftest import helper_cmd  # noqa: E402
from tests.helpers.lightning_regression import (  # noqa: E402
    Regression,
    RegressionSteps,
    loader,
)
from tests.helpers.ranks import run_ranks  # noqa: E402

SRC = str(Path(tensortap.__file__).parents[1])  # this tensortap, for the ranks


def fit(
    tmp_path: Path, checkpoint: Any, *, max_steps: int = 30, fault_at: int | None = 13, **kw: Any
) -> Any:
    trainer = L.Trainer(
        max_steps=max_steps,
        default_root_dir=str(tmp_path),
        accelerator="cpu",
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[checkpoint],
    )
    trainer.fit(Regression(fault_at), train_dataloaders=loader(), **kw)
    return trainer


def files(where: Path) -> list[str]:
    return sorted(p.name for p in where.glob("*.ckpt"))


@pytest.mark.parametrize(
    "top_k",
    [{"save_top_k": 1}, {"save_top_k": 2, "monitor": "step", "mode": "max"}],
    ids=["save_top_k=1", "save_top_k=2-monitor=step"],
)
def test_a_nan_weight_save_is_refused_and_save_top_k_keeps_the_last_good_one(
    tmp_path: Path, top_k: dict[str, Any]
) -> None:
    where = tmp_path / "ckpts"
    checkpoint = GuardedModelCheckpoint(str(where), every_n_train_steps=5, **top_k)
    trainer = fit(tmp_path, checkpoint)  # step 13 makes the weights NaN: not stopped, no crash
    assert trainer.global_step == 30
    kept = ["epoch=0-step=10.ckpt", "epoch=0-step=5.ckpt"][: top_k["save_top_k"]]
    assert files(where) == kept
    assert verify_checkpoint(where / "epoch=0-step=10.ckpt") is None
    guard = checkpoint.checkpoint_guard
    assert [(e.kind, e.step) for e in guard.events] == [
        ("refused", 15),
        ("pinned", 10),
        ("refused", 20),
        ("refused", 25),
        ("refused", 30),
    ]
    assert "not finite" in guard.events[0].reason
    assert checkpoint.best_model_path == str(where / "epoch=0-step=10.ckpt")


def test_the_pinned_file_is_kept_from_the_rotation(tmp_path: Path) -> None:
    """A save that does happen while a checkpoint is pinned (the guard refused the one
    before) never deletes the pinned file."""
    guard = tt.CheckpointGuard()
    guard.saved(10, str(tmp_path / "ckpts" / "epoch=0-step=10.ckpt"))
    guard.judge(15, "the guard is tripping")
    assert guard.keeps(str(tmp_path / "ckpts" / "epoch=0-step=10.ckpt"))
    assert not guard.keeps(str(tmp_path / "ckpts" / "epoch=0-step=5.ckpt"))
    assert [e.kind for e in guard.events] == ["refused", "pinned", "kept"]
    assert guard.judge(20, None)
    assert guard.pinned is None and guard.events[-1].kind == "released"
    assert not guard.keeps(str(tmp_path / "ckpts" / "epoch=0-step=10.ckpt"))


def test_a_resume_passes_over_nan_files_to_the_older_good_one(tmp_path: Path) -> None:
    where = tmp_path / "ckpts"
    unguarded = ModelCheckpoint(str(where), every_n_train_steps=5, save_top_k=-1)
    fit(tmp_path, unguarded)  # steps 15 to 30 hold NaN weights
    assert len(files(where)) == 6
    guard = tt.CheckpointGuard()
    chosen = last_good_checkpoint(where, guard)
    assert chosen == str(where / "epoch=0-step=10.ckpt")
    assert [(e.kind, e.step) for e in guard.events] == [("fallback", s) for s in (30, 25, 20, 15)]
    resumed = fit(
        tmp_path / "again",
        ModelCheckpoint(str(tmp_path / "again")),
        max_steps=12,
        fault_at=None,
        ckpt_path=chosen,
    )
    assert resumed.global_step == 12
    assert all(torch.isfinite(p).all() for p in resumed.lightning_module.parameters())


def test_a_truncated_file_is_passed_over(tmp_path: Path) -> None:
    where = tmp_path / "ckpts"
    fit(tmp_path, ModelCheckpoint(str(where), every_n_train_steps=5, save_top_k=-1), max_steps=10)
    newest = where / "epoch=0-step=10.ckpt"
    newest.write_bytes(newest.read_bytes()[: newest.stat().st_size // 2])
    guard = tt.CheckpointGuard()
    assert last_good_checkpoint(where, guard) == str(where / "epoch=0-step=5.ckpt")
    (event,) = guard.events
    assert event.kind == "fallback" and "cannot be read" in event.reason


def test_the_rollback_falls_back_from_a_nan_file_with_an_event(tmp_path: Path) -> None:
    where = tmp_path / "ckpts"
    fit(tmp_path, ModelCheckpoint(str(where), every_n_train_steps=5, save_top_k=-1), max_steps=20)
    rollback = tt.Rollback(LightningCheckpoints(where))
    rollback.request(19, [], "loss nan")
    assert rollback.restore() == 10
    assert [(e.kind, e.restored_step) for e in rollback.events] == [
        ("damaged", 15),
        ("rollback", 10),
    ]
    assert "not finite" in rollback.events[0].reason


class NamedCheckpoint(ModelCheckpoint):
    """A script's own ModelCheckpoint: its override must keep working once guarded."""

    def format_checkpoint_name(self, *args: Any, **kwargs: Any) -> str:
        return super().format_checkpoint_name(*args, **kwargs).replace("epoch=", "mine-epoch=")


def test_guard_checkpoints_guards_a_scripts_own_model_checkpoint_in_place(tmp_path: Path) -> None:
    """What tensortap run does to a Trainer: the script's ModelCheckpoint subclass keeps its
    override and its state_key, and a NaN-weight save is refused (before: saved, NaN)."""
    from tensortap.lightning._checkpoint_guard import _GuardedSaves, guard_checkpoints

    where = tmp_path / "ckpts"
    checkpoint = NamedCheckpoint(str(where), every_n_train_steps=5, save_top_k=1)
    key = checkpoint.state_key
    trainer = L.Trainer(
        max_steps=30,
        default_root_dir=str(tmp_path),
        accelerator="cpu",
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[checkpoint],
    )
    (guarded,) = guard_checkpoints(trainer)
    guard: tt.CheckpointGuard = guarded.checkpoint_guard
    assert guarded is checkpoint and isinstance(checkpoint, NamedCheckpoint)
    assert checkpoint.state_key == key
    assert guard_checkpoints(trainer) == [checkpoint]  # twice: guarded once
    copied: Any = pickle.loads(pickle.dumps(checkpoint))  # as ddp_spawn sends it to its processes
    copied_guard = copied.checkpoint_guard
    assert copied_guard is not guard and isinstance(copied_guard, tt.CheckpointGuard)
    assert isinstance(copied, NamedCheckpoint) and copied.state_key == key
    assert isinstance(copied, _GuardedSaves)
    assert isinstance(copy.deepcopy(checkpoint), _GuardedSaves)
    trainer.fit(Regression(13), train_dataloaders=loader())
    assert files(where) == ["mine-epoch=0-step=10.ckpt"]
    assert verify_checkpoint(where / "mine-epoch=0-step=10.ckpt") is None
    assert [e.step for e in guard.events if e.kind == "refused"] == [
        15,
        20,
        25,
        30,
    ]


def test_a_resume_from_last_takes_the_newest_good_file_instead(tmp_path: Path) -> None:
    """What tensortap run does to fit(ckpt_path="last"): a run without the guard left
    last.ckpt and step=15 NaN beside a good step=10; the resume loads step=10 (before: last.ckpt,
    and trained on NaN weights)."""
    from tensortap.lightning._checkpoint_guard import guard_checkpoints

    where = tmp_path / "ckpts"

    def checkpoint() -> ModelCheckpoint:
        return ModelCheckpoint(
            str(where),
            every_n_train_steps=5,
            save_top_k=2,
            monitor="step",
            mode="max",
            save_last=True,
        )

    fit(tmp_path, checkpoint(), max_steps=15)  # NaN from step 13, unguarded
    assert files(where) == ["epoch=0-step=10.ckpt", "epoch=0-step=15.ckpt", "last.ckpt"]
    trainer = L.Trainer(
        max_steps=20,
        default_root_dir=str(tmp_path),
        accelerator="cpu",
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[checkpoint()],
    )
    (guarded,) = guard_checkpoints(trainer)
    guard: tt.CheckpointGuard = guarded.checkpoint_guard
    module = Regression(None)
    trainer.fit(module, train_dataloaders=loader(), ckpt_path="last")
    assert trainer.global_step == 20
    assert all(torch.isfinite(p).all() for p in module.parameters())
    assert [(e.kind, e.step) for e in guard.events] == [
        ("fallback", 15),
        ("resumed", 10),
    ]
    assert guard.events[-1].checkpoint == str(where / "epoch=0-step=10.ckpt")
    assert "last.ckpt (its weights are not finite" in guard.events[-1].message


def _package(name: str) -> Any:
    """``lightning.pytorch`` or the older ``pytorch_lightning`` (skipped when not installed)."""
    return pytest.importorskip(name)


def _module_class(pl: Any) -> type[Any]:
    """:class:`RegressionSteps` as a LightningModule of the package ``pl``."""
    return type("Regression", (RegressionSteps, pl.LightningModule), {})


class SavesItself:
    """A script's own callback: ``trainer.save_checkpoint(path)`` every 5 training steps (the
    bytes after each kept), as a loop saving "the latest" to one file does."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.after: dict[int, bytes] = {}

    def on_train_batch_end(self, trainer: Any, *args: Any) -> None:
        if trainer.global_step % 5 == 0:
            trainer.save_checkpoint(str(self.path))
            self.after[trainer.global_step] = self.path.read_bytes()


def _own_saver(pl: Any, path: Path) -> Any:
    return type("SavesItself", (SavesItself, pl.Callback), {})(path)


@pytest.mark.parametrize(
    ("package", "how"),
    [("lightning.pytorch", "GuardedModelCheckpoint"), ("pytorch_lightning", "guard_checkpoints")],
)
def test_the_scripts_own_save_checkpoint_of_nan_weights_is_refused_and_the_file_kept(
    tmp_path: Path, package: str, how: str, caplog: pytest.LogCaptureFixture
) -> None:
    """trainer.save_checkpoint(path) from the script's callback every 5 steps, and once more
    after fit(): before, the saves from step 15 on wrote NaN weights over the step-10 file."""
    from tensortap.lightning._checkpoint_guard import guard_checkpoints

    pl = _package(package)
    where, final = tmp_path / "ckpts", tmp_path / "final.ckpt"
    checkpoint = (
        GuardedModelCheckpoint(str(where), every_n_train_steps=5, save_top_k=1)
        if how == "GuardedModelCheckpoint"
        else pl.callbacks.ModelCheckpoint(str(where), every_n_train_steps=5, save_top_k=1)
    )
    saver = _own_saver(pl, final)
    trainer = pl.Trainer(
        max_steps=30,
        default_root_dir=str(tmp_path),
        accelerator="cpu",
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[checkpoint, saver],
    )
    if how == "guard_checkpoints":
        guard_checkpoints(trainer)
    with caplog.at_level("WARNING", logger="tensortap"):
        trainer.fit(_module_class(pl)(13), train_dataloaders=loader())
        trainer.save_checkpoint(str(final))  # after fit, NaN weights: refused as well
    good = saver.after[10]
    assert verify_checkpoint(final) is None
    assert [saver.after[s] == good for s in (15, 20, 25, 30)] == [True] * 4
    assert final.read_bytes() == good
    guard: tt.CheckpointGuard = checkpoint.checkpoint_guard
    own = [e for e in guard.events if e.kind == "refused" and "save_checkpoint" in e.message]
    assert [e.step for e in own] == [15, 20, 25, 30, 30]
    assert f"trainer.save_checkpoint({str(final)!r}) at step 15 was refused" in own[0].message
    assert "not finite" in own[0].reason
    assert f"the file there is left as it was ({final})" in own[0].message
    # the last good one: ModelCheckpoint's of step 10 (Lightning runs it after the script's)
    good_file = where / "epoch=0-step=10.ckpt"
    assert f"the last good one is the checkpoint of step 10 ({good_file})" in own[0].message
    assert own[0].message in caplog.text
    assert files(where) == ["epoch=0-step=10.ckpt"]  # ModelCheckpoint's saves: refused as before


def test_a_finite_save_checkpoint_writes_the_same_bytes_as_without_the_guard(
    tmp_path: Path,
) -> None:
    """A healthy fit, then trainer.save_checkpoint(path), with the Trainer's ModelCheckpoint
    guarded in place and without: the same bytes; and the guard notes it as the last good
    checkpoint (before: it never knew of it)."""
    from tensortap.lightning._checkpoint_guard import guard_checkpoints

    final = tmp_path / "final.ckpt"
    written = {}
    for guarded in (False, True):
        checkpoint = ModelCheckpoint(str(tmp_path / "ckpts"), every_n_train_steps=5)
        trainer = L.Trainer(
            max_steps=10,
            default_root_dir=str(tmp_path),
            accelerator="cpu",
            logger=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            callbacks=[checkpoint],
        )
        if guarded:
            guard_checkpoints(trainer)
        trainer.fit(Regression(None), train_dataloaders=loader())
        trainer.save_checkpoint(str(final))
        written[guarded] = final.read_bytes()
        for path in [final, *(tmp_path / "ckpts").iterdir()]:
            path.unlink()
    assert written[True] == written[False]
    guard: tt.CheckpointGuard = checkpoint.checkpoint_guard  # type: ignore[attr-defined]
    assert guard.events == [] and guard.last_good == (10, str(final))


class BrokenCheck(tt.CheckpointGuard):
    """A guard whose own check fails (as a bug in it, or a model it cannot read, would)."""

    def refusal(self, model: Any = None) -> str | None:
        raise RuntimeError("the check broke")


def test_a_check_that_fails_lets_save_checkpoint_through_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    checkpoint = GuardedModelCheckpoint(
        str(tmp_path / "ckpts"), every_n_train_steps=5, checkpoint_guard=BrokenCheck()
    )
    final = tmp_path / "final.ckpt"
    with caplog.at_level("WARNING", logger="tensortap"):
        trainer = fit(tmp_path, checkpoint, max_steps=5, fault_at=None)
        trainer.save_checkpoint(str(final))
    assert verify_checkpoint(final) is None
    unchecked = "the checkpoint guard's check failed, the save goes on unchecked: RuntimeError"
    assert caplog.text.count(unchecked) == 2  # ModelCheckpoint's step 5, and save_checkpoint
    assert verify_checkpoint(tmp_path / "ckpts" / "epoch=0-step=5.ckpt") is None


@pytest.mark.parametrize(
    ("nan_rank", "install"),
    [(1, "guarded"), (0, "guard_checkpoints")],
    ids=["nan-on-rank-1-GuardedModelCheckpoint", "nan-on-rank-0-guard_checkpoints"],
)
def test_two_ddp_ranks_refuse_a_save_alike_when_one_ranks_weights_are_nan(
    tmp_path: Path, helper_env: dict[str, str], nan_rank: int, install: str
) -> None:
    """``fit(strategy="ddp")`` on 2 CPU processes; only rank ``nan_rank``'s weights are NaN at
    step 4, a save step. Lightning writes on rank 0 alone but waits for every rank at the end
    of ``save_checkpoint``: the ranks must decide alike. Both refuse step 4 (no file, no
    partial one), name the rank and the tensor, leave step 2's file byte for byte, and save
    step 6 once the weight is put back; the script's own ``save_checkpoint`` after ``fit()``
    likewise."""
    where = tmp_path / "ckpts"
    cmd = helper_cmd("lightning_checkpoint_guard_ranks.py", where, nan_rank, install)
    done = run_ranks(cmd, 2, dict(helper_env, PYTHONPATH=SRC), timeout=240)
    assert [p.returncode for p in done] == [0, 0], [p.stderr[-3000:] for p in done]
    results = [json.loads(p.stdout.strip().splitlines()[-1]) for p in done]
    assert sorted(p.name for p in where.iterdir()) == ["epoch=0-step=2.ckpt", "epoch=0-step=6.ckpt"]
    first = where / "epoch=0-step=2.ckpt"
    assert results[0]["before"] == {first.name: hashlib.sha256(first.read_bytes()).hexdigest()}
    assert verify_checkpoint(where / "epoch=0-step=6.ckpt") is None
    assert last_good_checkpoint(where) == str(where / "epoch=0-step=6.ckpt")
    for rank, result in enumerate(results):
        assert result["rank"] == rank and result["finite"]
        assert result["best"] == str(where / "epoch=0-step=6.ckpt")
        kinds = [(kind, step) for kind, step, _ in result["events"]]
        assert kinds == [
            ("refused", 4),
            ("pinned", 2),
            ("released", 2),
            ("refused", 6),  # the script's own save_checkpoint, refused on both ranks
            ("pinned", 6),
            ("released", 6),
        ]
        for refused in (result["events"][0][2], result["events"][3][2]):
            assert "not finite (net.0.weight)" in refused
            assert (f"on rank {nan_rank}" in refused) == (rank != nan_rank)
        assert result["refused_final"]
        assert "the checkpoint of step 4 was not saved" in done[rank].stderr  # the warnings
        assert "trainer.save_checkpoint(" in done[rank].stderr
    assert verify_checkpoint(tmp_path / "final.ckpt") is None  # written once put back
