"""``TrainingJob``: one call starts training with the debugger attached and the rules beside it.

::

    job = TrainingJob(entry_point="train.py", hyperparameters={"num_epochs": 3},
                      output_path="runs/", rules=[Rule.builtin(rule_configs.vanishing_gradient())])
    job.fit(wait=True)
    job.rule_job_summary()

Everything is validated when the job is built. ``fit`` writes the job's record (see
:mod:`tensortap.jobs._record`) and starts a detached supervisor process, so the job outlives the
terminal; ``TrainingJob.attach(job_dir)`` follows it again from anywhere (what one asks of a
job, running or ended, is read from its record: :mod:`tensortap.jobs._queries`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import os
import re
import secrets
import shutil
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, TextIO

from tensortap.exceptions import InvalidConfigError
from tensortap.jobs._checks import (
    check_cloud_only,
    check_command,
    check_job_name,
    check_settings,
)
from tensortap.jobs._queries import SUPERVISOR_PID, AttachedJob, JobQueries, job_summary
from tensortap.jobs._record import JobRecord, write_json
from tensortap.jobs._specs import (
    DebuggerHookConfig,
    Rule,
    TensorBoardOutputConfig,
    hook_config,
    rules_from_specification,
)

# followed from its record (re-exported: the CLI and tensortap.diagnosis import them from here)
__all__ = ["AttachedJob", "JobQueries", "TrainingJob", "job_summary", "training_command"]


def _hyperparameter_args(hyperparameters: Mapping[str, Any] | None) -> list[str]:
    args: list[str] = []
    for key, value in (hyperparameters or {}).items():
        if not isinstance(key, str) or not key:
            raise InvalidConfigError(f"hyperparameter names must be strings, got {key!r}")
        args += [f"--{key}", str(value)]
    return args


def training_command(command: Sequence[str], hook_file: str) -> list[str]:
    """The command that runs training with the hook attached: ``python script.py ...`` becomes
    ``python -m tensortap.attach --config HOOK script.py ...`` (zero code change; a bare
    ``python`` is the interpreter running tensortap); ``torchrun [options] script.py ...``
    (or ``python -m torch.distributed.run``) and ``accelerate launch [options] script.py ...``
    start each rank through the attach module the same way; any other command runs as given,
    with ``$TENSORTAP_CONFIG`` set for scripts that call ``get_hook``."""
    argv = list(command)
    if argv and argv[0] in ("python", "python3"):
        argv[0] = sys.executable  # the interpreter tensortap runs in (it imports tensortap)
    launched = _torchrun_ranks(argv, hook_file)
    if launched is None:
        launched = _accelerate_workers(argv, hook_file)
    if launched is not None:
        return launched
    if (
        len(argv) >= 2
        and os.path.basename(argv[0]).startswith("python")
        and argv[1].endswith(".py")
    ):
        return [argv[0], "-m", "tensortap.attach", "--config", hook_file, *argv[1:]]
    return argv


def _torchrun_ranks(argv: list[str], hook_file: str) -> list[str] | None:
    """``torchrun OPTIONS script.py ARGS`` as ``python -m torch.distributed.run OPTIONS -m
    tensortap.attach --config HOOK script.py ARGS`` (each rank attached), with the interpreter
    tensortap runs in; None for any other command, and for a launcher told to run a module or
    no Python (``-m``, ``--no-python``, ``--run-path``: run as given), or a ``torchrun`` that
    is not this interpreter's (its ranks could not import tensortap)."""
    if not argv:
        return None
    here = os.path.dirname(sys.executable)
    if argv[0] == "torchrun" or argv[0] == os.path.join(here, "torchrun"):
        options = argv[1:]
    elif (
        len(argv) >= 3
        and os.path.basename(argv[0]).startswith("python")
        and argv[1] == "-m"
        and argv[2] == "torch.distributed.run"
        and os.path.realpath(shutil.which(argv[0]) or argv[0]) == os.path.realpath(sys.executable)
    ):
        options = argv[3:]
    else:
        return None
    try:  # the launcher's own parser says where its options end and the script begins
        from torch.distributed.run import get_args_parser

        with contextlib.redirect_stderr(io.StringIO()):
            parsed = get_args_parser().parse_args(options)
    except (ImportError, SystemExit):
        return None
    if parsed.module or parsed.no_python or parsed.run_path:
        return None
    at = len(options) - len(parsed.training_script_args) - 1
    if at < 0 or options[at] != parsed.training_script:
        return None
    attach = ["-m", "tensortap.attach", "--config", hook_file]
    return [sys.executable, "-m", "torch.distributed.run", *options[:at], *attach, *options[at:]]


def _accelerate_workers(argv: list[str], hook_file: str) -> list[str] | None:
    """``accelerate launch OPTIONS script.py ARGS`` (or ``accelerate-launch``) as ``python -m
    accelerate.commands.launch OPTIONS -m tensortap.attach --config HOOK script.py ARGS`` with
    the interpreter tensortap runs in: every process it starts
    runs the script attached (its simple launcher, torchrun or DeepSpeed run the module as
    they ran the script). None for any other command, a launch told to run a module or no
    Python, or an ``accelerate`` that is not this interpreter's."""
    here = os.path.dirname(sys.executable)
    if len(argv) >= 2 and argv[0] in ("accelerate", os.path.join(here, "accelerate")):
        if argv[1] != "launch":
            return None
        options = argv[2:]
    elif argv and argv[0] in ("accelerate-launch", os.path.join(here, "accelerate-launch")):
        options = argv[1:]
    else:
        return None
    try:  # accelerate's own parser says where its options end and the script begins
        from accelerate.commands.launch import launch_command_parser

        with contextlib.redirect_stderr(io.StringIO()):
            parsed = launch_command_parser().parse_args(options)
    except (ImportError, SystemExit):
        return None
    if parsed.module or parsed.no_python:
        return None
    at = len(options) - len(parsed.training_script_args) - 1
    if at < 0 or options[at] != parsed.training_script:
        return None
    attach = ["-m", "tensortap.attach", "--config", hook_file]
    # this interpreter's launcher: its workers run with the interpreter that launched them
    launcher = [sys.executable, "-m", "accelerate.commands.launch"]
    return [*launcher, *options[:at], *attach, *options[at:]]


class TrainingJob(JobQueries):
    """A training run with the debugger attached and rules evaluated beside it.

    Give the training as ``entry_point`` (a script, run with this Python and
    ``hyperparameters`` as ``--name value`` arguments) or as ``command`` (an argument list such
    as ``["python", "train.py", "--epochs", "3"]``); ``source_dir`` is the directory the
    entry point lies in. ``rules_specification`` (the seeds' dictionaries) is accepted in
    place of ``rules``; SageMaker's cloud-only keywords are accepted and ignored.

    ``rules_by_framework`` (``{"xgboost": [...], "jax": [...], "*": [...]}``, such as
    :func:`tensortap.jobs._specs.recommended_rules` gives) adds the rules of the framework whose
    hook writes the trial, chosen when training starts writing it (``"*"``: any other); the
    hook saves what any of them reads.
    """

    def __init__(
        self,
        entry_point: str | os.PathLike[str] | None = None,
        hyperparameters: Mapping[str, Any] | None = None,
        output_path: str | os.PathLike[str] = "runs",
        debugger_hook_config: DebuggerHookConfig | None = None,
        rules: Sequence[Rule] | None = None,
        tensorboard_output_config: TensorBoardOutputConfig | None = None,
        job_name: str | None = None,
        command: Sequence[str] | None = None,
        rules_specification: Sequence[Mapping[str, Any]] | None = None,
        environment: Mapping[str, str] | None = None,
        stop_grace_secs: float | None = None,
        rule_timeout_secs: float = 300.0,
        rule_processes: str = "shared",
        python: str = sys.executable,
        base_job_name: str | None = None,
        source_dir: str | os.PathLike[str] | None = None,
        rules_by_framework: Mapping[str, Sequence[Rule]] | None = None,
        **cloud_only: Any,
    ) -> None:
        check_cloud_only(cloud_only)
        check_settings(environment, rule_timeout_secs, stop_grace_secs)
        if (entry_point is None) == (command is None):
            raise InvalidConfigError(
                "give the training as entry_point='train.py' or as command=['python', "
                "'train.py', ...], not both and not neither"
            )
        if entry_point is not None:
            script = Path(entry_point)
            if source_dir is not None:  # as on SageMaker: the entry point lies in source_dir
                script = Path(source_dir) / script
            if not script.is_file():
                inside = "" if source_dir is None else f" in source_dir {source_dir}"
                raise InvalidConfigError(f"entry_point {entry_point} is not a file{inside}")
            command = [python, str(script.resolve()), *_hyperparameter_args(hyperparameters)]
        assert command is not None
        check_command(command)
        self.command = list(command)
        if rules_specification is not None:
            rules = [*(rules or []), *rules_from_specification(rules_specification)]
        self.rules = list(rules or [])
        self.rules_by_framework = {
            str(framework): list(chosen) for framework, chosen in (rules_by_framework or {}).items()
        }
        for rule in self._every_rule():
            if not isinstance(rule, Rule):
                raise InvalidConfigError(
                    f"rules must be tensortap.jobs.Rule objects (Rule.builtin(...) or "
                    f"Rule.custom(...)), got {rule!r}"
                )
        for chosen in [*self.rules_by_framework.values(), []]:  # the rules one job runs
            names = [r.name for r in [*self.rules, *chosen]]
            duplicated = sorted({n for n in names if names.count(n) > 1})
            if duplicated:
                raise InvalidConfigError(
                    f"two rules are named {duplicated[0]!r}; give one a name (Rule.builtin(..., "
                    "name='...'))"
                )
        self.debugger_hook_config = debugger_hook_config or DebuggerHookConfig()
        self.tensorboard_output_config = tensorboard_output_config
        self.environment = dict(environment or {})
        if rule_processes not in ("shared", "per_rule"):
            raise InvalidConfigError(
                f"rule_processes must be 'shared' (built-in rules share one process) or "
                f"'per_rule', got {rule_processes!r}"
            )
        self.rule_processes = rule_processes
        self.stop_grace_secs = stop_grace_secs
        self.rule_timeout_secs = rule_timeout_secs
        if job_name is None:
            stem = (
                base_job_name
                or Path(self.command[1] if len(self.command) > 1 else self.command[0]).stem
            )
            stem = re.sub(r"[^A-Za-z0-9_.-]", "_", stem).lstrip("._-")[:80] or "job"
            job_name = f"{stem}-{datetime.now().strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(2)}"
        self.job_name = check_job_name(job_name)
        self.record = JobRecord(Path(output_path) / self.job_name)
        self.trial_location = self.debugger_hook_config.trial_location(
            self.job_name, str(self.record.trial_dir)
        )
        self.record._trial_location = self.trial_location
        # the hook configuration is made (and so validated) now, once
        self._hook_config = hook_config(
            self.trial_location, self.debugger_hook_config, self._every_rule(), None
        )

    def _every_rule(self) -> list[Rule]:
        """The rules, and those of every framework: the hook saves what any of them reads."""
        return [*self.rules, *(r for group in self.rules_by_framework.values() for r in group)]

    # -- starting --
    def fit(
        self,
        wait: bool = True,
        logs: bool = True,
        out: TextIO | None = None,
        training_output: bool = True,
    ) -> None:
        """Start the job. With ``wait``, follow it until it ends (with ``logs``, showing the
        live view, the training script's output unless ``training_output`` is false, and the
        summary); otherwise return at once."""
        record = self.record
        tensorboard = (
            None
            if self.tensorboard_output_config is None
            else (self.tensorboard_output_config.local_path or str(record.dir / "tensorboard"))
        )
        config = dataclasses.replace(
            self._hook_config, stop_file=str(record.stop_file), tensorboard_dir=tensorboard
        )
        record.create(
            {
                "name": self.job_name,
                "created": time.time(),
                "command": training_command(self.command, str(record.hook_file)),
                "user_command": self.command,
                "trial_location": self.trial_location,
                "cwd": os.getcwd(),
                # names only: values (secrets, tokens) reach the job through the supervisor's
                # own environment and are never written to disk
                "environment_names": sorted(self.environment),
                "rules": [r.to_dict() for r in self.rules],
                # chosen by the supervisor once the trial says which framework writes it
                "rules_by_framework": {
                    framework: [r.to_dict() for r in chosen]
                    for framework, chosen in self.rules_by_framework.items()
                },
                "hook_config": config.to_dict(),
                "tensorboard": tensorboard,
                "stop_grace_secs": self.stop_grace_secs,
                "rule_timeout_secs": self.rule_timeout_secs,
                "rule_processes": self.rule_processes,
            }
        )
        write_json(record.hook_file, config.to_dict())
        with open(record.dir / "logs" / "supervisor.log", "ab") as log:
            supervisor = subprocess.Popen(
                [sys.executable, "-m", "tensortap.jobs._supervisor", str(record.dir)],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,  # the job outlives this terminal
                env={**os.environ, **self.environment},
            )
        (record.dir / SUPERVISOR_PID).write_text(str(supervisor.pid))
        if wait:
            self.wait(logs=logs, out=out, training_output=training_output)

    @classmethod
    def attach(cls, job_dir: str | os.PathLike[str]) -> AttachedJob:
        """The job recorded at ``job_dir`` (running or ended)."""
        return AttachedJob(JobRecord(job_dir))
