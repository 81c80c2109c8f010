"""The verdict a new user meets first: `tensortap run` on a textbook script (an MLP on the digits,
Adam, a validation pass per epoch) ends "healthy" for three seeds, and the same script with a
learning rate 100x too high ends with the learning rate named first."""

from __future__ import annotations

import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "examples" / "textbook_digits.py"


def run(out: Path, name: str, *args: str) -> tuple[str, dict[str, object]]:
    done = subprocess.run(
        [sys.executable, "-m", "tensortap.cli", "run", "-q", "-o", str(out), "--name", name,
         "--", sys.executable, str(SCRIPT), "--epochs", "8", *args],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    summary = json.loads((out / name / "summary.json").read_text())
    return done.stdout, summary["diagnosis"]


def test_textbook_runs_are_healthy_and_a_learning_rate_100x_too_high_is_named_first(
    tmp_path: Path,
) -> None:
    jobs: dict[str, tuple[str, ...]] = {f"seed{s}": ("--seed", str(s)) for s in range(3)}
    jobs["lr100"] = ("--seed", "0", "--lr", "0.1")
    with ThreadPoolExecutor(2) as pool:  # the machine has two cores
        results = dict(zip(jobs, pool.map(lambda n: run(tmp_path, n, *jobs[n]), jobs)))
    for seed in range(3):
        stdout, found = results[f"seed{seed}"]
        assert found["verdict"] == "healthy", found
        assert "  diagnosis: healthy: " in stdout
    stdout, found = results["lr100"]
    assert found["verdict"] == "problem" and found["cause"] == "lr_too_high", found
    assert "  diagnosis: the learning rate is too high: " in stdout
    assert "try: lower the learning rate" in stdout
