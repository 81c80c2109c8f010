"""Following a job from its record, running or ended: its summary (a job whose supervisor died is
finalised on record), SageMaker's ``describe`` answers, its logs, stopping it, and
:class:`AttachedJob` (``TrainingJob.attach``). :class:`~tensortap.jobs._job.TrainingJob` asks
the same questions of the job it started."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Mapping
from typing import Any, TextIO

from tensortap.exceptions import InvalidConfigError
from tensortap.jobs._live import LiveView
from tensortap.jobs._record import JobRecord, write_json

FINISHED = ("Completed", "Failed", "Stopped")
IN_PROGRESS = "InProgress"
SUPERVISOR_PID = "supervisor.pid"
#: The most of a log ``logs()`` answers: its end.
MAX_LOG_BYTES = 64 * 1024 * 1024


class JobQueries:
    """What one can ask of a job, running or ended (all read from its record)."""

    record: JobRecord

    def wait(
        self,
        timeout: float | None = None,
        logs: bool = True,
        out: TextIO | None = None,
        training_output: bool = True,
    ) -> dict[str, Any]:
        """Follow the job until it ends (or ``timeout`` seconds pass); with ``logs``, show
        the live view (with ``training_output``, the training script's own output as it
        comes, between the rule events) and then the summary. Returns the summary."""
        return _wait(self.record, timeout, out, training_output, logs)

    def rule_job_summary(self) -> list[dict[str, Any]]:
        """Each rule's RuleConfigurationName, RuleEvaluationStatus, StatusDetails and
        LastModifiedTime."""
        return _rule_job_summary(self.record)

    def describe(self) -> dict[str, Any]:
        return _describe(self.record)

    def describe_rule_execution_jobs(self) -> list[dict[str, Any]]:
        return _describe_rule_jobs(self.record)

    def logs(self, rule: str | None = None) -> str:
        """The log of ``rule`` (its configuration name), or of training."""
        return _logs(self.record, rule)

    @property
    def name(self) -> str:
        """The job's name (``estimator.latest_training_job.name`` in the seeds)."""
        return self.record.name

    def debugger_artifacts_path(self) -> str:
        """The trial the hook wrote (``create_trial`` opens it)."""
        return self.record.trial_location

    latest_job_debugger_artifacts_path = debugger_artifacts_path

    @property
    def latest_training_job(self) -> JobQueries:
        """The job itself (the seeds call ``estimator.latest_training_job.rule_job_summary()``)."""
        return self

    def summary(self) -> dict[str, Any]:
        return job_summary(self.record)

    def stop(self) -> None:
        """Stop training (at its next step boundary; terminated after the grace period)."""
        _stop(self.record)

    @property
    def job_dir(self) -> str:
        return str(self.record.dir)


class AttachedJob(JobQueries):
    """A job followed from its record (``TrainingJob.attach``): the same questions."""

    def __init__(self, record: JobRecord) -> None:
        record.job()  # it is a job directory
        self.record = record
        self.job_name = record.name


def job_summary(record: JobRecord) -> dict[str, Any]:
    """The job's summary. Before the supervisor writes one, its rules are listed as
    InProgress; once the supervisor is gone without finishing it, the record is finalised.
    A ``summary.json`` that cannot be read raises its JobDocumentError (or StorageError) and
    is left as it is: never written over."""
    summary = _written(record) or _starting(record)
    if summary.get("status") not in FINISHED and not _supervisor_alive(record):
        summary = _written(record) or summary  # it may have finished just now
        if summary.get("status") not in FINISHED:
            summary = _finalise_orphaned(record, summary)
    return summary


def _written(record: JobRecord) -> dict[str, Any] | None:
    """What the supervisor wrote (decoded), None before it wrote anything."""
    found = record.read_summary()
    return None if found is None else found.summary


def _starting(record: JobRecord) -> dict[str, Any]:
    rules = [
        {
            "RuleConfigurationName": r["name"],
            "RuleEvaluationStatus": IN_PROGRESS,
            "StatusDetails": "",
            "log": str(record.rule_log(r["name"])),
        }
        for r in (record.job().get("rules", []) if record.exists() else [])
    ]
    return {"job": record.name, "status": "Starting", "rules": rules}


def _finalise_orphaned(record: JobRecord, summary: dict[str, Any]) -> dict[str, Any]:
    """A job whose supervisor died (SIGKILL, OOM, a reboot) is ended on record: Failed, and
    each unfinished rule Error, with the reason. Its children died with it."""
    reason = (
        "the job's supervisor died before the job ended (killed?); see "
        f"{record.dir / 'logs' / 'supervisor.log'}"
    )
    for rule in summary.get("rules", []):
        if rule.get("RuleEvaluationStatus") == IN_PROGRESS:
            rule["RuleEvaluationStatus"] = "Error"
            rule["StatusDetails"] = reason
    training = summary.get("training") or {}
    if training.get("status") in (None, IN_PROGRESS):
        training["status"] = "Failed"
    summary = {**summary, "status": "Failed", "error": reason, "training": training}
    write_json(record.summary_file, {**summary, "updated": time.time()})
    record.append_event("job_finalised", reason=reason)
    return summary


def _wait(
    record: JobRecord,
    timeout: float | None,
    out: TextIO | None,
    training_output: bool,
    logs: bool,
) -> dict[str, Any]:
    """Follow the job until it ends (or ``timeout`` seconds pass); returns its summary."""
    deadline = None if timeout is None else time.monotonic() + timeout
    view = LiveView(record, out or sys.stdout, training_output) if logs else None
    while True:
        summary = job_summary(record)
        if view is not None:
            view.update(summary)
        if summary.get("status") in FINISHED:
            if view is not None:
                view.finish(summary)
            return summary
        if deadline is not None and time.monotonic() >= deadline:
            return summary
        time.sleep(0.25)


def _supervisor_alive(record: JobRecord) -> bool:
    try:  # read as the job's files are: a FIFO planted there hung `tensortap summary`
        pid = int(record.read(record.dir / SUPERVISOR_PID, 32))
    except (OSError, ValueError):
        return True  # not started yet
    if pid <= 0:  # 0 and -1 name process groups, never a supervisor
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie (our own child, not reaped yet) is gone too
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            return f.read().split(") ", 1)[1][:1] != "Z"
    except OSError:
        return True


def _rule_job_summary(record: JobRecord) -> list[dict[str, Any]]:
    keys = ("RuleConfigurationName", "RuleEvaluationStatus", "StatusDetails", "LastModifiedTime")
    return [{k: r.get(k) for k in keys} for r in job_summary(record).get("rules", [])]


def _describe(record: JobRecord) -> dict[str, Any]:
    job = record.job()
    summary = job_summary(record)
    return {
        "TrainingJobName": job.get("name", record.name),
        "TrainingJobStatus": summary.get("status"),
        "SecondaryStatus": _secondary_status(record, summary),
        "ExitCode": (summary.get("training") or {}).get("exit_code"),
        "Command": job.get("user_command", job.get("command")),
        "JobDir": str(record.dir),
        "DebuggerArtifactsPath": record.trial_location,
        "HookConfig": job.get("hook_config"),
        "DebugRuleConfigurations": job.get("rules", []),
        "DebugRuleEvaluationStatuses": _rule_job_summary(record),
        "TrainingLog": str(record.training_log),
    }


def _secondary_status(record: JobRecord, summary: Mapping[str, Any]) -> str:
    """SageMaker's ``SecondaryStatus`` of the job: Starting, Training (until the rules have
    judged the last step), Stopping, then Completed, Failed or Stopped."""
    status = str(summary.get("status"))
    if status in FINISHED or status == "Starting":
        return status
    return "Stopping" if record.stop_file.exists() else "Training"


def _describe_rule_jobs(record: JobRecord) -> list[dict[str, Any]]:
    out = []
    for rule in job_summary(record).get("rules", []):
        status = rule.get("RuleEvaluationStatus")
        entry = {
            "RuleName": rule.get("RuleConfigurationName"),
            "RuleStatus": status,
            "RuleJobName": f"{record.name}-{rule.get('RuleConfigurationName')}",
            "RuleLog": rule.get("log"),
        }
        if status in ("IssuesFound", "Error", "NoData"):
            entry["FailureReason"] = rule.get("StatusDetails")
        out.append(entry)
    return out


def _logs(record: JobRecord, rule: str | None) -> str:
    path = record.training_log if rule is None else record.rule_log(rule)
    if rule is not None and not path.exists():
        names = [r["name"] for r in record.job().get("rules", [])]
        if rule not in names:
            raise InvalidConfigError(f"the job has no rule {rule!r}; its rules are {names}")
    try:  # read as the job's files are: a regular file of the job's own, its last 64 MiB
        return record.read(path, MAX_LOG_BYTES, tail=True).decode("utf-8", errors="replace")
    except FileNotFoundError:
        return ""


def _stop(record: JobRecord) -> None:
    from tensortap.core._stop import request_stop

    request_stop(record.stop_file, "stopped by the user")
    record.append_event("stop_asked", by="user")
