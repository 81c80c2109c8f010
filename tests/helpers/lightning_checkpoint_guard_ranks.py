"""One rank of a Lightning ``Trainer.fit()`` with ``strategy="ddp"`` on CPU (gloo; two
processes started by the test with RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT,
which Lightning takes as processes created outside it), saving every 2 steps up to step 6
through ``GuardedModelCheckpoint`` (INSTALL ``guarded``) or a plain ``ModelCheckpoint`` given
the guard by ``guard_checkpoints``, as ``tensortap run`` does (INSTALL ``guard_checkpoints``).
At the end of step 4, just before its save, one parameter of rank NAN_RANK only is made NaN;
it is put back before step 5 runs, so DDP's all-reduce never spreads it. Rank 0 keeps the
bytes of step 2's file as they were before that save was decided. After ``fit()`` the script
saves ``final.ckpt`` itself on every rank, once with rank NAN_RANK's weight NaN again and once
with it put back. Prints a JSON line.
Usage: lightning_checkpoint_guard_ranks.py OUT_DIR NAN_RANK INSTALL"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import sys
import warnings
from pathlib import Path
from typing import Any

import lightning.pytorch as L
import torch
from lightning.pytorch.callbacks import ModelCheckpoint

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root: tests.helpers
from tensortap.lightning import GuardedModelCheckpoint
from tensortap.lightning._checkpoint_guard import guard_checkpoints
from tests.helpers.no_pickle import forbid_pickling_collectives
from tests.helpers.ranks import leave_together

POISONED, SAVES = 4, 2


class Poison(L.Callback):
    """Writes NaN into ``net.0.weight`` of rank ``rank`` at the end of step 4 (Lightning runs
    every ``ModelCheckpoint`` after the other callbacks) and puts it back before step 5."""

    def __init__(self, rank: int, first: Path) -> None:
        self.rank, self.first = rank, first
        self.kept: torch.Tensor | None = None
        self.before: dict[str, str] = {}

    def on_train_batch_end(self, trainer: Any, module: Any, *args: Any) -> None:
        if trainer.global_step != POISONED:
            return
        if trainer.global_rank == 0:
            self.before = {self.first.name: hashlib.sha256(self.first.read_bytes()).hexdigest()}
        if trainer.global_rank == self.rank:
            weight = module.get_parameter("net.0.weight")
            self.kept = weight.detach().clone()
            with torch.no_grad():
                weight[0, 0] = math.nan

    def on_train_batch_start(self, trainer: Any, module: Any, *args: Any) -> None:
        if trainer.global_step == POISONED and self.kept is not None:
            with torch.no_grad():
                module.get_parameter("net.0.weight").copy_(self.kept)
            self.kept = None


def main() -> None:
    warnings.filterwarnings("ignore")
    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
    forbid_pickling_collectives()  # tensortap's ranks agree without pickle (issue 46)
    from tests.helpers.lightning_regression import Regression, loader

    out, nan_rank, install = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    kind = GuardedModelCheckpoint if install == "guarded" else ModelCheckpoint
    checkpoint: Any = kind(str(out), every_n_train_steps=SAVES, save_top_k=-1)
    poison = Poison(nan_rank, out / "epoch=0-step=2.ckpt")
    trainer = L.Trainer(
        max_steps=6,
        accelerator="cpu",
        strategy="ddp",
        devices=2,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=str(out.parent),
        callbacks=[checkpoint, poison],
    )
    if install == "guard_checkpoints":
        guard_checkpoints(trainer)
    trainer.fit(Regression(None), train_dataloaders=loader())
    result: dict[str, Any] = {}
    module = trainer.lightning_module
    # the script's own save after fit(), on every rank as Lightning asks: refused alike while
    # one rank's weight is NaN, written once it is put back
    final = out.parent / "final.ckpt"
    weight = module.get_parameter("net.0.weight")
    kept = weight.detach().clone()
    if trainer.global_rank == nan_rank:
        with torch.no_grad():
            weight[0, 0] = math.nan
    trainer.save_checkpoint(str(final))
    refused_final = not final.exists()
    with torch.no_grad():
        weight.copy_(kept)
    trainer.save_checkpoint(str(final))
    finite = all(bool(torch.isfinite(p).all()) for p in module.parameters())
    events = [[e.kind, e.step, e.reason] for e in checkpoint.checkpoint_guard.events]
    result["refused_final"] = refused_final
    result.update(rank=trainer.global_rank, events=events, finite=finite)
    print(json.dumps({**result, "before": poison.before, "best": checkpoint.best_model_path}))
    leave_together()


if __name__ == "__main__":
    main()
