"""`make demo` runs examples/demo.py; keep it working."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

DEMO = Path(__file__).parents[1] / "examples" / "demo.py"


def test_demo_runs(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, str(DEMO)], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert "all steps loaded: True" in result.stdout
    assert "eval loss by eval step" in result.stdout
    assert "relu2/relu_output_0" in result.stdout
    assert "problems: none" in result.stdout
    assert (tmp_path / "runs" / "demo" / "tensortap.json").is_file()
