"""``run_rules``: built-in and custom rules over many trials, as tasks on local processes or on
a Ray cluster; the findings as tables."""

from __future__ import annotations

import os
import signal
import time
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from multiprocessing import get_context
from multiprocessing.connection import wait
from typing import Any

import pyarrow as pa

from tensortap.core._process_tree import end_tree
from tensortap.exceptions import InvalidConfigError
from tensortap.rules._spec import RuleSpec
from tensortap.rules.rule_configs import BuiltinRuleConfig
from tensortap.scale._tasks import STARTED, STARTUP, Task, evaluate_in_tree, failed, serve
from tensortap.storage import Store
from tensortap.table._export import check_run_name, run_name_of
from tensortap.trials._trial import Trial

ENGINES = ("local", "ray")
#: Seconds one task (one trial, or one step range) may run before it is stopped and becomes
#: Error rows; ``run_rules(..., time_limit=None)`` for none.
TIME_LIMIT = 600.0
SUMMARY = pa.schema(
    [
        ("run", pa.string()),
        ("trial", pa.string()),
        ("start", pa.int64()),
        ("end", pa.int64()),
        ("rule", pa.string()),
        ("status", pa.string()),
        ("evaluated", pa.int64()),
        ("triggered", pa.int64()),
        ("skipped", pa.int64()),
        ("first_step", pa.int64()),
        ("last_step", pa.int64()),
        ("worst_severity", pa.string()),
        ("details", pa.string()),
        ("seconds", pa.float64()),
    ]
)
FINDINGS = pa.schema(
    [
        ("run", pa.string()),
        ("trial", pa.string()),
        ("start", pa.int64()),
        ("end", pa.int64()),
        ("rule", pa.string()),
        ("step", pa.int64()),
        ("mode", pa.string()),
        ("mode_step", pa.int64()),
        ("outcome", pa.string()),
        ("severity", pa.string()),
        ("message", pa.string()),
        ("value", pa.float64()),
        ("tensors", pa.list_(pa.string())),
    ]
)


@dataclass(frozen=True)
class RuleResults:
    """``summary``: one row per trial (or step range) and rule, with its status (IssuesFound,
    NoIssuesFound, NoData, Error); ``findings``: one row per triggered or failed evaluation."""

    summary: pa.Table
    findings: pa.Table

    def issues(self) -> pa.Table:
        """The summary rows whose rule found an issue or failed."""
        status = self.summary.column("status").to_pylist()
        keep = [s in ("IssuesFound", "Error") for s in status]
        return self.summary.filter(pa.array(keep, type=pa.bool_()))


def run_rules(
    trials: Iterable[str | os.PathLike[str]],
    rules: Sequence[RuleSpec | BuiltinRuleConfig | str],
    engine: str = "local",
    *,
    workers: int | None = None,
    steps_per_task: int | None = None,
    runs: Sequence[str] | None = None,
    address: str | None = None,
    time_limit: float | None = TIME_LIMIT,
) -> RuleResults:
    """Evaluate ``rules`` (:class:`~tensortap.rules.RuleSpec` specs, a job's ``Rule`` too,
    ``rule_configs.<rule>()`` or built-in names) on every trial (paths or ``s3://`` URLs) over
    the steps each has published, one task per trial, or per ``steps_per_task`` global steps
    (for rules that need no history across the range). ``engine="local"`` runs the tasks in
    ``workers`` processes (default: the CPU count); ``engine="ray"`` as Ray tasks on the
    cluster at ``address`` (``ray.init(address=...)``; a local one if none is running and no
    address is given).

    Each task runs isolated from the caller and from the others: a task that runs longer than
    ``time_limit`` seconds (default :data:`TIME_LIMIT`, 600; None for no limit), or whose
    process crashes or exits (``os._exit``, a signal, the out-of-memory killer), is stopped and
    becomes that task's ``Error`` rows with the reason in ``details``; the other tasks go on
    and the caller's process is never affected."""
    specs = tuple(_spec(r) for r in rules)
    if not specs:
        raise InvalidConfigError("run_rules needs at least one rule")
    if engine not in ENGINES:
        raise InvalidConfigError(f"engine must be one of {ENGINES}, got {engine!r}")
    if workers is not None and (not isinstance(workers, int) or workers < 1):
        raise InvalidConfigError(f"workers must be an int >= 1, got {workers!r}")
    if steps_per_task is not None and (not isinstance(steps_per_task, int) or steps_per_task < 1):
        raise InvalidConfigError(f"steps_per_task must be an int >= 1, got {steps_per_task!r}")
    if time_limit is not None and (
        isinstance(time_limit, bool)
        or not isinstance(time_limit, int | float)
        or not time_limit > 0
        or time_limit == float("inf")
    ):
        raise InvalidConfigError(
            f"time_limit must be a number of seconds > 0 (or None for no limit), got {time_limit!r}"
        )
    locations = [_location(t) for t in trials]
    names = list(runs) if runs is not None else [run_name_of(loc) for loc in locations]
    if len(names) != len(locations):
        raise InvalidConfigError(f"runs has {len(names)} names for {len(locations)} trials")
    for name in names:
        check_run_name(name)
    tasks = [
        task
        for run, loc in zip(names, locations, strict=True)
        for task in _tasks(run, loc, specs, steps_per_task)
    ]
    if engine == "ray":
        results = _on_ray(tasks, address, time_limit)
    else:
        results = _on_processes(tasks, workers, time_limit)
    summary = [row for r in results for row in r["summary"]]
    findings = [row for r in results for row in r["findings"]]
    return RuleResults(
        pa.Table.from_pylist(summary, schema=SUMMARY),
        pa.Table.from_pylist(findings, schema=FINDINGS),
    )


def _spec(rule: RuleSpec | BuiltinRuleConfig | str) -> RuleSpec:
    if isinstance(rule, RuleSpec):
        return rule
    if isinstance(rule, BuiltinRuleConfig | str):
        return RuleSpec.builtin(rule)
    raise InvalidConfigError(
        f"rules are RuleSpec.builtin(...)/RuleSpec.custom(...) specs (tensortap.rules.RuleSpec, "
        f"or a job's tensortap.jobs.Rule), rule_configs.<rule>() or built-in rule names, got "
        f"{rule!r}"
    )


def _location(trial: Any) -> str:
    if isinstance(trial, Trial | Store):
        raise InvalidConfigError(
            "run_rules takes trial locations (paths or s3:// URLs), which travel to the "
            f"workers, not opened trials: got {trial!r}; pass its path"
        )
    text = str(os.fspath(trial))
    return text if "://" in text else os.path.abspath(text)


def _tasks(
    run: str, location: str, specs: tuple[RuleSpec, ...], steps_per_task: int | None
) -> list[Task]:
    if steps_per_task is None:
        return [Task(run, location, specs)]
    try:
        steps = Trial(location).steps()
    except Exception:  # the task, opening it again, gives its Error rows
        steps = []
    if not steps:
        return [Task(run, location, specs)]
    first, last = steps[0], steps[-1]
    return [
        Task(run, location, specs, start, min(start + steps_per_task, last + 1))
        for start in range(first - first % steps_per_task, last + 1, steps_per_task)
    ]


def _on_processes(
    tasks: list[Task], workers: int | None, time_limit: float | None
) -> list[dict[str, Any]]:
    """Each task in a worker process (also with one worker: a task that exits must not take
    the caller with it), at most ``workers`` at once. A worker that dies (a crash, ``os._exit``,
    a signal, the OOM killer) or whose task runs past ``time_limit`` is killed and replaced;
    its task becomes Error rows saying why."""
    count = min(workers or os.cpu_count() or 1, max(len(tasks), 1))
    # spawn: the parent may hold threads (a hook's writer, a trial's read-ahead)
    context = get_context("spawn")
    results: list[dict[str, Any] | None] = [None] * len(tasks)
    todo = deque(range(len(tasks)))
    idle: list[_Worker] = []
    busy: dict[int, _Worker] = {}  # task -> its worker
    try:
        while todo or busy:
            while todo and len(busy) < count:
                worker = idle.pop() if idle else _Worker(context)
                at = todo.popleft()
                if worker.give(tasks[at], time_limit):
                    busy[at] = worker
                else:  # it died before it could take the task
                    worker.kill()
                    results[at] = failed(tasks[at], _death(worker.process.exitcode))
            deadlines = [w.deadline for w in busy.values() if w.deadline is not None]
            wait_for = None if not deadlines else max(0.0, min(deadlines) - time.monotonic())
            waits = [o for w in busy.values() for o in (w.conn, w.process.sentinel)]
            ready = set(wait(waits, timeout=wait_for))
            now = time.monotonic()
            for at, worker in list(busy.items()):
                answer: dict[str, Any] | None = None
                if worker.conn in ready or worker.process.sentinel in ready:
                    answer = worker.answer(tasks[at], time_limit)
                elif worker.deadline is not None and now >= worker.deadline:
                    worker.kill()
                    answer = failed(
                        tasks[at],
                        f"the task exceeded its time limit of {time_limit:g} s and was stopped "
                        "(its process killed); give run_rules a larger time_limit if it needs "
                        "longer",
                        now - worker.started,
                    )
                if answer is not None:
                    results[at] = answer
                    del busy[at]
                    if worker.process.is_alive():
                        idle.append(worker)
    finally:
        _stop_all([*idle, *busy.values()])
    return [r for r in results if r is not None]


def _stop_all(workers: list[_Worker], grace: float = 5.0) -> None:
    """End the workers together: an idle one ends when its connection closes; one still busy
    after ``grace`` seconds (a Ctrl-C in the caller: the workers, each in a process group of
    its own, did not get it) is killed with its whole tree."""
    for worker in workers:
        worker.conn.close()
    pending = [w.process.sentinel for w in workers]
    deadline = time.monotonic() + grace
    while pending and (left := deadline - time.monotonic()) > 0:
        ready = wait(pending, left)
        pending = [s for s in pending if s not in ready]
    for worker in workers:
        worker.kill()


class _Worker:
    """One worker process of the local engine and the task it is on."""

    def __init__(self, context: Any) -> None:
        self.conn, child = context.Pipe()
        self.process = context.Process(target=serve, args=(child,), daemon=True)
        self.process.start()
        child.close()
        self.started = time.monotonic()
        self.deadline: float | None = None

    def give(self, task: Task, time_limit: float | None) -> bool:
        # Until the worker says it began the task, its time also covers starting the process
        self.started = time.monotonic()
        self.deadline = None if time_limit is None else self.started + time_limit + STARTUP
        try:
            self.conn.send(task)
        except (OSError, ValueError):
            return False
        return True

    def answer(self, task: Task, time_limit: float | None) -> dict[str, Any] | None:
        """The task's rows, or Error rows saying how the process died; None when the worker
        only said that it began the task (its time limit counts from now)."""
        try:
            if self.conn.poll():
                got = self.conn.recv()
                if got == STARTED:
                    self.started = time.monotonic()
                    self.deadline = None if time_limit is None else self.started + time_limit
                    return None
                rows: dict[str, Any] = got
                return rows
        except (EOFError, OSError):
            pass
        wait([self.process.sentinel], 5.0)  # ended, not yet reaped: its exit code stays
        seconds = time.monotonic() - self.started
        self.kill()
        return failed(task, _death(self.process.exitcode), seconds)

    def kill(self) -> None:
        """Kill the worker, every process below it (what its rules started, in a session of
        their own too) and its process group (what was left of it when it ended by itself).
        Before it is reaped: until then its pid and group name no other process."""
        end_tree(self.process.pid, group=self.process.pid)
        self.process.join()
        self.conn.close()


def _death(code: int | None) -> str:
    """Why a worker process ended in the middle of a task, from its exit code."""
    if code is not None and code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        hint = " (the out-of-memory killer sends SIGKILL)" if -code == signal.SIGKILL else ""
        return (
            f"the task's process was killed by {name}{hint} while evaluating the rules; the "
            "other tasks went on"
        )
    return (
        f"the task's process exited with code {code} while evaluating the rules (a rule called "
        "os._exit or sys.exit from a thread, or the interpreter crashed); the other tasks went on"
    )


def _on_ray(
    tasks: list[Task], address: str | None, time_limit: float | None
) -> list[dict[str, Any]]:
    """Each task a Ray task of one CPU, never retried (a task that kills its worker would kill
    the next one too). Each task runs in a process tree of its own below the Ray worker
    (:func:`evaluate_in_tree`), which ends with the task and with the worker: nothing a rule
    started outlives its task. The worker holds the task's time limit, counted from when the
    task's process began it (not its interpreter's start: seconds on a loaded node); a task
    past it is stopped there with its tree. Here, no more tasks are in flight than the cluster
    has CPUs, and one that has not answered ``time_limit`` + :data:`STARTUP` seconds after it
    was handed over (a worker that never started it) is cancelled with its worker killed."""
    import ray

    if not ray.is_initialized():
        ray.init(address=address, include_dashboard=False, log_to_driver=False)
    remote = ray.remote(num_cpus=1, max_retries=0)(evaluate_in_tree)
    limit = None if time_limit is None else time_limit + STARTUP
    cpus = ray.cluster_resources().get("CPU", 1)  # type: ignore[no-untyped-call]
    slots = max(1, int(cpus))
    results: list[dict[str, Any] | None] = [None] * len(tasks)
    todo = deque(range(len(tasks)))
    flying: dict[Any, tuple[int, float]] = {}  # ref -> (task, when handed over)
    while todo or flying:
        while todo and len(flying) < slots:
            at = todo.popleft()
            flying[remote.remote(tasks[at], time_limit)] = (at, time.monotonic())
        deadline = None
        if limit is not None:
            deadline = max(0.0, min(t for _, t in flying.values()) + limit - time.monotonic())
        done, _ = ray.wait(list(flying), num_returns=1, timeout=deadline)
        for ref in done:
            at, started = flying.pop(ref)
            try:
                results[at] = ray.get(ref)
            except Exception as exc:  # the worker crashed or exited, or the task was lost
                first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
                results[at] = failed(
                    tasks[at],
                    f"the Ray task failed ({type(exc).__name__}: {first}); the worker that "
                    "ran it crashed or exited (a rule called os._exit, or it ran out of "
                    "memory); the other tasks went on",
                    time.monotonic() - started,
                )
        now = time.monotonic()
        for ref, (at, started) in list(flying.items()):
            if limit is not None and now - started >= limit:
                ray.cancel(ref, force=True)
                del flying[ref]
                results[at] = failed(
                    tasks[at],
                    f"the task exceeded its time limit of {time_limit:g} s (and {STARTUP:g} s "
                    "to start) without an answer from its Ray worker, and was cancelled (the "
                    "worker killed); give run_rules a larger time_limit if it needs longer",
                    now - started,
                )
    return [r for r in results if r is not None]
