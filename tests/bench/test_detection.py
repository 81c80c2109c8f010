"""The detection benchmark's quick subset (bench/detection): the recommended rule set at its
defaults raises no problem on the healthy programs and names the right problem on the buggy
ones. The whole benchmark runs under `make bench`."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_quick_detection_subset(tmp_path: Path) -> None:
    out = tmp_path / "detection.json"
    done = subprocess.run(
        [sys.executable, "-m", "bench.detection", "--quick", "--json", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(out.read_text())
    summary, results = report["summary"], report["results"]
    assert summary["healthy"] >= 4 and summary["buggy"] >= 4
    assert summary["false_alarms"] == 0, summary["healthy_with_problems"]
    assert summary["missed"] == [] and summary["misdiagnosed"] == []
    healthy = {r["name"]: r for r in results if r["label"] == "healthy"}
    # the traps fixed: a frozen backbone and BatchNorm biases are not "not updating"
    for name in ("frozen_backbone", "batchnorm_cnn"):
        assert not {"not_updating", "vanishing", "update_too_small"} & set(
            healthy[name]["diagnoses"]
        )
    assert "| program | class |" in done.stdout  # the table docs/rules.md shows
