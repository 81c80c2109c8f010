"""Lightning's ``RollbackCallback`` with in-memory checkpoints (issue 46): real
``Trainer.fit()`` runs of a tiny module on the CPU, a guard whose skip budget asks for the
rollback, the fit's state put back in place within the same fit. Both package names."""

from __future__ import annotations

import copy
import importlib
import logging
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("lightning.pytorch")
import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, Subset, TensorDataset

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


#: The learning-rate scheduler config ``configure_optimizers`` returns, made on the optimizer.
Schedule = Callable[[torch.optim.Optimizer], dict[str, Any]]


def _step_lr(optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=4, gamma=0.9)
    return {"scheduler": scheduler, "interval": "step"}


def _module(pl: Any, schedule: Schedule = _step_lr) -> Any:
    class Regression(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            torch.manual_seed(0)
            self.net = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 1))
            self.trained: list[tuple[int, int]] = []  # (global step, batch) of each step
            # ask at that batch (or (epoch, batch)), once
            self.request: tuple[tt.Rollback, int | tuple[int, int]] | None = None

        def training_step(self, batch: Any, index: int) -> torch.Tensor:
            x, y, ids = batch
            self.trained.append((self.global_step, int(ids[0]) // BATCH))
            batch_id = int(ids[0]) // BATCH
            at = self.request[1] if self.request is not None else None
            if self.request is not None and at in (batch_id, (self.current_epoch, batch_id)):
                rollback, self.request = self.request[0], None  # the loop's own loss check
                rollback.request(self.global_step, [], "the loop's loss check")
            loss = F.mse_loss(self.net(x), y)
            self.log("train_loss", loss)  # what a ReduceLROnPlateau monitors
            return loss

        def configure_optimizers(self) -> Any:
            optimizer = torch.optim.AdamW(self.parameters(), lr=0.01)
            return {"optimizer": optimizer, "lr_scheduler": schedule(optimizer)}

    return Regression()


class Witness:
    """After each batch (its callback runs after the rollback's): the state just restored, and
    the checkpoint it came from, at the moment of each rollback."""

    def __init__(self, rollback: tt.Rollback) -> None:
        self.rollback = rollback
        self.restores: list[dict[str, Any]] = []
        #: When each batch starts: (epoch, batch, global step, lr, the scheduler's state)
        self.starts: list[tuple[int, int, int, float, dict[str, Any]]] = []

    def on_train_batch_start(self, trainer: Any, module: Any, batch: Any, index: int) -> None:
        lr = trainer.optimizers[0].param_groups[0]["lr"]
        scheduler = copy.deepcopy(trainer.lr_scheduler_configs[0].scheduler.state_dict())
        self.starts.append((trainer.current_epoch, index, trainer.global_step, lr, scheduler))

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
    request_at: int | tuple[int, int] | None = None,
    budget: bool = True,
    schedule: Schedule = _step_lr,
    order: list[int] | None = None,
    **trainer_kwargs: Any,
) -> dict[str, Any]:
    """A fit of ``_module`` (``order``: the batches it trains, in that order; all by default)."""
    trainer_kwargs.setdefault("max_steps", STEPS)
    pl, tap, roll = _package(package)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(64 * BATCH, 8, generator=g)
    y = torch.sin(x[:, :1]) + 0.5 * x[:, 1:2]
    for batch in nan_batches:
        x[batch * BATCH : (batch + 1) * BATCH] = float("nan")
    dataset = TensorDataset(x, y, torch.arange(len(x)))
    if order is not None:
        dataset = Subset(dataset, [b * BATCH + i for b in order for i in range(BATCH)])  # type: ignore[assignment]
    loader = DataLoader(dataset, batch_size=BATCH)
    rollback = tt.Rollback(tt.MemoryCheckpoints(keep=2), every=EVERY)
    callback = roll(rollback, budget=tt.SkipBudget(2, 10, then="rollback") if budget else None)
    base = importlib.import_module(f"{PACKAGES[package][0]}.callbacks").Callback
    witness_callback = type("WitnessCallback", (Witness, base), {})(rollback)
    module = _module(pl, schedule)
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
        "starts": witness_callback.starts,
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


def _plateau(optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(
        optimizer, factor=0.5, patience=1, threshold=0.05
    )
    return {"scheduler": scheduler, "interval": "step", "monitor": "train_loss"}


def _by_step(starts: list[tuple[int, int, int, float, dict[str, Any]]]) -> dict[int, Any]:
    """The lr and the scheduler's state when each step started, the last branch's (a step
    started again after a restore replaces the abandoned branch's)."""
    return {step: (lr, scheduler) for _, _, step, lr, scheduler in starts}


@pytest.mark.parametrize("package", sorted(PACKAGES))
def test_a_plateau_scheduler_on_a_step_interval_is_put_back_as_a_clean_run_has_it(
    tmp_path: Path, package: str
) -> None:
    # a request during batch 12 restores step 10; batch 13 then trains as step 10
    run = _fit(
        tmp_path / "rolled",
        package,
        request_at=12,
        budget=False,
        schedule=_plateau,
        max_steps=24,
    )
    (event,) = run["rollback"].events
    assert (event.kind, event.step, event.restored_step) == ("rollback", 12, 10)
    (restore,) = run["restores"]
    assert restore["scheduler"] == restore["held"].schedulers[0]  # put back, then
    # the clean run: the batches the branch trained, in its order, without the fault
    clean = _fit(
        tmp_path / "clean",
        package,
        budget=False,
        schedule=_plateau,
        order=[*range(10), *range(13, 64)],
        max_steps=24,
    )
    assert clean["rollback"].events == []
    assert run["module"].trained[-14:] == clean["module"].trained[-14:]  # (10, 13) onwards
    rolled, reference = _by_step(run["starts"]), _by_step(clean["starts"])
    assert rolled.keys() == reference.keys() == set(range(24))
    for step in range(24):  # lr, num_bad_epochs, best, last_epoch: as the clean run's
        assert rolled[step] == reference[step], step
    assert rolled[10][1]["last_epoch"] == 10
    assert len({lr for lr, _ in rolled.values()}) > 2  # the plateau did lower the lr
    for name, value in run["module"].state_dict().items():
        assert torch.equal(value, clean["module"].state_dict()[name]), name


def _epoch_step_lr(optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    return {"scheduler": scheduler, "interval": "epoch"}


def test_an_epoch_scheduler_keeps_the_epoch_across_a_restore_to_the_epoch_before(
    tmp_path: Path,
) -> None:
    # 8 batches an epoch; checkpoints at steps 0 and 5 (epoch 0), a request during epoch 1's
    # batch 1 (step 9) restores step 5, in epoch 0
    run = _fit(
        tmp_path / "rolled",
        "lightning",
        request_at=(1, 1),
        budget=False,
        schedule=_epoch_step_lr,
        limit_train_batches=8,
        max_steps=24,
    )
    (event,) = run["rollback"].events
    assert (event.kind, event.step, event.restored_step) == ("rollback", 9, 5)
    # the data goes on where it was: epoch 1's batch 2 trains as step 5; no batch again
    assert run["module"].trained == [
        *((s, s % 8) for s in range(10)),
        *((5 + b - 2, b) for b in range(2, 8)),
        *((11 + i, i % 8) for i in range(13)),
    ]
    clean = _fit(
        tmp_path / "clean",
        "lightning",
        budget=False,
        schedule=_epoch_step_lr,
        limit_train_batches=8,
        max_steps=32,
    )
    lr_at = {(epoch, batch): lr for epoch, batch, _, lr, _ in clean["starts"]}
    after = run["starts"][10:]  # the batches after the restore
    assert [(epoch, step) for epoch, _, step, _, _ in after] == [
        *((1, s) for s in range(5, 11)),
        *((2, s) for s in range(11, 19)),
        *((3, s) for s in range(19, 24)),
    ]
    for epoch, batch, step, lr, scheduler in after:
        # the lr a clean run has at that batch of that epoch; the scheduler counts the epoch
        assert (lr, scheduler["last_epoch"]) == (lr_at[epoch, batch], epoch), (epoch, batch, step)
    assert run["trainer"].global_step == 24
