"""The process that runs one job: the training process and the rule processes beside it.

``python -m tensortap.jobs._supervisor JOB_DIR``, started detached by ``TrainingJob.fit`` so the
job outlives the terminal that started it. It

- starts training with ``$TENSORTAP_CONFIG`` pointing at the job's hook configuration, its
  output in ``logs/training.log``;
- starts the rule hosts (all built-in rules in one, each custom rule in its own);
- when the stop file appears (a rule's StopTraining action, or ``TrainingJob.stop``), gives
  training ``grace`` seconds to stop at a step boundary, then terminates it (SIGTERM, then
  SIGKILL 10 s later);
- when training ends, however it ends, seals the trial (end markers for workers that died
  without writing one) so the rules finish the published steps and end;
- keeps ``summary.json`` current and appends the job's events.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import IO, Any

from tensortap.core._process_tree import end_tree, keeper_command
from tensortap.core._stop import request_stop
from tensortap.exceptions import FormatError, InvalidConfigError, StorageError
from tensortap.format._documents import decode_worker_info
from tensortap.format._layout import WORKERS_PREFIX, worker_info_key
from tensortap.hook._config import CONFIG_ENV, JOB_ENV
from tensortap.jobs._actions import StopTraining
from tensortap.jobs._failure import describe_failure
from tensortap.jobs._record import JobRecord, write_json
from tensortap.jobs._rule_host import STOPPED, TRAINING_ENDED_FILE
from tensortap.jobs._specs import JobRule, rules_for_framework
from tensortap.rules._verdict import job_diagnosis
from tensortap.storage import open_store
from tensortap.writer._seal import seal_trial

IN_PROGRESS = "InProgress"
KILL_AFTER = 10.0


def tail(path: str | os.PathLike[str], lines: int = 20) -> str:
    """The last ``lines`` lines of a text file ('' if it does not exist)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 16384))
            data = f.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(data.splitlines()[-lines:])


def die_with_parent(parent: int) -> Callable[[], None] | None:
    """A ``preexec_fn`` making the child die (SIGKILL) when the supervisor dies, however it
    dies. Linux only (elsewhere: None). The child is a keeper (``core._process_tree``): once
    started it trades this signal for one it catches, and ends the command's whole tree."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        prctl = libc.prctl
    except (OSError, AttributeError):
        return None

    def arm() -> None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:  # the supervisor died before prctl took effect
            os.kill(os.getpid(), signal.SIGKILL)

    return arm


_PR_SET_PDEATHSIG = 1


def _cannot_start(code: int, log: os.PathLike[str]) -> str:
    """The keeper's "cannot start ..." line, when it could not start the command (code 127)."""
    if code != 127:
        return ""
    last = tail(log, 1)
    return last if last.startswith("cannot start ") else ""


@dataclass
class _Child:
    name: str
    proc: subprocess.Popen[bytes]
    log: IO[bytes]
    rules: list[str] = field(default_factory=list)
    term_at: float | None = None


def written_by(location: str) -> tuple[bool, str | None]:
    """Whether a hook has begun writing the trial at ``location``, and the framework it said
    it watches (``worker.json``; None for the framework-free hook)."""
    try:
        store = open_store(location)
        workers = sorted(store.list_dir(WORKERS_PREFIX))
    except (StorageError, OSError, InvalidConfigError):
        return False, None
    for worker in workers:
        key = worker_info_key(worker)
        try:
            info = decode_worker_info(store.get(key), key)
        except KeyError:
            continue  # its directory is written first: its worker.json follows
        except (FormatError, StorageError):
            return True, None
        framework = info.get("framework")
        return True, framework if isinstance(framework, str) else None
    return False, None


class Supervisor:
    def __init__(self, record: JobRecord) -> None:
        self.record = record
        self.job = record.job()
        self.rules = [JobRule.from_dict(r) for r in self.job["rules"]]
        # rules chosen once the trial says which framework writes it (None: nothing to choose)
        by_framework = self.job.get("rules_by_framework") or {}
        self.rules_by_framework: dict[str, list[JobRule]] | None = (
            {fw: [JobRule.from_dict(r) for r in chosen] for fw, chosen in by_framework.items()}
            if by_framework
            else None
        )
        every = [*self.rules, *(r for rs in (self.rules_by_framework or {}).values() for r in rs)]
        graces = [a.grace_secs for r in every for a in r.actions if isinstance(a, StopTraining)]
        self.grace = float(self.job.get("stop_grace_secs") or max(graces, default=60.0))
        self.rule_timeout = float(self.job.get("rule_timeout_secs", 300.0))
        self.training: _Child | None = None
        self.hosts: list[_Child] = []
        self.training_status = IN_PROGRESS
        self.exit_code: int | None = None
        self.log_tail = ""  # the end of the training log, when training failed
        self.failure: dict[str, Any] | None = None  # how it failed (jobs._failure)
        self.stop_seen: float | None = None
        self.ended_at: float | None = None
        self.started = time.time()
        self._last_summary: dict[str, Any] | None = None
        self._env: dict[str, str] = {}  # the environment rule processes start with

    # -- starting --
    def _spawn(self, name: str, argv: list[str], log_path: str, env: dict[str, str]) -> _Child:
        """``argv`` under a keeper (``core._process_tree``): the whole tree it starts (a
        launcher's children too) ends with the supervisor, even one killed with SIGKILL."""
        log = open(log_path, "ab")  # noqa: SIM115 - closed when the child is reaped
        proc = subprocess.Popen(
            keeper_command(argv),
            cwd=self.job.get("cwd") or None,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            preexec_fn=die_with_parent(os.getpid()),
        )
        return _Child(name, proc, log)

    def start(self) -> None:
        record = self.record
        # The job's environment values came with this process's own environment (job.json
        # keeps their names only); older records kept the values themselves.
        old = self.job.get("environment")
        env = {**os.environ, **(old if isinstance(old, dict) else {})}
        env[CONFIG_ENV] = str(record.hook_file)
        env[JOB_ENV] = str(record.dir)  # a hook the script makes writes the job's trial
        env["PYTHONUNBUFFERED"] = "1"
        try:
            self.training = self._spawn(
                "training", self.job["command"], str(record.training_log), env
            )
        except OSError as exc:  # the command does not exist or cannot run
            self.training = None
            message = f"cannot start {self.job['command'][0]}: {exc}"
            with open(record.training_log, "a", encoding="utf-8") as training_log:
                training_log.write(message + "\n")
            self._training_ended(127, message)
        else:
            record.append_event(
                "training_started", pid=self.training.proc.pid, command=self.job["command"]
            )
        if self.rules_by_framework is None:
            self._start_rules(env)
        else:
            self._env = env  # the rules start once the framework is known (_choose_rules)

    def _start_rules(self, env: dict[str, str]) -> None:
        record = self.record
        builtin = [r.name for r in self.rules if r.is_builtin]
        if self.job.get("rule_processes") == "per_rule":  # measured in bench/bench_jobs.py
            groups = [[r.name] for r in self.rules]
        else:
            groups = [builtin] if builtin else []
            groups += [[r.name] for r in self.rules if not r.is_builtin]
        host_env = {k: v for k, v in env.items() if k not in (CONFIG_ENV, JOB_ENV)}
        for names in groups:
            argv = [sys.executable, "-m", "tensortap.jobs._rule_host", str(record.dir), *names]
            log = record.dir / "logs" / f"rule-host-{len(self.hosts)}.log"
            child = self._spawn("rules", argv, str(log), host_env)
            child.rules = names
            self.hosts.append(child)

    # -- running --
    def run(self) -> int:
        self.record.append_event("job_started", pid=os.getpid())
        signal.signal(signal.SIGTERM, self._on_term)
        try:
            self._run()
        except BaseException as exc:  # a bug here must still end the job on record
            self.record.append_event(
                "supervisor_error",
                message=f"{type(exc).__name__}: {exc}",
                traceback=traceback.format_exc(),
            )
            for child in [self.training, *self.hosts]:
                if child is not None and child.proc.poll() is None:
                    end_tree(child.proc.pid, group=child.proc.pid)
            self.training_status = "Failed"
            self.write_summary(final=True)
            raise
        return 0

    def _run(self) -> None:
        self.start()
        while True:
            self._watch_training()
            self._choose_rules()
            self._watch_hosts()
            self.write_summary()
            chosen = self.rules_by_framework is None
            if (
                chosen
                and self.ended_at is not None
                and all(h.proc.poll() is not None for h in self.hosts)
            ):
                break
            time.sleep(0.2)
        for child in [self.training, *self.hosts]:
            if child is not None:
                child.log.close()
        status = self.write_summary(final=True)["status"]
        self.record.append_event("job_ended", status=status)

    def _choose_rules(self) -> None:
        """Once training has begun writing the trial (or ended without), add the rules of the
        framework whose hook writes it, record them in job.json and start them."""
        if self.rules_by_framework is None:
            return
        written, framework = written_by(self.record.trial_location)
        if not written:
            if self.ended_at is None:
                return
            # nothing was saved: the framework the training process saw in use, if it said
            said = [e for e in self.record.iter_events() if e["event"] == "training_unwatched"]
            framework = said[-1].get("framework") if said else None
        chosen = rules_for_framework(self.rules_by_framework, framework)
        self.rules_by_framework = None
        known = {r.name for r in self.rules}
        self.rules += [r for r in chosen if r.name not in known]
        job = {**self.record.job(), "rules": [r.to_dict() for r in self.rules]}
        job["framework"] = framework
        write_json(self.record.job_file, job)
        self.job = job
        if written:
            which = f"the {framework} hook writes the trial" if framework else "no framework named"
        else:
            which = "nothing was saved" + (f" ({framework} in use)" if framework else "")
        self.record.append_event(
            "rules_chosen",
            framework=framework,
            rules=[r.name for r in chosen],
            message=f"{which}: its recommended rules run ({', '.join(r.name for r in chosen)})",
        )
        self._start_rules(self._env)

    def _on_term(self, signum: int, frame: Any) -> None:
        request_stop(self.record.stop_file, "the job was stopped")

    def _watch_training(self) -> None:
        child = self.training
        if self.ended_at is not None or child is None:
            return
        code = child.proc.poll()
        now = time.monotonic()
        if code is None:
            if self.stop_seen is None and self.record.stop_file.exists():
                self.stop_seen = now
                reason = self.record.stop_file.read_text(errors="replace").strip()
                self.record.append_event("stop_requested", reason=reason, grace_secs=self.grace)
            stopping = self.stop_seen is not None and child.term_at is None
            if stopping and now - self.stop_seen >= self.grace:  # type: ignore[operator]
                self.record.append_event("training_terminated", after_secs=self.grace)
                child.proc.terminate()
                child.term_at = now
            if child.term_at is not None and now - child.term_at >= KILL_AFTER:
                end_tree(child.proc.pid, group=child.proc.pid)
            return
        self._training_ended(code, _cannot_start(code, self.record.training_log))

    def _training_ended(self, code: int, error: str = "") -> None:
        self.exit_code = code
        if self.stop_seen is not None or self.record.stop_file.exists():
            self.training_status = STOPPED
        else:
            self.training_status = "Completed" if code == 0 and not error else "Failed"
        sealed = seal_trial(self.record.trial_location, f"training ended with exit code {code}")
        (self.record.dir / TRAINING_ENDED_FILE).write_text(str(code))
        self.ended_at = time.monotonic()
        if self.training_status == "Failed":
            self.log_tail = tail(self.record.training_log)
            self.failure = describe_failure(self.record, code, error)
        self.record.append_event(
            "training_ended",
            status=self.training_status,
            exit_code=code,
            sealed_workers=sealed,
            log_tail=self.log_tail,
            **({} if self.failure is None else {"failure": self.failure["text"]}),
        )

    def _watch_hosts(self) -> None:
        now = time.monotonic()
        for host in self.hosts:
            code = host.proc.poll()
            if code is not None:
                if code != 0:
                    self._host_died(host, code)
                continue
            if self.ended_at is not None and now - self.ended_at > self.rule_timeout:
                if host.term_at is None:
                    host.proc.terminate()
                    host.term_at = now
                elif now - host.term_at >= KILL_AFTER:
                    end_tree(host.proc.pid, group=host.proc.pid)

    def _host_died(self, host: _Child, code: int) -> None:
        """A rule process ended without finishing its rules' statuses (killed, or crashed)."""
        for name in host.rules:
            found, unreadable = self.record.read_rule_status(name)
            status = found or {"RuleConfigurationName": name}
            if status.get("RuleEvaluationStatus", IN_PROGRESS) != IN_PROGRESS:
                continue
            log = tail(host.log.name, 10)
            details = f"the rule process exited with code {code}: {log}"
            if unreadable:  # what it last wrote is replaced: say that it was unreadable
                details += f" (its last status could not be read: {'; '.join(unreadable)})"
            status.update(
                RuleEvaluationStatus="Error" if host.term_at is None else STOPPED,
                StatusDetails=details,
            )
            write_json(self.record.rule_status_file(name), status)
            self.record.append_event("rule_ended", rule=name, status=status["RuleEvaluationStatus"])

    # -- summary --
    def write_summary(self, final: bool = False) -> dict[str, Any]:
        rules = [rule_entry(self.record, spec.name) for spec in self.rules]
        training = self.training
        summary = {
            "job": self.job["name"],
            "status": self.training_status if final else IN_PROGRESS,
            "training": {
                "status": self.training_status,
                "exit_code": self.exit_code,
                "pid": None if training is None else training.proc.pid,
                "log": str(self.record.training_log),
                "log_tail": self.log_tail,
                "failure": self.failure,
            },
            "rules": rules,
            "trial": self.record.trial_location,
            "supervisor_pid": os.getpid(),
            "started": self.started,
        }
        summary["diagnosis"] = job_diagnosis(summary).to_dict()
        if summary != self._last_summary or final:
            self._last_summary = summary
            write_json(self.record.summary_file, {**summary, "updated": time.time()})
        return summary


def rule_entry(record: JobRecord, rule: str) -> dict[str, Any]:
    """A rule's entry of the job's summary: its status file, decoded; what could not be read
    of it is named in the entry's ``problems`` (shown wherever the summary is), never dropped
    unsaid. In progress until the rule writes a status."""
    status, problems = record.read_rule_status(rule)
    entry = status or {
        "RuleConfigurationName": rule,
        "RuleEvaluationStatus": IN_PROGRESS,
        "StatusDetails": "",
        "log": str(record.rule_log(rule)),
    }
    if problems:
        entry["problems"] = problems
    return entry


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m tensortap.jobs._supervisor JOB_DIR", file=sys.stderr)
        return 2
    return Supervisor(JobRecord(args[0])).run()


if __name__ == "__main__":
    sys.exit(main())
