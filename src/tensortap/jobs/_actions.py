"""What a job does when a rule fires: stop training, roll it back, POST to a webhook, send an
email, run a command or call a Python function.

Actions are configured per rule (``Rule.builtin(..., actions=[StopTraining()])``) and run in
the rule's process when the rule first fires (``every_time=True`` for each firing), so a slow
webhook never slows training. A failing action is logged and recorded in the job's events; it
never ends the rule. Each action receives the finding as a dict: the job, the rule, the step
and mode, the message, the tensors, value and threshold.
"""

from __future__ import annotations

import importlib
import json
import os
import smtplib
import subprocess
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from email.message import EmailMessage
from typing import Any, ClassVar

from tensortap.core._rollback_request import REQUEST_FILE, request_rollback
from tensortap.core._stop import request_stop
from tensortap.exceptions import InvalidConfigError


@dataclass(frozen=True)
class ActionContext:
    """What an action may act on: the job's directory and its stop-request file."""

    job_dir: str
    stop_file: str

    @property
    def rollback_file(self) -> str:
        """The rollback-request file the training process watches (beside the stop file)."""
        return os.path.join(self.job_dir, REQUEST_FILE)


@dataclass(frozen=True)
class Action:
    """Base of every action; ``every_time`` runs it at each firing, not only the first."""

    kind: ClassVar[str] = ""
    every_time: bool = False

    def run(self, finding: Mapping[str, Any], context: ActionContext) -> str:
        """Do it; returns what was done (for the job's events). Raises on failure."""
        raise NotImplementedError

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, **asdict(self)}


@dataclass(frozen=True)
class StopTraining(Action):
    """Stop the training: the hook stops at the next step boundary (the script unwinds and
    exits with status 0); if the process is still running ``grace_secs`` later, the job
    terminates it."""

    kind: ClassVar[str] = "stop_training"
    grace_secs: float = 60.0

    def __post_init__(self) -> None:
        if not isinstance(self.grace_secs, (int, float)) or self.grace_secs < 0:
            raise InvalidConfigError(f"grace_secs must be a number >= 0, got {self.grace_secs!r}")

    def run(self, finding: Mapping[str, Any], context: ActionContext) -> str:
        reason = f"{finding['rule']} fired at step {finding['step']}: {finding['message']}"
        request_stop(context.stop_file, reason)
        return "asked training to stop at its next step"


@dataclass(frozen=True)
class RollbackTraining(Action):
    """Roll training back to its last good checkpoint before the step the rule fired at, and
    skip that step's batch: a :class:`tensortap.pytorch.Rollback` in the training script acts on
    it at its next step boundary (a script without one goes on as if nothing was asked; the
    request stays in the job's directory as ``rollback``)."""

    kind: ClassVar[str] = "rollback"

    def run(self, finding: Mapping[str, Any], context: ActionContext) -> str:
        request = {
            "step": finding.get("step"),
            "mode": finding.get("mode"),
            "mode_step": finding.get("mode_step"),
            "rule": finding.get("rule"),
            "reason": f"{finding.get('rule')} fired at step {finding.get('step')}: "
            f"{finding.get('message')}",
        }
        request_rollback(context.rollback_file, request)
        return f"asked training to roll back to before step {finding.get('step')}"


@dataclass(frozen=True)
class Webhook(Action):
    """POST the finding as JSON to ``url`` (http or https)."""

    kind: ClassVar[str] = "webhook"
    url: str = ""
    headers: Mapping[str, str] = field(default_factory=dict)
    timeout_secs: float = 10.0

    def __post_init__(self) -> None:
        if not isinstance(self.url, str) or not self.url.startswith(("http://", "https://")):
            raise InvalidConfigError(
                f"Webhook url must start with http:// or https://, got {self.url!r}"
            )
        object.__setattr__(self, "headers", dict(self.headers))

    def run(self, finding: Mapping[str, Any], context: ActionContext) -> str:
        body = json.dumps(finding, default=str).encode()
        request = urllib.request.Request(
            self.url,
            data=body,
            method="POST",
            headers={"Content-Type": "application/json", **self.headers},
        )
        with urllib.request.urlopen(request, timeout=self.timeout_secs) as response:
            return f"POSTed to {self.url}: HTTP {response.status}"


@dataclass(frozen=True)
class Email(Action):
    """Send the finding by email through an SMTP server. A password, if the server needs one,
    is read from the environment variable ``password_env`` (never stored in the job)."""

    kind: ClassVar[str] = "email"
    to: tuple[str, ...] | str = ()
    sender: str = "tensortap@localhost"
    smtp_host: str = "localhost"
    smtp_port: int = 25
    starttls: bool = False
    username: str | None = None
    password_env: str | None = None
    timeout_secs: float = 10.0

    def __post_init__(self) -> None:
        to = (self.to,) if isinstance(self.to, str) else tuple(self.to)
        if not to or not all(isinstance(a, str) and "@" in a for a in to):
            raise InvalidConfigError(
                f"Email needs to= one or more addresses such as 'me@example.com', got {self.to!r}"
            )
        object.__setattr__(self, "to", to)
        if not isinstance(self.smtp_port, int) or not 0 < self.smtp_port < 65536:
            raise InvalidConfigError(f"smtp_port must be a port number, got {self.smtp_port!r}")

    def run(self, finding: Mapping[str, Any], context: ActionContext) -> str:
        message = EmailMessage()
        message["From"] = self.sender
        message["To"] = ", ".join(self.to)  # a tuple once built
        message["Subject"] = (
            f"[tensortap] {finding['rule']} fired at step {finding['step']} ({finding['job']})"
        )
        message.set_content(
            f"{finding['message']}\n\n{json.dumps(finding, indent=2, default=str)}\n"
        )
        with smtplib.SMTP(self.smtp_host, self.smtp_port, timeout=self.timeout_secs) as smtp:
            if self.starttls:
                smtp.starttls()
            if self.username:
                smtp.login(self.username, os.environ.get(self.password_env or "", ""))
            smtp.send_message(message)
        return f"emailed {', '.join(self.to)} through {self.smtp_host}:{self.smtp_port}"


@dataclass(frozen=True)
class Command(Action):
    """Run a command (a list of arguments, no shell) with the finding as JSON on its standard
    input and in ``$TENSORTAP_FINDING``."""

    kind: ClassVar[str] = "command"
    argv: Sequence[str] | str = ()  # a tuple once made
    timeout_secs: float = 60.0

    def __post_init__(self) -> None:
        argv = tuple(self.argv) if not isinstance(self.argv, str) else (self.argv,)
        if not argv or not all(isinstance(a, str) for a in argv):
            raise InvalidConfigError(
                f"Command needs argv, a list of strings such as ['notify-send', 'rule fired'], "
                f"got {self.argv!r}"
            )
        object.__setattr__(self, "argv", argv)

    def run(self, finding: Mapping[str, Any], context: ActionContext) -> str:
        text = json.dumps(finding, default=str)
        done = subprocess.run(
            list(self.argv),
            input=text,
            text=True,
            capture_output=True,
            timeout=self.timeout_secs,
            env={**os.environ, "TENSORTAP_FINDING": text},
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(
                f"{self.argv[0]} exited with {done.returncode}: {done.stderr.strip()[-500:]}"
            )
        return f"ran {' '.join(self.argv)}"


@dataclass(frozen=True)
class Call(Action):
    """Call a Python function ``"package.module:function"`` with the finding dict."""

    kind: ClassVar[str] = "call"
    target: str = ""

    def __post_init__(self) -> None:
        module, _, func = self.target.partition(":")
        if not module or not func:
            raise InvalidConfigError(
                f"Call target must be 'package.module:function', got {self.target!r}"
            )

    def run(self, finding: Mapping[str, Any], context: ActionContext) -> str:
        module, _, func = self.target.partition(":")
        getattr(importlib.import_module(module), func)(dict(finding))
        return f"called {self.target}"


ACTIONS: dict[str, type[Action]] = {
    cls.kind: cls for cls in (StopTraining, RollbackTraining, Webhook, Email, Command, Call)
}


def action_from_dict(data: Mapping[str, Any]) -> Action:
    """The action a job record describes (see :meth:`Action.to_dict`)."""
    cls = ACTIONS.get(str(data.get("kind")))
    if cls is None:
        raise InvalidConfigError(
            f"unknown action {data.get('kind')!r}; actions are {', '.join(sorted(ACTIONS))}"
        )
    names = {f.name for f in fields(cls)}
    return cls(**{k: v for k, v in data.items() if k in names})
