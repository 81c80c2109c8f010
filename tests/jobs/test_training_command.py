"""How a job starts training with the hook attached (``training_command``): a Python script
through ``-m tensortap.attach``; a ``torchrun`` launcher starts each of its ranks that way
(issue 46: ``tensortap run -- torchrun train.py`` guarded no rank); anything else as given."""

from __future__ import annotations

import os
import sys

import pytest

from tensortap.jobs._job import training_command

ATTACH = ["-m", "tensortap.attach", "--config", "hook.json"]
TORCHRUN = os.path.join(os.path.dirname(sys.executable), "torchrun")
RUN = [sys.executable, "-m", "torch.distributed.run"]


def test_a_python_script_is_attached() -> None:
    assert training_command(["python", "train.py", "--lr", "1"], "hook.json") == [
        sys.executable,
        *ATTACH,
        "train.py",
        "--lr",
        "1",
    ]
    assert training_command(["bash", "train.sh"], "hook.json") == ["bash", "train.sh"]


@pytest.mark.parametrize(
    ("given", "options", "script"),
    [
        (["torchrun", "--standalone", "--nproc_per_node", "2", "train.py", "--lr", "1"],
         ["--standalone", "--nproc_per_node", "2"], ["train.py", "--lr", "1"]),
        ([TORCHRUN, "--nproc-per-node=2", "--nnodes", "1", "train.py"],
         ["--nproc-per-node=2", "--nnodes", "1"], ["train.py"]),
        (["python", "-m", "torch.distributed.run", "--standalone", "train.py", "x.py"],
         ["--standalone"], ["train.py", "x.py"]),
        # the script's own options named like the launcher's stay the script's
        (["torchrun", "train.py", "--nproc_per_node", "4", "-m", "foo"],
         [], ["train.py", "--nproc_per_node", "4", "-m", "foo"]),
    ],
)  # fmt: skip
def test_torchrun_starts_each_rank_attached(
    given: list[str], options: list[str], script: list[str]
) -> None:
    pytest.importorskip("torch.distributed.run")
    assert training_command(given, "hook.json") == [*RUN, *options, *ATTACH, *script]


@pytest.mark.parametrize(
    "given",
    [
        ["torchrun", "--standalone", "-m", "mypackage.train", "--lr", "1"],  # a module
        ["torchrun", "--no-python", "./train.sh"],
        ["torchrun", "--run-path", "train.py"],
        ["torchrun", "--standalone", "-m", "tensortap.attach", "--config", "h", "train.py"],
        ["/opt/other-venv/bin/torchrun", "train.py"],  # not this interpreter's: no tensortap
        ["torchrun", "--no-such-option", "train.py"],  # the launcher will say what is wrong
        ["torchrun"],
    ],
)
def test_a_launcher_told_otherwise_runs_as_given(given: list[str]) -> None:
    pytest.importorskip("torch.distributed.run")
    assert training_command(given, "hook.json") == given


ACCELERATE = os.path.join(os.path.dirname(sys.executable), "accelerate")
LAUNCH = [sys.executable, "-m", "accelerate.commands.launch"]


@pytest.mark.parametrize(
    ("given", "options", "script"),
    [
        (["accelerate", "launch", "--cpu", "--num_processes", "2", "train.py", "--lr", "1"],
         ["--cpu", "--num_processes", "2"], ["train.py", "--lr", "1"]),
        ([ACCELERATE, "launch", "train.py"], [], ["train.py"]),
        (["accelerate-launch", "--mixed_precision", "no", "train.py", "-m", "x"],
         ["--mixed_precision", "no"], ["train.py", "-m", "x"]),
    ],
)  # fmt: skip
def test_accelerate_launch_starts_each_process_attached(
    given: list[str], options: list[str], script: list[str]
) -> None:
    """Issue 46: ``tensortap run -- accelerate launch train.py`` ran as given, so no process
    was attached (nothing recorded, nothing guarded)."""
    pytest.importorskip("accelerate.commands.launch")
    assert training_command(given, "hook.json") == [*LAUNCH, *options, *ATTACH, *script]


@pytest.mark.parametrize(
    "given",
    [
        ["accelerate", "launch", "-m", "mypackage.train"],
        ["accelerate", "launch", "--no_python", "./train.sh"],
        ["accelerate", "env"],
        ["accelerate", "launch", "--no-such-option", "train.py"],
        ["/opt/other-venv/bin/accelerate", "launch", "train.py"],
    ],
)
def test_an_accelerate_command_told_otherwise_runs_as_given(given: list[str]) -> None:
    pytest.importorskip("accelerate.commands.launch")
    assert training_command(given, "hook.json") == given
