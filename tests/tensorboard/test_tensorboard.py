"""TensorBoard output, read back with TensorBoard's own event reader and served by a real
``tensorboard`` process on 127.0.0.1."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest

import tensortap as tt
from tensortap.cli import main as cli
from tensortap.exceptions import InvalidConfigError

pytest.importorskip("tensorboard")
from tensorboard.backend.event_processing.event_accumulator import (
    EventAccumulator,
)

DEADLINE = 60.0


def train(out: Path, **hook_options) -> tt.Hook:
    """Six train steps and three eval steps: a loss, a weight, a gradient with reductions."""
    hook = tt.Hook(
        out,
        save_config=tt.SaveConfig(save_interval=1),
        include_collections=["scalars", "weights", "gradients"],
        **hook_options,
    )
    gradients = hook.get_collection("gradients")
    gradients.reduction_config = tt.ReductionConfig(reductions=["max"], norms=["l2"])
    hook.set_mode(tt.modes.TRAIN)
    for step in range(6):
        hook.save_scalar("loss", 1.0 / (step + 1))
        hook.save_tensor("fc.weight", np.linspace(-1, 1, 64) * (step + 1), collections="weights")
        hook.save_tensor("fc.weight_grad", np.full(8, step, np.float32), collections="gradients")
        hook.next_step()
    hook.set_mode(tt.modes.EVAL)
    for step in range(3):
        hook.save_scalar("loss", 2.0 + step)
        hook.next_step()
    hook.close()
    return hook


def events(run_dir: Path) -> EventAccumulator:
    accumulator = EventAccumulator(str(run_dir), size_guidance={"scalars": 0, "histograms": 0})
    accumulator.Reload()
    return accumulator


def scalars(acc: EventAccumulator, tag: str) -> list[tuple[int, float]]:
    return [(e.step, e.value) for e in acc.Scalars(tag)]


def test_the_hook_writes_scalars_and_histograms_per_mode(tmp_path: Path) -> None:
    train(tmp_path / "trial", export_tensorboard=True)
    board = tmp_path / "trial" / "tensorboard"  # the default: inside out_dir
    assert sorted(p.name for p in board.iterdir()) == ["eval", "train"]
    trial = tt.create_trial(tmp_path / "trial")
    run = events(board / "train")
    assert scalars(run, "loss") == [(s, pytest.approx(1.0 / (s + 1))) for s in range(6)]  # type: ignore[comparison-overlap]
    assert scalars(events(board / "eval"), "loss") == [(0, 2.0), (1, 3.0), (2, 4.0)]
    assert [v for _, v in scalars(run, "fc.weight_grad/max")] == [float(s) for s in range(6)]
    assert "fc.weight_grad/l2" in run.Tags()["scalars"]
    histograms = run.Histograms("fc.weight")
    assert [h.step for h in histograms] == list(range(6))
    saved = trial.tensor("fc.weight").value(5)
    last = histograms[-1].histogram_value
    counts, edges = np.histogram(saved, bins=30)
    assert last.num == saved.size and last.min == saved.min() and last.max == saved.max()
    assert list(last.bucket) == counts.tolist()
    np.testing.assert_allclose(list(last.bucket_limit), edges[1:])


def test_converting_a_trial_after_the_fact_gives_the_same_events(tmp_path: Path, capsys) -> None:
    train(tmp_path / "trial", tensorboard_dir=tmp_path / "live")
    assert cli(["tensorboard", str(tmp_path / "trial"), str(tmp_path / "after")]) == 0
    assert "wrote 9 steps" in capsys.readouterr().out
    for mode in ("train", "eval"):
        live, after = events(tmp_path / "live" / mode), events(tmp_path / "after" / mode)
        assert live.Tags()["scalars"] == after.Tags()["scalars"]
        for tag in live.Tags()["scalars"]:
            assert scalars(live, tag) == scalars(after, tag)
        assert live.Tags()["histograms"] == after.Tags()["histograms"]
    done = tt.tensorboard.export_trial(tmp_path / "trial", tmp_path / "flat", histograms=False)
    assert (
        done["histograms"] == 0
        and done["scalars"] == 6 * 3 + 3
        and done["runs"]
        == [
            "eval",
            "train",
        ]
    )


def test_tensorboard_output_is_checked_early_and_its_failures_never_stop_training(
    tmp_path: Path, s3_bucket
) -> None:
    with pytest.raises(InvalidConfigError, match="needs tensorboard_dir"):
        tt.Hook(f"s3://{s3_bucket}/t", export_tensorboard=True)
    with pytest.raises(InvalidConfigError, match="export_tensorboard must be True or False"):
        tt.Hook(tmp_path / "x", export_tensorboard="yes")  # type: ignore[arg-type]
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    hook = train(tmp_path / "trial", tensorboard_dir=blocker / "board")
    status = hook.status
    assert status.writer.errors > 0 and "TensorBoard" in (status.writer.last_error or "")
    assert tt.create_trial(tmp_path / "trial").steps() == list(range(9))  # the trial is whole


def test_a_real_tensorboard_server_serves_the_scalars(tmp_path: Path) -> None:
    train(tmp_path / "trial", tensorboard_dir=tmp_path / "board")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tensorboard.main",
            "--logdir",
            str(tmp_path / "board"),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--load_fast",
            "false",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}/data/plugin/scalars/scalars?run=train&tag=loss"
    deadline = time.monotonic() + DEADLINE
    try:
        while True:  # poll the starting server (and its first load of the logdir)
            try:
                with urllib.request.urlopen(url, timeout=2) as response:
                    served = json.load(response)
                if served:
                    break
            except (urllib.error.URLError, ConnectionError, ValueError):
                pass
            assert server.poll() is None, "tensorboard exited"
            assert time.monotonic() < deadline, "tensorboard never served the scalars"
            time.sleep(0.2)
    finally:
        server.terminate()
        server.wait(30)
    assert [(step, value) for _, step, value in served] == [
        (s, pytest.approx(1.0 / (s + 1))) for s in range(6)
    ]
