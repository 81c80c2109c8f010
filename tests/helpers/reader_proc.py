"""A reader process polling a trial while another process writes it.

usage: reader_proc.py TRIAL_DIR EXPECTED_STEPS TIMEOUT
Checks every value of every step it sees (complete steps only, never partial) and prints
"ok N" with the number of distinct step counts it observed on the way (to show it read live).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root: tests.helpers

import tensortap as tt
from tests.helpers.expected import NAMES, expected_value


def main() -> None:
    path, expected, timeout = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
    deadline = time.monotonic() + timeout
    trial = tt.create_trial(path, refresh_interval=0)
    checked: set[int] = set()
    seen_counts: set[int] = set()
    while time.monotonic() < deadline:
        steps = trial.steps()
        seen_counts.add(len(steps))
        for step in steps:
            if step in checked:
                continue
            names = trial.tensor_names(step=step)
            if sorted(names) != sorted([*NAMES, "loss"]):
                print(f"partial step {step}: {names}", flush=True)
                sys.exit(1)
            for name in NAMES:
                np.testing.assert_array_equal(
                    trial.tensor(name).value(step), expected_value(name, step)
                )
            checked.add(step)
        if len(checked) >= expected and trial.loaded_all_steps:
            print(f"ok {len(seen_counts)}", flush=True)
            return
        time.sleep(0.01)
    print(f"timeout: checked {len(checked)} steps", flush=True)
    sys.exit(2)


if __name__ == "__main__":
    main()
