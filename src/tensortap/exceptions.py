"""All errors raised by tensortap share one root, :class:`TensortapError`.

Specific errors also subclass the matching builtin (``ValueError``, ``LookupError``, ``OSError``)
so that code catching the builtin keeps working. Messages say what was expected, what was got,
and what to do. :class:`TrainingStopped` is the exception: not an error but a request, it is a
``SystemExit``.
"""

from __future__ import annotations

__all__ = [
    "CheckpointError",
    "FormatError",
    "FrameworkHookNeeded",
    "InvalidConfigError",
    "InvalidTensorError",
    "InvalidWorker",
    "MissingCollectionFiles",
    "NoMoreData",
    "NotATrialError",
    "ReplayError",
    "ResumeRefused",
    "RuleError",
    "RuleEvaluationConditionMet",
    "SeriesUnavailable",
    "StepNotYetAvailable",
    "StepUnavailable",
    "StorageError",
    "TensorUnavailable",
    "TensorUnavailableForStep",
    "TensortapError",
    "TrainingStopped",
    "UnsupportedFormatVersion",
    "WorkerInUse",
]


class TensortapError(Exception):
    """Root of every error tensortap raises."""


class InvalidConfigError(TensortapError, ValueError):
    """A configuration object or argument was given a value it does not accept."""


class FrameworkHookNeeded(InvalidConfigError, AttributeError):
    """A hook was used like another framework's (``tensortap.Hook(...).register_module(model)``):
    the message names the hook that has the method. An ``AttributeError`` too, so ``hasattr``
    and ``getattr(hook, name, default)`` answer as for any missing attribute."""


class InvalidTensorError(TensortapError, ValueError):
    """A value handed to a hook cannot be saved as a tensor (e.g. strings or Python objects)."""


class StorageError(TensortapError, OSError):
    """Reading or writing the trial's storage failed.

    ``transient`` is True for failures worth retrying later (a lost connection, a timeout, a
    server answering 5xx or "slow down"); the background writer retries those and gives up on
    the rest (a missing bucket, denied access, a full disk).
    """

    def __init__(self, *args: object, transient: bool = False) -> None:
        super().__init__(*args)
        self.transient = transient


class WorkerInUse(TensortapError, RuntimeError):
    """Another writer (a second process, or the same script started twice) owns this worker
    of the trial: two writers on one worker would lose steps."""


class ResumeRefused(TensortapError, RuntimeError):
    """A new session of a worker cannot tell where the earlier sessions' steps end (a part of
    the worker's history is unreadable), so its steps could write over them."""


class NotATrialError(TensortapError, FileNotFoundError):
    """The path exists but holds no tensortap trial (or is a file)."""


class FormatError(TensortapError, ValueError):
    """Stored data does not follow the tensortap format (corrupt or foreign file)."""


class UnsupportedFormatVersion(FormatError):
    """The trial was written by a newer tensortap format version than this reader knows."""


def _mode_text(mode: object) -> str:
    return "" if mode is None else f" in mode {getattr(mode, 'name', mode)}"


class TensorUnavailable(TensortapError, LookupError):
    """The trial has never saved a tensor of this name."""

    def __init__(self, tname: str, available: list[str] | None = None) -> None:
        self.tname = tname
        hint = ""
        if available is not None:
            hint = "; " + closest_names(tname, available, "the trial has no tensors yet")
        super().__init__(f"tensor {tname!r} was never saved in this trial{hint}")


class SeriesUnavailable(TensorUnavailable):
    """``trial.series(name)`` for a name the trial never saved; the message lists the series
    there are, the loss's first."""

    def __init__(self, tname: str, listed: str) -> None:
        self.tname = tname
        LookupError.__init__(self, f"no series {tname!r} in this trial: {listed}")


def closest_names(name: str, available: list[str], none: str) -> str:
    """``did you mean 'a', 'b'?`` (the names most like ``name``), or all of them when there
    are few, or ``none`` when there are none; with how to list them all."""
    import difflib

    if not available:
        return none
    if len(available) <= 8:
        return "the trial has " + ", ".join(repr(n) for n in available)
    close = difflib.get_close_matches(name, available, n=5, cutoff=0.4)
    if not close:  # no look-alike: the names that share its last part, else its first
        tail = name.rsplit("/", 1)[-1].rsplit(".", 1)[-1].lower()
        close = [n for n in available if tail and tail in n.lower()][:5]
    shown = f"did you mean {', '.join(repr(n) for n in close)}? " if close else ""
    return f"{shown}({len(available)} tensors; list them with: tensortap names TRIAL)"


class TensorUnavailableForStep(TensortapError, LookupError):
    """The step exists in the trial but this tensor was not saved at it."""

    def __init__(
        self,
        tname: str,
        step: int,
        mode: object = None,
        available_steps: list[int] | None = None,
        note: str = "",
    ) -> None:
        self.tname, self.step, self.mode = tname, step, mode
        hint = ""
        if available_steps is not None:
            shown = ", ".join(str(s) for s in available_steps[:10])
            more = f", ... ({len(available_steps)} in all)" if len(available_steps) > 10 else ""
            hint = f"; it was saved at steps {shown}{more}" if shown else "; it has no such steps"
        note = f" ({note})" if note else ""
        super().__init__(
            f"tensor {tname!r} was not saved at step {step}{_mode_text(mode)}{note}{hint}"
        )


class StepUnavailable(TensortapError, LookupError):
    """Training went past this step without saving it."""

    def __init__(self, step: int, mode: object = None) -> None:
        self.step, self.mode = step, mode
        super().__init__(
            f"step {step}{_mode_text(mode)} was not saved: training went past it "
            "(check the save config of the collections you need)"
        )


class StepNotYetAvailable(TensortapError, LookupError):
    """Training has not reached (or not yet published) this step."""

    def __init__(self, step: int, mode: object = None, last: int | None = None) -> None:
        self.step, self.mode = step, mode
        seen = "no step yet" if last is None else f"the last published step is {last}"
        super().__init__(
            f"step {step}{_mode_text(mode)} is not available yet ({seen}); "
            "wait with trial.wait_for_steps([...]) while training runs"
        )


class NoMoreData(TensortapError, LookupError):
    """Training has ended and will never publish the step asked for."""

    def __init__(self, message: str) -> None:
        super().__init__(message)


class MissingCollectionFiles(TensortapError, LookupError):
    """The trial has no collection record yet, or not the collection asked for."""


class InvalidWorker(TensortapError, LookupError):
    """The worker asked for did not write to this trial (or did not save the step)."""

    def __init__(self, worker: str, available: list[str]) -> None:
        self.worker = worker
        super().__init__(
            f"worker {worker!r} is not in this trial; workers are {available or 'none yet'}"
        )


class RuleEvaluationConditionMet(TensortapError):
    """A rule found the condition it looks for (raised when asked: ``raise_eval_cond=True``)."""

    def __init__(
        self, rule_name: str, step: int, end_of_rule: bool = False, message: str = ""
    ) -> None:
        self.rule_name, self.step, self.end_of_rule = rule_name, step, end_of_rule
        detail = f": {message}" if message else ""
        super().__init__(
            f"Evaluation of the rule {rule_name} at step {step} resulted in the condition "
            f"being met{detail}"
        )


class ReplayError(TensortapError, RuntimeError):
    """A step cannot be replayed (``tensortap.pytorch.Replayer``): it is no longer held, its
    weights were updated since, or the replay budget is spent; the message says which."""


class CheckpointError(TensortapError, RuntimeError):
    """A rollback checkpoint could not be saved (the disk is full) or is damaged (truncated,
    changed since it was saved, not one this process saved). Raised before any weight changes:
    the training state is what it was; the message says which file and what was expected."""


class RuleError(TensortapError, RuntimeError):
    """A rule itself failed (an exception in its code), at a step; carries the traceback."""

    def __init__(self, rule_name: str, step: int | None, error: str, traceback: str = "") -> None:
        self.rule_name, self.step, self.error, self.traceback = rule_name, step, error, traceback
        where = "" if step is None else f" at step {step}"
        super().__init__(f"rule {rule_name} failed{where}: {error}")


class TrainingStopped(SystemExit):
    """Raised by a hook at a step boundary when its job asked training to stop (a rule's
    stop-training action). A SystemExit (code 0): it unwinds the training script, running its
    ``finally`` blocks, and the hook's data is flushed when the process exits."""

    def __init__(self, reason: str = "") -> None:
        super().__init__(0)
        self.reason = reason

    def __str__(self) -> str:
        return f"training stopped by tensortap: {self.reason or 'stop requested'}"
