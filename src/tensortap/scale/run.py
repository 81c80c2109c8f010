"""``run_rules``: built-in and custom rules over many trials, as tasks on local processes or on
a Ray cluster; the findings as tables."""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from multiprocessing import get_context
from typing import Any

import pyarrow as pa

from tensortap.exceptions import InvalidConfigError
from tensortap.jobs.specs import Rule as RuleSpec
from tensortap.rules.rule_configs import BuiltinRuleConfig
from tensortap.scale.tasks import Task, evaluate
from tensortap.storage import Store
from tensortap.table.export import check_run_name, run_name_of
from tensortap.trials.trial import Trial

ENGINES = ("local", "ray")
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
) -> RuleResults:
    """Evaluate ``rules`` (``Rule.builtin(...)``/``Rule.custom(...)`` specs,
    ``rule_configs.<rule>()`` or built-in names) on every trial (paths or ``s3://`` URLs) over
    the steps each has published, one task per trial, or per ``steps_per_task`` global steps
    (for rules that need no history across the range). ``engine="local"`` runs the tasks in
    ``workers`` processes (default: the CPU count); ``engine="ray"`` as Ray tasks on the
    cluster at ``address`` (``ray.init(address=...)``; a local one if none is running and no
    address is given)."""
    specs = tuple(_spec(r) for r in rules)
    if not specs:
        raise InvalidConfigError("run_rules needs at least one rule")
    if engine not in ENGINES:
        raise InvalidConfigError(f"engine must be one of {ENGINES}, got {engine!r}")
    if workers is not None and (not isinstance(workers, int) or workers < 1):
        raise InvalidConfigError(f"workers must be an int >= 1, got {workers!r}")
    if steps_per_task is not None and (not isinstance(steps_per_task, int) or steps_per_task < 1):
        raise InvalidConfigError(f"steps_per_task must be an int >= 1, got {steps_per_task!r}")
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
    results = _on_ray(tasks, address) if engine == "ray" else _on_processes(tasks, workers)
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
        f"rules are Rule.builtin(...)/Rule.custom(...) specs (tensortap.jobs.Rule), "
        f"rule_configs.<rule>() or built-in rule names, got {rule!r}"
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
    steps = Trial(location).steps()
    if not steps:
        return [Task(run, location, specs)]
    first, last = steps[0], steps[-1]
    return [
        Task(run, location, specs, start, min(start + steps_per_task, last + 1))
        for start in range(first - first % steps_per_task, last + 1, steps_per_task)
    ]


def _on_processes(tasks: list[Task], workers: int | None) -> list[dict[str, Any]]:
    count = min(workers or os.cpu_count() or 1, max(len(tasks), 1))
    if count == 1:
        return [evaluate(t) for t in tasks]
    # spawn: the parent may hold threads (a hook's writer, a trial's read-ahead)
    with ProcessPoolExecutor(count, mp_context=get_context("spawn")) as pool:
        return list(pool.map(evaluate, tasks, chunksize=max(1, len(tasks) // (count * 8))))


def _on_ray(tasks: list[Task], address: str | None) -> list[dict[str, Any]]:
    import ray

    if not ray.is_initialized():
        ray.init(address=address, include_dashboard=False, log_to_driver=False)
    remote = ray.remote(num_cpus=1)(evaluate)
    return list(ray.get([remote.remote(t) for t in tasks]))
