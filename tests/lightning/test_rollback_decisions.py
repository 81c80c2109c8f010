"""A Lightning fit's rollback decides from a replay's evidence (issue 46), as a plain PyTorch
loop does: real ``Trainer.fit()`` runs of a tiny module on the CPU, a guard with a skip budget on
the optimizer ``configure_optimizers`` returns, the trips replayed through ``training_step``."""

from __future__ import annotations

import logging
import warnings
from pathlib import Path
from typing import Any

import pytest

L: Any = pytest.importorskip("lightning.pytorch")
import torch  # noqa: E402
from lightning.pytorch.callbacks import ModelCheckpoint  # noqa: E402
from torch import nn  # noqa: E402
from torch.nn import functional as F  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402

import tensortap.pytorch as tt  # noqa: E402
from tensortap.core._rollback_decision import (  # noqa: E402
    DATA,
    GO_ON,
    LOWER_LR,
    NUMERICS,
    REMEDY,
    RESTORE,
    STOP,
    TIGHTER_CLIP,
    TRANSIENT,
)
from tensortap.lightning import LightningCheckpoints, RollbackCallback, fit_with_rollback  # noqa: E402
from tensortap.testing import inject_bitflip  # noqa: E402
from tests.helpers.tiny_gpt import LayerFault  # noqa: E402

BATCH, STEPS = 8, 30


@pytest.fixture(autouse=True)
def _quiet_one_thread() -> Any:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield
    torch.set_num_threads(threads)


class Regression(L.LightningModule):
    def __init__(self, fault: LayerFault | None = None) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.net = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 1))
        self.trained: list[int] = []  # each training_step's batch (its first sample's id)
        self.fault = fault

    def training_step(self, batch: Any, index: int) -> torch.Tensor:
        x, y, ids = batch
        self.trained.append(int(ids[0]) // BATCH)
        return F.mse_loss(self.net(x), y)

    def on_train_batch_start(self, batch: Any, index: int) -> None:
        if self.fault is not None:  # a fault that strikes at given steps, whatever the batch
            self.fault.step = self.global_step

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.AdamW(self.parameters(), lr=0.01)


def _fit(
    tmp_path: Path,
    *,
    nan_batches: tuple[int, ...] = (),
    flip_at: int | None = None,
    fault_steps: frozenset[int] = frozenset(),
    skips: int = 1,
    accumulate: int = 1,
) -> dict[str, Any]:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(64 * BATCH, 8, generator=g)
    y = torch.sin(x[:, :1]) + 0.5 * x[:, 1:2]
    for batch in nan_batches:
        x[batch * BATCH : (batch + 1) * BATCH] = float("nan")
    data = TensorDataset(x, y, torch.arange(len(x)))
    batches = tt.SkipBatches(DataLoader(data, batch_size=BATCH, shuffle=False))
    checkpoints = tmp_path / "ckpts"
    rollback = tt.Rollback(LightningCheckpoints(checkpoints), batches=batches)
    module = Regression()
    if flip_at is not None:
        inject_bitflip(module.net[2], step=flip_at)  # its flip_at-th training call, once
    module.fault = LayerFault(module.net[2], set(fault_steps))
    callback = RollbackCallback(
        rollback,
        budget=tt.SkipBudget(skips, 10, then="rollback"),
        remedies={"lr_factor": 0.1, "clip_norm": 0.5, "steps": 20},
    )

    def make_trainer() -> Any:
        return L.Trainer(
            max_steps=STEPS,
            accumulate_grad_batches=accumulate,
            default_root_dir=str(tmp_path),
            accelerator="cpu",
            logger=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            callbacks=[
                callback,
                ModelCheckpoint(str(checkpoints), every_n_train_steps=5, save_top_k=-1),
            ],
        )

    trainer = fit_with_rollback(rollback, make_trainer, module, train_dataloaders=batches)
    return {"rollback": rollback, "trainer": trainer, "module": module, "callback": callback}


def test_a_one_off_fault_is_transient_nothing_restored_nothing_dropped(tmp_path: Path) -> None:
    run = _fit(tmp_path, flip_at=12)
    rollback, module = run["rollback"], run["module"]
    (event,) = rollback.events
    assert (event.kind, event.step, event.restored_step) == ("went_on", 12, None)
    assert event.decision.action == GO_ON and event.decision.evidence == TRANSIENT
    assert rollback.batches.skip == set() and rollback.rollbacks == 0
    assert run["trainer"].global_step == STEPS  # one fit, to its end
    assert module.trained == [*range(13), 12, *range(13, STEPS)]  # each once, and the replay
    assert rollback.transients == {0: 1}
    assert "optimizer_step" not in vars(module)  # the module is as it was


def test_a_layer_fault_at_two_steps_is_numerics_drops_no_batch_and_stops_naming_the_layer(
    tmp_path: Path,
) -> None:
    run = _fit(tmp_path, fault_steps=frozenset({17, 18}), skips=2)
    rollback, module = run["rollback"], run["module"]
    assert rollback.batches.skip == set()  # no healthy batch left out
    kinds = [(e.kind, e.restored_step) for e in rollback.events]
    assert kinds == [("rollback", 15), ("rollback", 15), ("stopped", None)]
    actions = [(e.decision.action, e.decision.remedy) for e in rollback.events]
    assert actions == [(REMEDY, LOWER_LR), (REMEDY, TIGHTER_CLIP), (STOP, None)]
    stopped = rollback.events[-1].decision
    assert stopped.evidence == NUMERICS and stopped.layer == "net.2"
    assert rollback.should_stop and "net.2" in rollback.events[-1].message
    # each branch from 15 trains batches 15 to 18 again (none left out); the replays follow
    # steps 17 and 18 in the first branch, 17 in the second (the replayer's 3 are spent then)
    assert module.trained == [*range(18), 17, 18, 18, 15, 16, 17, 17, 18, 15, 16, 17, 18]
    assert all(torch.isfinite(p).all() for p in module.parameters())
    remedies = run["callback"].healing.remedies
    assert remedies is not None and remedies.optimizer is run["trainer"].optimizers[0]


def test_a_nan_batch_is_still_restored_past_and_left_out(tmp_path: Path) -> None:
    run = _fit(tmp_path, nan_batches=(12,))
    rollback, module = run["rollback"], run["module"]
    (event,) = rollback.events
    assert (event.kind, event.step, event.restored_step, event.batches) == (
        "rollback",
        12,
        10,
        (12,),
    )
    assert event.decision.action == RESTORE and event.decision.evidence == DATA
    assert rollback.batches.skip == {12}
    assert run["trainer"].global_step == STEPS
    # batch 12, its replay, then from the checkpoint of step 10 without it: one batch later
    assert module.trained == [*range(13), 12, 10, 11, *range(13, STEPS + 1)]


def test_a_nan_micro_batch_restores_lightnings_file_of_a_step_and_skips_the_step(
    tmp_path: Path,
) -> None:
    # two micro-batches a step (accumulate_grad_batches=2): batch 25 is step 12's second
    run = _fit(tmp_path, nan_batches=(25,), accumulate=2)
    rollback, module = run["rollback"], run["module"]
    (event,) = rollback.events
    assert (event.kind, event.step, event.restored_step, event.batches) == (
        "rollback",
        12,
        10,
        (24, 25),
    )
    assert event.decision.action == RESTORE and event.decision.evidence == DATA
    assert rollback.batches.skip == {24, 25}
    assert run["trainer"].global_step == STEPS
    # steps 0-12, the replay of step 12's window, then from the file of step 10: batches 20-23
    # (steps 10, 11) and 26 on, two a step
    assert module.trained == [*range(26), 24, 25, *range(20, 24), *range(26, 2 * STEPS + 2)]


def test_manual_optimization_is_refused_when_the_fit_starts(tmp_path: Path) -> None:
    from tensortap.exceptions import InvalidConfigError

    class Manual(Regression):
        def __init__(self) -> None:
            super().__init__()
            self.automatic_optimization = False

    data = TensorDataset(torch.randn(32, 8), torch.randn(32, 1), torch.arange(32))
    batches = tt.SkipBatches(DataLoader(data, batch_size=BATCH))
    rollback = tt.Rollback(LightningCheckpoints(tmp_path / "ckpts"), batches=batches)
    callback = RollbackCallback(rollback, budget=tt.SkipBudget(1, 10, then="rollback"))
    trainer = L.Trainer(
        max_steps=2,
        default_root_dir=str(tmp_path),
        accelerator="cpu",
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        callbacks=[callback],
    )
    with pytest.raises(InvalidConfigError, match="automatic_optimization=False"):
        trainer.fit(Manual(), train_dataloaders=batches)
