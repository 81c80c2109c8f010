"""Lightning's ``RollbackCallback`` with in-memory checkpoints (issue 46): real
``Trainer.fit()`` runs of a tiny module on the CPU, a guard whose skip budget asks for the
rollback, the fit's state put back in place within the same fit. Both package names."""

from __future__ import annotations

import copy
import importlib
import logging
import warnings
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("lightning.pytorch")
import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

import tensortap.pytorch as tt
from tensortap.core._rollback_decision import DATA, RESTORE
from tensortap.exceptions import InvalidConfigError

BATCH, STEPS, EVERY = 8, 30, 5

#: (the package, tensortap's callbacks for its Trainer)
PACKAGES = {
    "lightning": ("lightning.pytorch", "TensortapCallback", "RollbackCallback"),
    "pytorch_lightning": ("pytorch_lightning", "PLTensortapCallback", "PLRollbackCallback"),
}


@pytest.fixture(autouse=True)
def _quiet_one_thread() -> Any:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    for name in ("lightning.pytorch", "pytorch_lightning"):
        logging.getLogger(name).setLevel(logging.ERROR)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield
    torch.set_num_threads(threads)


def _package(name: str) -> tuple[Any, Any, Any]:
    module, tap, roll = PACKAGES[name]
    pl = pytest.importorskip(module)
    import tensortap.lightning as tl

    return pl, getattr(tl, tap), getattr(tl, roll)


def _module(pl: Any) -> Any:
    class Regression(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            torch.manual_seed(0)
            self.net = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 1))
            self.trained: list[tuple[int, int]] = []  # (global step, batch) of each step
            self.request: tuple[tt.Rollback, int] | None = None  # ask at that batch, once

        def training_step(self, batch: Any, index: int) -> torch.Tensor:
            x, y, ids = batch
            self.trained.append((self.global_step, int(ids[0]) // BATCH))
            if self.request is not None and self.request[1] == int(ids[0]) // BATCH:
                rollback, self.request = self.request[0], None  # the loop's own loss check
                rollback.request(self.global_step, [], "the loop's loss check")
            return F.mse_loss(self.net(x), y)

        def configure_optimizers(self) -> Any:
            optimizer = torch.optim.AdamW(self.parameters(), lr=0.01)
            scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=4, gamma=0.9)
            return {
                "optimizer": optimizer,
                "lr_scheduler": {"scheduler": scheduler, "interval": "step"},
            }

    return Regression()


class Witness:
    """After each batch (its callback runs after the rollback's): the state just restored, and
    the checkpoint it came from, at the moment of each rollback."""

    def __init__(self, rollback: tt.Rollback) -> None:
        self.rollback = rollback
        self.restores: list[dict[str, Any]] = []

    def on_train_batch_end(self, trainer: Any, module: Any, *args: Any) -> None:
        if self.rollback.rollbacks == len(self.restores):
            return
        target = self.rollback.events[-1].restored_step
        held = self.rollback.checkpoints.state(target)  # type: ignore[attr-defined]
        self.restores.append(
            {
                "target": target,
                "global_step": trainer.global_step,
                "batch": args[-1],
                "weights": {k: v.clone() for k, v in module.state_dict().items()},
                "held": held,
                "optimizer": copy.deepcopy(trainer.optimizers[0].state_dict()),
                "scheduler": copy.deepcopy(trainer.lr_scheduler_configs[0].scheduler.state_dict()),
                "lr": trainer.optimizers[0].param_groups[0]["lr"],
            }
        )


def _fit(
    tmp_path: Path,
    package: str,
    *,
    nan_batches: tuple[int, ...] = (),
    request_at: int | None = None,
    budget: bool = True,
    **trainer_kwargs: Any,
) -> dict[str, Any]:
    trainer_kwargs.setdefault("max_steps", STEPS)
    pl, tap, roll = _package(package)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(64 * BATCH, 8, generator=g)
    y = torch.sin(x[:, :1]) + 0.5 * x[:, 1:2]
    for batch in nan_batches:
        x[batch * BATCH : (batch + 1) * BATCH] = float("nan")
    loader = DataLoader(TensorDataset(x, y, torch.arange(len(x))), batch_size=BATCH)
    rollback = tt.Rollback(tt.MemoryCheckpoints(keep=2), every=EVERY)
    callback = roll(rollback, budget=tt.SkipBudget(2, 10, then="rollback") if budget else None)
    base = importlib.import_module(f"{PACKAGES[package][0]}.callbacks").Callback
    witness_callback = type("WitnessCallback", (Witness, base), {})(rollback)
    module = _module(pl)
    if request_at is not None:
        module.request = (rollback, request_at)
    trainer = pl.Trainer(
        default_root_dir=str(tmp_path),
        accelerator="cpu",
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        callbacks=[tap(out_dir=str(tmp_path / "run")), callback, witness_callback],
        **trainer_kwargs,
    )
    trainer.fit(module, train_dataloaders=loader)
    return {
        "rollback": rollback,
        "trainer": trainer,
        "module": module,
        "callback": callback,
        "restores": witness_callback.restores,
    }


@pytest.mark.parametrize("package", sorted(PACKAGES))
def test_nan_batches_that_spend_the_budget_roll_the_fit_back_in_memory(
    tmp_path: Path, package: str
) -> None:
    run = _fit(tmp_path, package, nan_batches=(12, 13))
    rollback, module, trainer = run["rollback"], run["module"], run["trainer"]
    (event,) = rollback.events
    # the guard undid steps 12 and 13 (its budget: 2 skips), then asked; the replay says data
    assert (event.kind, event.step, event.restored_step) == ("rollback", 12, 10)
    assert event.decision.action == RESTORE and event.decision.evidence == DATA
    assert set(event.batches) == {(0, 12), (0, 13)}
    (restore,) = run["restores"]
    # put back bit for bit: the module, AdamW's moments, the scheduler, the step count
    held = restore["held"]
    assert restore["target"] == held.step == 10 and restore["global_step"] == 10
    assert restore["weights"].keys() == held.module.keys()
    for name, value in restore["weights"].items():
        assert torch.equal(value, held.module[name]), name
    for key, value in held.optimizers[0]["state"].items():
        for part, tensor in value.items():
            assert torch.equal(restore["optimizer"]["state"][key][part], tensor), (key, part)
    assert restore["scheduler"] == held.schedulers[0]
    assert restore["lr"] == pytest.approx(0.01 * 0.9**2)  # StepLR(4) after 10 steps
    # (global step, batch) of each training_step: the replay of step 12 (before step 13), of
    # step 13 (at the restore), then batch 14 at step 10
    assert module.trained == [
        *((s, s) for s in range(13)),
        (13, 12),
        (13, 13),
        (14, 13),
        *((s, s + 4) for s in range(10, STEPS)),
    ]
    assert trainer.global_step == STEPS
    assert all(torch.isfinite(p).all() for p in module.parameters())
    # recorded as elsewhere: the decision in the session it was made in, the branch after it
    first, second = tt.create_trial(tmp_path / "run").sessions()
    decisions = [e for e in first.events if e["kind"] == "rollback_decision"]
    assert [d["fields"]["step"] for d in decisions] == [12]
    assert (second.branch_of, second.branch_step) == (first.id, 10)
    assert (event.parent, event.session) == (first.id, second.id)
    assert "optimizer_step" not in vars(module)


@pytest.mark.parametrize("package", sorted(PACKAGES))
def test_a_healthy_fit_never_rolls_back(tmp_path: Path, package: str) -> None:
    run = _fit(tmp_path, package)
    rollback, module = run["rollback"], run["module"]
    assert rollback.events == [] and run["restores"] == []
    assert run["trainer"].global_step == STEPS
    assert module.trained == [(s, s) for s in range(STEPS)]
    assert rollback.checkpoints.steps() == [20, 25]  # every 5 steps, the newest 2 held
    (session,) = tt.create_trial(tmp_path / "run").sessions()
    assert session.branch_of is None


def test_a_trip_inside_an_accumulation_window_restores_at_the_steps_end(tmp_path: Path) -> None:
    # two micro-batches a step: NaN micro-batches 25 (step 12) and 27 (step 13)
    run = _fit(tmp_path, "lightning", nan_batches=(25, 27), accumulate_grad_batches=2, max_steps=20)
    rollback, module, trainer = run["rollback"], run["module"], run["trainer"]
    (event,) = rollback.events
    assert (event.kind, event.step, event.restored_step) == ("rollback", 12, 10)
    assert event.decision.action == RESTORE and event.decision.evidence == DATA
    # each micro-batch of the two tripped steps, healthy ones included (the step was judged
    # whole); the rollback's events name every one
    assert event.batches == ((0, 24), (0, 25), (0, 26), (0, 27))
    (restore,) = run["restores"]
    assert restore["global_step"] == 10 and restore["batch"] == 27  # a window's last
    for name, value in restore["weights"].items():
        assert torch.equal(value, restore["held"].module[name]), name
    # (global step, batch): two micro-batches a step; the replays run whole windows (step 12
    # before step 13's window, step 13 at the restore); then batch 28 opens step 10's window
    assert module.trained == [
        *((b // 2, b) for b in range(26)),
        (13, 24),
        (13, 25),
        (13, 26),
        (13, 27),
        (14, 26),
        (14, 27),
        *((10 + (b - 28) // 2, b) for b in range(28, 48)),
    ]
    assert trainer.global_step == 20
    assert all(torch.isfinite(p).all() for p in module.parameters())
    first, second = tt.create_trial(tmp_path / "run").sessions()
    assert (second.branch_of, second.branch_step) == (first.id, 10)


def test_a_request_inside_an_accumulation_window_waits_for_the_steps_end(tmp_path: Path) -> None:
    # batch 24 opens step 12's window (24, 25); the request comes during it
    run = _fit(
        tmp_path,
        "lightning",
        request_at=24,
        budget=False,
        accumulate_grad_batches=2,
        max_steps=20,
    )
    rollback, module, trainer = run["rollback"], run["module"], run["trainer"]
    (event,) = rollback.events
    assert (event.kind, event.step, event.restored_step) == ("rollback", 12, 10)
    assert event.batches == ((0, 24), (0, 25))  # the step's micro-batches, both
    (restore,) = run["restores"]
    assert (restore["global_step"], restore["batch"]) == (10, 25)  # after the window's last
    assert module.trained == [
        *((b // 2, b) for b in range(26)),
        *((10 + (b - 26) // 2, b) for b in range(26, 46)),
    ]
    assert trainer.global_step == 20


def test_a_fit_on_more_than_one_device_is_refused_saying_what_works(tmp_path: Path) -> None:
    with pytest.raises(InvalidConfigError, match="SingleDeviceStrategy.*LightningCheckpoints"):
        _fit(tmp_path, "lightning", strategy="ddp", devices=1)


def test_memory_checkpoints_need_every_and_no_batch_stream() -> None:
    from tensortap.lightning import RollbackCallback

    with pytest.raises(InvalidConfigError, match="every="):
        RollbackCallback(tt.Rollback(tt.MemoryCheckpoints()))
    batches = tt.SkipBatches(DataLoader(TensorDataset(torch.zeros(4, 1)), batch_size=2))
    with pytest.raises(InvalidConfigError, match="batches= out"):
        RollbackCallback(tt.Rollback(tt.MemoryCheckpoints(), every=5, batches=batches))
    with pytest.raises(InvalidConfigError, match="keep"):
        tt.MemoryCheckpoints(keep=0)
