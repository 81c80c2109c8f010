"""The keeper (``core._process_tree``) a job runs each command under: it ends as its command
ended, forwards SIGTERM to the whole tree, ends what a command leaves running, and kills the
whole tree when its parent dies."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tensortap.core._process_tree import (
    descendants,
    end_tree,
    guarded_keeper_command,
    keeper_command,
)

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="a subreaper and /proc are Linux's"
)
DEADLINE = 60.0


def poll(condition, what: str) -> None:
    end = time.monotonic() + DEADLINE
    while not condition():
        assert time.monotonic() < end, what
        time.sleep(0.02)


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] not in "ZX"


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        ("import sys; sys.exit(3)", 3),
        ("pass", 0),
        ("import os, signal; os.kill(os.getpid(), signal.SIGKILL)", -signal.SIGKILL),
        ("import os, signal; os.kill(os.getpid(), signal.SIGTERM)", -signal.SIGTERM),
    ],
)
def test_the_keeper_ends_as_its_command_ended(code: str, expected: int) -> None:
    done = subprocess.run(keeper_command([sys.executable, "-c", code]), timeout=DEADLINE)
    assert done.returncode == expected


def test_a_command_that_cannot_start_is_127_with_the_reason() -> None:
    done = subprocess.run(
        keeper_command(["no-such-command-x"]), capture_output=True, text=True, timeout=DEADLINE
    )
    assert done.returncode == 127
    assert done.stderr.startswith("cannot start no-such-command-x: ")


def test_what_a_command_leaves_running_is_ended(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    # the launcher starts a daemon in its own session and exits
    launcher = f"setsid sleep 1000 & echo $! > {pid_file}; exit 4"
    done = subprocess.run(keeper_command(["bash", "-c", launcher]), timeout=DEADLINE)
    assert done.returncode == 4
    left = int(pid_file.read_text())
    poll(lambda: not alive(left), "the launcher's daemon runs on")


def test_sigterm_reaches_the_trainer_below_a_shell(tmp_path: Path) -> None:
    got = tmp_path / "got"
    trainer = (
        "import signal, sys, time, pathlib\n"
        f"def stop(*_):\n    pathlib.Path({str(got)!r}).write_text('term'); sys.exit(0)\n"
        "signal.signal(signal.SIGTERM, stop)\n"
        f"pathlib.Path({str(got)!r} + '.ready').write_text('')\n"
        "while True: time.sleep(0.05)\n"
    )
    keeper = subprocess.Popen(
        keeper_command(["bash", "-c", f'"{sys.executable}" -c "$0"', trainer])
    )
    poll(lambda: Path(f"{got}.ready").exists(), "the trainer never started")
    keeper.send_signal(signal.SIGTERM)
    keeper.wait(timeout=DEADLINE)
    assert got.read_text() == "term"


def test_the_whole_tree_dies_with_the_keepers_parent_killed(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    command = ["bash", "-c", f"setsid sleep 1000 & echo $! > {pid_file}; sleep 1000"]
    # a supervisor stand-in: starts a keeper, says its pid, waits to be killed
    parent = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import subprocess, sys, time\n"
            "from tensortap.core._process_tree import keeper_command\n"
            "keeper = subprocess.Popen(keeper_command(sys.argv[1:]))\n"
            "print(keeper.pid, flush=True)\n"
            "time.sleep(1000)\n",
            *command,
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert parent.stdout is not None
    keeper = int(parent.stdout.readline())
    poll(lambda: pid_file.exists() and pid_file.read_text().strip(), "nothing started")
    hidden = int(pid_file.read_text())
    poll(lambda: hidden in descendants(keeper), "the daemon is not below the keeper")
    tree = [keeper, *descendants(keeper)]
    parent.kill()  # SIGKILL: it cleans nothing up
    parent.wait(timeout=DEADLINE)
    poll(lambda: not any(alive(p) for p in tree), "a process of the tree runs on")


def test_end_tree_kills_every_process_below(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    keeper = subprocess.Popen(
        keeper_command(["bash", "-c", f"setsid sleep 1000 & echo $! > {pid_file}; sleep 1000"])
    )
    poll(lambda: pid_file.exists() and pid_file.read_text().strip(), "nothing started")
    hidden = int(pid_file.read_text())
    poll(lambda: hidden in descendants(keeper.pid), "the daemon is not below the keeper")
    end_tree(keeper.pid)
    assert keeper.wait(timeout=DEADLINE) == -signal.SIGKILL
    poll(lambda: not alive(hidden), "the daemon runs on")


def test_elsewhere_than_linux_the_keepers_group_dies_with_its_parent(tmp_path: Path) -> None:
    """The keeper with Linux's means switched off (no subreaper, no /proc, no parent-death
    signal): it notices its parent's death by polling and kills its process group."""
    pid_file = tmp_path / "pid"
    keeper_file = keeper_command(["true"])[2]
    command = ["bash", "-c", f"sleep 1000 & echo $! > {pid_file}; sleep 1000"]
    elsewhere = (
        "import importlib.util, os, subprocess, sys, time\n"
        f"spec = importlib.util.spec_from_file_location('keeper', {keeper_file!r})\n"
        "keeper = importlib.util.module_from_spec(spec)\n"
        "spec.loader.exec_module(keeper)\n"
        "keeper.LINUX = False\n"
        "keeper.descendants = lambda root: []\n"
        "sys.exit(keeper.main(sys.argv[1:]))\n"
    )
    parent = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import subprocess, sys, time, os\n"
            "keeper = subprocess.Popen(sys.argv[1:4] + [str(os.getpid())] + sys.argv[4:])\n"
            "print(keeper.pid, flush=True)\n"
            "time.sleep(1000)\n",
            sys.executable,
            "-c",
            elsewhere,
            *command,
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert parent.stdout is not None
    keeper = int(parent.stdout.readline())
    poll(lambda: pid_file.exists() and pid_file.read_text().strip(), "nothing started")
    child = int(pid_file.read_text())
    parent.kill()
    parent.wait(timeout=DEADLINE)
    poll(lambda: not alive(child) and not alive(keeper), "the keeper's group runs on")


def test_a_leftover_that_ignores_sigterm_is_killed_after_the_grace(tmp_path: Path) -> None:
    """Nothing wakes the keeper then (no signal, no child ending): its own timeout must."""
    pid_file = tmp_path / "pid"
    keeper_file = keeper_command(["true"])[2]
    patched = (
        "import importlib.util, sys\n"
        f"spec = importlib.util.spec_from_file_location('keeper', {keeper_file!r})\n"
        "keeper = importlib.util.module_from_spec(spec)\n"
        "spec.loader.exec_module(keeper)\n"
        "keeper.LEFTOVER_GRACE = 1.0\n"
        "sys.exit(keeper.main(sys.argv[1:]))\n"
    )
    stubborn = f"trap '' TERM; sleep 1000 & echo $! > {pid_file}; exit 5"
    done = subprocess.run(
        [sys.executable, "-c", patched, str(os.getpid()), "bash", "-c", stubborn],
        timeout=DEADLINE,
    )
    assert done.returncode == 5
    assert not alive(int(pid_file.read_text()))


@pytest.mark.parametrize(("code", "expected"), [("import sys; sys.exit(3)", 3), ("pass", 0)])
def test_a_guarded_keeper_ends_as_its_command_ended(code: str, expected: int) -> None:
    done = subprocess.run(guarded_keeper_command([sys.executable, "-c", code]), timeout=DEADLINE)
    assert done.returncode == expected


def test_the_tree_dies_when_the_parent_and_its_children_are_killed_at_once(
    tmp_path: Path,
) -> None:
    """What Ray does to a cancelled task's worker: SIGKILL it and its direct children. A
    keeper that is a direct child dies before it can end its tree; a guarded one is not."""
    pid_file = tmp_path / "pid"
    command = ["bash", "-c", f"setsid sleep 1000 & echo $! > {pid_file}; sleep 1000"]
    parent = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import subprocess, sys, time\n"
            "from tensortap.core._process_tree import guarded_keeper_command\n"
            "guard = subprocess.Popen(guarded_keeper_command(sys.argv[1:]))\n"
            "print(guard.pid, flush=True)\n"
            "time.sleep(1000)\n",
            *command,
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert parent.stdout is not None
    guard = int(parent.stdout.readline())
    poll(lambda: pid_file.exists() and pid_file.read_text().strip(), "nothing started")
    hidden = int(pid_file.read_text())
    poll(lambda: hidden in descendants(guard), "the daemon is not below the guard")
    tree = descendants(guard)
    os.kill(guard, signal.SIGKILL)  # the parent's direct child, and the parent, at once
    parent.kill()
    parent.wait(timeout=DEADLINE)
    poll(lambda: not any(alive(p) for p in tree), "a process of the tree runs on")
