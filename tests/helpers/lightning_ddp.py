"""Lightning under DDP: two CPU processes (gloo) started by Lightning itself, each rank
writing as its own worker. Usage: lightning_ddp.py OUT_DIR"""

from __future__ import annotations

import logging
import sys
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[2] / "examples"))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root: tests.helpers

from lightning_trainer import train

from tests.helpers.ranks import leave_together


def main() -> None:
    warnings.filterwarnings("ignore")
    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
    train(
        sys.argv[1],
        0.5,
        1,
        plain=False,
        strategy="ddp",
        devices=2,
        limit_train_batches=8,
        limit_val_batches=2,
        val_check_interval=1.0,
    )
    print("done", flush=True)
    leave_together()


if __name__ == "__main__":
    main()
