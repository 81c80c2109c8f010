"""The examples keep working: `make demo` (examples/demo.py) and the hook-and-trial tour."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

EXAMPLE = Path(__file__).parents[2] / "examples" / "hook_and_trial.py"


def test_hook_and_trial_example_runs(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, str(EXAMPLE)], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert "all steps loaded: True" in result.stdout
    assert "eval loss by eval step" in result.stdout
    assert "relu2/relu_output_0" in result.stdout
    assert "problems: none" in result.stdout
    assert (tmp_path / "runs" / "demo" / "tensortap.json").is_file()


def test_make_demo_is_the_debugging_run(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, str(EXAMPLE.parent / "demo.py")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert "VanishingGradient            IssuesFound (problem) at step 0" in out
    assert "ExplodingTensor              NoIssuesFound" in out
    # the verdict names the planted cause first, with the harm it did folded under it (a
    # demo whose rules saw no harm once called this run healthy)
    assert "  diagnosis: gradients vanish: " in out, out
    assert "(AccuracyAtChance)" in out.split("  diagnosis: ")[1].splitlines()[0]
    assert "trial (debugger artifacts):" in out and "tensortap summary" in out
    assert "gradient/0.weight" in out and "the healthy twin" in out
    last = out.rstrip().splitlines()[-1].split()  # it ends with the dashboard for its job
    assert last[0].endswith("tensortap") and last[1] == "serve" and "digits-sigmoid-" in last[2]


def run_example(name: str, cwd: Path, *args: str) -> str:
    result = subprocess.run(
        [sys.executable, str(EXAMPLE.parent / name), "--quick", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def test_seed002_tensorplot_of_a_cnn(tmp_path: Path) -> None:
    out = run_example("seed002_tensorplot.py", tmp_path)
    assert "layers: ['1/relu_output_0', '3/relu_output_0', '7/relu_output_0']" in out
    assert "steps: [1, 2, 3]; traces per frame: 4" in out
    page = tmp_path / "runs" / "seed002.html"
    assert page.stat().st_size > 1_000_000  # plotly.js inlined: it opens offline


def test_seed004_live_embeddings_of_an_autoencoder(tmp_path: Path) -> None:
    out = run_example("seed004_autoencoder_embeddings.py", tmp_path)
    steps = [line.split(":")[0] for line in out.splitlines() if line.startswith("eval step")]
    assert steps == ["eval step   0", "eval step  10", "eval step  20"]
    assert "timed out: False" in out and "(3 frames;" in out
    assert (tmp_path / "runs" / "seed004.html").is_file()


def test_seed000_builtin_rules_on_a_cnn_job(tmp_path: Path) -> None:
    out = run_example("seed000_builtin_rules.py", tmp_path)
    assert "  VanishingGradient: NoIssuesFound" in out
    assert "  LossNotDecreasing: NoIssuesFound" in out
    assert "losses: ['CrossEntropyLoss_output_0']" in out
    (job_dir,) = (tmp_path / "runs").iterdir()
    assert (job_dir / "losses.png").read_bytes().startswith(b"\x89PNG")
    page = (job_dir / "report.html").read_text()
    assert ">Job and rules</h2>" in page and "plotly-graph-div" in page  # TensorPlot of the ReLUs


def test_seed001_custom_rule_fires_on_the_buggy_job_only(tmp_path: Path) -> None:
    out = run_example("seed001_custom_rule.py", tmp_path)
    assert "pixels x20, unnormalised: CustomGradientRule IssuesFound" in out
    assert "pixels in 0..1: CustomGradientRule NoIssuesFound" in out


def test_seed003_keras_quickstart(tmp_path: Path) -> None:
    out = run_example("seed003_keras_quickstart.py", tmp_path)
    # the loss it asked for, and (a hook that saves the loss) every step's vital signs
    assert "Saved tensor values for ['loss', 'vitals/grad_norm', 'vitals/loss'" in out
    assert "Loss values were loss:" in out and "eval loss: [" in out
