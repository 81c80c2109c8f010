"""No process of a job's training outlives its supervisor: a launcher's children (``bash
train.sh``, ``torchrun --nproc_per_node 2``, ``accelerate launch``) end with it, also when it is SIGKILLed and can
clean nothing up (issue 45, item 5)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tensortap.jobs import DebuggerHookConfig, Rule, TrainingJob

HERE = Path(__file__).parent
TRAIN_SCRIPT = HERE.parent / "jobs" / "train_script.py"
DEADLINE = 120.0

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="reads the process tree from /proc"
)


def _parents() -> dict[int, tuple[int, str]]:
    """Every live process: its parent and state (zombies are dead), read from /proc."""
    found: dict[int, tuple[int, str]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        found[int(entry)] = (int(fields[1]), fields[0])
    return found


def tree(root: int) -> set[int]:
    """The live processes below ``root`` (not ``root`` itself)."""
    parents = _parents()
    below: set[int] = set()
    todo = [root]
    while todo:
        pid = todo.pop()
        for child, (parent, state) in parents.items():
            if parent == pid and child not in below and state != "Z":
                below.add(child)
                todo.append(child)
    return below


def alive(pids: set[int]) -> set[int]:
    """Those of ``pids`` still running (not zombies)."""
    parents = _parents()
    return {p for p in pids if p in parents and parents[p][1] != "Z"}


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def poll(condition, what: str) -> None:
    end = time.monotonic() + DEADLINE
    while not condition():
        assert time.monotonic() < end, what
        time.sleep(0.05)


def start(tmp_path: Path, command: list[str]) -> tuple[Path, int]:
    """``tensortap run --no-wait -- COMMAND``: the job and its supervisor's pid."""
    runs = tmp_path / "runs"
    started = subprocess.run(
        [
            sys.executable,
            "-m",
            "tensortap.cli",
            "run",
            "--no-wait",
            "-o",
            str(runs),
            "--",
            *command,
        ],
        capture_output=True,
        text=True,
        timeout=DEADLINE,
    )
    assert started.returncode == 0, started.stderr
    (job_dir,) = [p for p in runs.iterdir() if p.is_dir()]
    supervisor = int((job_dir / "supervisor.pid").read_text())
    return job_dir, supervisor


def kill_and_expect_no_survivor(supervisor: int, running: set[int]) -> None:
    os.kill(supervisor, signal.SIGKILL)
    poll(lambda: not alive(running), f"left running: {[cmdline(p) for p in alive(running)]}")


def test_a_shell_wrappers_trainer_ends_with_a_killed_supervisor(tmp_path: Path) -> None:
    script = tmp_path / "train.sh"
    # the trainer as a child of the shell, not exec'd: what `bash train.sh` usually does
    script.write_text(
        f'"{sys.executable}" "{TRAIN_SCRIPT}" --steps 1000000 --sleep 0.01\necho done\n'
    )
    job_dir, supervisor = start(tmp_path, ["bash", str(script)])
    poll(
        lambda: any("train_script.py" in cmdline(p) for p in tree(supervisor)),
        "the trainer never started",
    )
    running = tree(supervisor)
    trainer = {p for p in running if "train_script.py" in cmdline(p)}
    assert trainer and any(cmdline(p).startswith("bash") for p in running)
    kill_and_expect_no_survivor(supervisor, running)
    assert TrainingJob.attach(job_dir).summary()["status"] == "Failed"


@pytest.mark.skipif(
    shutil.which("torchrun") is None and not Path(sys.executable).with_name("torchrun").exists(),
    reason="torchrun is not installed",
)
def test_torchrun_ranks_end_with_a_killed_supervisor(tmp_path: Path) -> None:
    pytest.importorskip("torch.distributed")
    torchrun = str(Path(sys.executable).with_name("torchrun"))
    command = [torchrun, "--standalone", "--nproc_per_node", "2", str(HERE / "ddp_forever.py")]
    job_dir, supervisor = start(tmp_path, command)

    def ranks() -> set[int]:
        return {p for p in tree(supervisor) if "ddp_forever.py" in cmdline(p)}

    # the agent and its two ranks (each rank's command line names the script too)
    poll(lambda: len(ranks()) >= 3, "torchrun never started its two ranks")
    running = tree(supervisor)
    kill_and_expect_no_survivor(supervisor, running)
    assert TrainingJob.attach(job_dir).summary()["status"] == "Failed"


@pytest.mark.skipif(
    not Path(sys.executable).with_name("accelerate").exists(), reason="accelerate is not installed"
)
def test_accelerate_launchs_trainer_ends_with_a_killed_supervisor(tmp_path: Path) -> None:
    """``accelerate launch`` starts the script as its child (on CPU, its simple launcher)."""
    accelerate = str(Path(sys.executable).with_name("accelerate"))
    command = [accelerate, "launch", "--cpu", "--num_processes", "1", "--num_machines", "1",
               "--mixed_precision", "no", "--dynamo_backend", "no",
               str(TRAIN_SCRIPT), "--steps", "1000000", "--sleep", "0.01"]  # fmt: skip
    job_dir, supervisor = start(tmp_path, command)

    def trainer() -> set[int]:
        return {p for p in tree(supervisor) if "train_script.py" in cmdline(p)}

    # the launcher and the trainer it started (both name the script on their command line)
    poll(lambda: len(trainer()) >= 2, "accelerate never started the trainer")
    running = tree(supervisor)
    assert any("accelerate" in cmdline(p) for p in running)
    kill_and_expect_no_survivor(supervisor, running)
    assert TrainingJob.attach(job_dir).summary()["status"] == "Failed"


SPAWNING_RULE = """
import os
import subprocess

from tensortap.rules import Rule


class StartsADaemon(Rule):
    \"\"\"Starts a process in a session of its own at its first step and never ends it.\"\"\"

    def __init__(self, base_trial, pid_file: str = ""):
        super().__init__(base_trial, other_trials=None)
        self.pid_file = pid_file
        self.started = False

    def invoke_at_step(self, step):
        if not self.started:
            self.started = True
            child = subprocess.Popen(["sleep", "1000"], start_new_session=True)
            with open(self.pid_file, "w") as f:
                f.write(str(child.pid))
        return False
"""


def test_what_a_rule_started_ends_with_its_job(tmp_path: Path) -> None:
    """A custom rule's process starts a daemon in a session of its own; once the job ended,
    it is gone too (the rule process's keeper ends what it left running)."""
    rules = tmp_path / "spawning_rule.py"
    rules.write_text(SPAWNING_RULE)
    pid_file = tmp_path / "daemon.pid"
    job = TrainingJob(
        command=[sys.executable, str(TRAIN_SCRIPT), "--steps", "5"],
        output_path=tmp_path / "runs",
        debugger_hook_config=DebuggerHookConfig(hook_parameters={"save_interval": "1"}),
        rules=[Rule.custom("StartsADaemon", rules, rule_parameters={"pid_file": str(pid_file)})],
    )
    job.fit(wait=False)
    summary = job.wait(timeout=DEADLINE, logs=False)
    assert summary["status"] == "Completed", summary
    daemon = int(pid_file.read_text())
    poll(lambda: not alive({daemon}), "the rule's daemon outlived its job")
