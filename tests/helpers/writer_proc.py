"""A training process for multi-process tests: saves NAMES every step until told how many.

usage: writer_proc.py OUT_DIR WORKER NUM_WORKERS STEPS(-1 = forever) FLUSH_SECS
Prints "step N" after each published-ready step so the parent can follow along.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root: tests.helpers

import tensortap as tt
from tests.helpers.expected import NAMES, expected_value


def main() -> None:
    out_dir, worker, num_workers, steps, flush = sys.argv[1:6]
    total = int(steps)
    hook = tt.Hook(
        out_dir,
        save_config=tt.SaveConfig(save_interval=1),
        worker=int(worker),
        num_workers=int(num_workers),
        writer_options=tt.WriterOptions(flush_secs=float(flush)),
    )
    hook.set_mode(tt.modes.TRAIN)
    step = 0
    while total < 0 or step < total:
        for name in NAMES:
            hook.save_tensor(name, expected_value(name, step))
        hook.save_scalar("loss", 1.0 / (step + 1))
        hook.next_step()
        print(f"step {step}", flush=True)
        step += 1
    hook.close()
    print("closed", flush=True)


if __name__ == "__main__":
    main()
