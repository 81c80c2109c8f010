"""The learning-rate verdict beyond plain PyTorch (issue 44): unmodified Keras (``model.fit``)
and Lightning (``Trainer.fit``) scripts on the digits, SGD at a rate that trains end "healthy";
the same scripts at 100x that rate end with the learning rate named first. Before, both named a
symptom (the loss spikes; NaN): WeightUpdateRatio's large first update was a warning, and its
own later NaN weights were the finding the diagnosis read."""

from __future__ import annotations

import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

HERE = Path(__file__).parent


def run(out: Path, name: str, script: str, lr: str) -> tuple[str, dict[str, object]]:
    """``tensortap run`` on ``script --lr lr``: what it printed and the job's diagnosis."""
    done = subprocess.run(
        [sys.executable, "-m", "tensortap.cli", "run", "-q", "-o", str(out), "--name", name,
         "--", sys.executable, str(HERE / script), "--lr", lr],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    summary = json.loads((out / name / "summary.json").read_text())
    return done.stdout, summary["diagnosis"]


def healthy_and_too_high(out: Path, script: str, healthy: str, too_high: str) -> None:
    with ThreadPoolExecutor(2) as pool:  # the machine has two cores
        (_, fine), (stdout, found) = pool.map(
            lambda job: run(out, *job), [("healthy", script, healthy), ("lr100", script, too_high)]
        )
    assert fine["verdict"] == "healthy", fine
    assert found["verdict"] == "problem" and found["cause"] == "lr_too_high", found
    # The update ratio leads; the loss blown up past 10x its first value (PoorWeightInitialization
    # read as a learning rate too high) may join it as further evidence of the same cause.
    evidence = found["problems"][0]["evidence"]  # type: ignore[index]
    assert evidence[0]["rule"] == "WeightUpdateRatio" and "diverges" in evidence[0]["message"]
    assert {e["rule"] for e in evidence} <= {"WeightUpdateRatio", "PoorWeightInitialization"}
    assert "  diagnosis: the learning rate is too high: " in stdout
    assert "try: lower the learning rate" in stdout


def test_keras_sgd_100x_too_high_names_the_learning_rate_first(tmp_path: Path) -> None:
    pytest.importorskip("keras")
    healthy_and_too_high(tmp_path, "lr_keras_script.py", "0.05", "5")


def test_lightning_sgd_100x_too_high_names_the_learning_rate_first(tmp_path: Path) -> None:
    pytest.importorskip("lightning")
    healthy_and_too_high(tmp_path, "lr_lightning_script.py", "0.1", "10")
