"""The CLI in a shell pipeline: a reader that leaves early (``| head``) ends it quietly."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np

import tensortap as tt


def test_a_reader_that_leaves_early_gets_no_traceback(tmp_path: Path) -> None:
    with tt.Hook(str(tmp_path / "trial"), include_collections=["weights"]) as hook:
        for i in range(3000):  # ~250 KB of listing: more than a pipe holds
            hook.save_tensor(f"layer_{i:04d}/a_long_enough_name.weight", np.ones(2), "weights")
        hook.next_step()
    shell = subprocess.Popen(
        [sys.executable, "-m", "tensortap.cli", "names", str(tmp_path / "trial")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert shell.stdout is not None and shell.stderr is not None
    first = shell.stdout.readline()  # like `head -1`
    shell.stdout.close()
    err = shell.stderr.read().decode()
    code = shell.wait(timeout=120)
    assert first.startswith(b"TENSOR")
    assert "Traceback" not in err and "BrokenPipe" not in err, err
    assert code == 141, (code, err)
