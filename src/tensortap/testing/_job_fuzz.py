"""A structure-aware fuzzer of a job directory's documents that checks values, not only
exceptions.

A job directory may be shared by someone else, damaged or crafted. :func:`fuzz_jobs` builds a
healthy job (a real trial, and ``job.json``, ``summary.json`` and ``events.jsonl`` as the
supervisor and the rule processes write them) beside a second one, then, case after case,
replaces one document of the second with a mutation of it (:func:`mutate_document`: a field of
the wrong kind, a number JSON cannot hold as a float, deep nesting, a deleted or duplicated
entry, the bytes cut or flipped) and reads both through every view that shows jobs: the
dashboard's runs list (``serve._meta.overview``), ``tensortap jobs`` (its line), ``tensortap
summary`` and the report's job table. A case passes when

- no view raises an error that is not tensortap's own (nor takes longer than the deadline);
- the healthy job is shown with the very values it had before (one bad job hides nothing);
- the mutated one is read right (each value it holds that is of its kind is shown as it is),
  or what is left out is listed with its reason: a rule entry is shown or named in the
  problems, an event is read or counted as skipped. A value lost with no problem listed is a
  failure, as an untyped error is.

``tests/security/test_hostile_jobs.py`` runs a few hundred cases; ``python bench/bench_fuzz.py
--format jobs`` runs thousands per document kind and reports the counts (docs/jobs.md).
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import random
import time
import traceback
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from tensortap.exceptions import TensortapError
from tensortap.jobs._documents import MAX_DEPTH

#: The documents fuzzed, by kind.
KINDS = ("summary", "job", "events")

#: Stand-ins for numbers JSON can spell but a float cannot hold (written into the text).
_RAW = {"__raw_inf__": "1e999", "__raw_ninf__": "-1e999", "__raw_nan__": "NaN"}
HOSTILE_VALUES: tuple[Any, ...] = (
    5,
    -1,
    0.5,
    1e300,
    1 << 63,
    1 << 64,
    -(1 << 63) - 1,
    "x",
    "<script>alert(1)</script>",
    "",
    None,
    True,
    [],
    {},
    [5],
    {"step": "x"},
    *_RAW,
)
MUTATIONS = ("value", "delete", "duplicate", "wrap", "nest", "root", "truncate", "flip", "text")


def healthy_job(job_dir: Path, steps: int = 4, killed: bool = False) -> None:
    """A finished job's directory as ``tensortap run`` leaves it: a real trial of ``steps``
    steps, ``job.json``, ``summary.json`` with two rules (one fired, with its gravest finding),
    ``events.jsonl`` and a training log; with ``killed``, its training was killed (SIGKILL)
    after its last step, as the supervisor records it."""
    from tensortap.jobs._record import JobRecord, write_json
    from tensortap.testing._fake_trial import TrialBuilder

    record = JobRecord(job_dir)
    record.create(
        {
            "name": job_dir.name,
            "created": 1_700_000_000.5,
            "command": ["python", "train.py"],
            "user_command": ["python", "train.py"],
            "trial_location": str(job_dir / "trial"),
            "cwd": str(job_dir),
            "environment_names": ["HOME"],
            "rules": [{"name": "LossNotDecreasing"}, {"name": "VanishingGradient"}],
            "rules_by_framework": {},
            "hook_config": {"hook_parameters": {"save_interval": "1"}},
            "stop_grace_secs": 60.0,
            "rule_timeout_secs": 300.0,
            "rule_processes": "shared",
        }
    )
    builder = TrialBuilder(job_dir / "trial")
    for step in range(steps):
        builder.step({"loss": np.float32(1.0 / (step + 1)), "gradient/fc.weight": np.ones(3)})
    builder.close()
    fired = {
        "RuleConfigurationName": "LossNotDecreasing",
        "RuleEvaluationStatus": "IssuesFound",
        "StatusDetails": "RuleEvaluationConditionMet: the loss stopped decreasing",
        "LastModifiedTime": "2026-11-29T17:00:00+00:00",
        "rule_class": "LossNotDecreasing",
        "first_fired_step": 2,
        "message": "the loss stopped decreasing",
        "severity": "problem",
        "severities": {"problem": 1},
        "gravest_step": 2,
        "gravest_message": "the loss stopped decreasing",
        "gravest": {
            "rule": "LossNotDecreasing",
            "rule_class": "LossNotDecreasing",
            "step": 2,
            "mode": "TRAIN",
            "mode_step": 2,
            "message": "the loss stopped decreasing",
            "severity": "problem",
            "outcome": "triggered",
            "details": {"diverging": False},
        },
        "evaluated": 4,
        "judged": 4,
        "triggered": 1,
        "skipped": 0,
        "errors": 0,
        "last_step": 3,
        "log": str(record.rule_log("LossNotDecreasing")),
        "pid": 1234,
    }
    quiet = {
        "RuleConfigurationName": "VanishingGradient",
        "RuleEvaluationStatus": "NoIssuesFound",
        "StatusDetails": "",
        "severity": None,
        "gravest_step": None,
        "judged": 4,
        "triggered": 0,
        "skipped": 0,
    }
    write_json(
        record.summary_file,
        {
            "job": job_dir.name,
            "status": "Failed" if killed else "Completed",
            "training": {
                "status": "Failed" if killed else "Completed",
                "exit_code": -9 if killed else 0,
                "pid": 4321,
                "log": str(record.training_log),
                "log_tail": "epoch 1\n",
                "failure": {
                    "step": steps - 1,
                    "error": None,
                    "signal": 9,
                    "text": f"training was killed after step {steps - 1}, the last one saved "
                    "(signal 9, SIGKILL)",
                }
                if killed
                else None,
            },
            "rules": [fired, quiet],
            "trial": str(job_dir / "trial"),
            "supervisor_pid": 1111,
            "started": 1_700_000_000.5,
            "updated": 1_700_000_100.0,
        },
    )
    record.append_event("job_started", pid=1111)
    record.append_event("training_started", pid=4321, command=["python", "train.py"])
    record.append_event(
        "rule_fired", rule="LossNotDecreasing", step=2, message="the loss stopped decreasing"
    )
    record.append_event("rule_ended", rule="LossNotDecreasing", status="IssuesFound")
    record.append_event("training_ended", status="Completed", exit_code=0)
    (job_dir / "logs" / "training.log").write_text("epoch 1\n")


# -- mutation --


def _nodes(doc: Any) -> list[tuple[Any, Any]]:
    """Every (container, key) of ``doc``, breadth first (bounded: a document of our own)."""
    out: list[tuple[Any, Any]] = []
    queue = [doc]
    while queue:
        item = queue.pop(0)
        pairs = item.items() if isinstance(item, dict) else enumerate(item)
        for key, value in list(pairs):
            out.append((item, key))
            if isinstance(value, (dict, list)):
                queue.append(value)
    return out


def _dumps(doc: Any) -> bytes:
    text = json.dumps(doc, allow_nan=True)
    for token, raw in _RAW.items():
        text = text.replace(json.dumps(token), raw)
    return text.encode("utf-8", "surrogatepass")


def mutate_document(raw: bytes, rng: random.Random, kind: str) -> tuple[bytes, str]:
    """One mutation of a document (of one line of ``events.jsonl`` for ``events``), and its
    name."""
    mutation = rng.choice(MUTATIONS)
    if mutation == "truncate":
        return raw[: rng.randrange(len(raw))], mutation
    if mutation == "flip":
        at = rng.randrange(len(raw))
        return raw[:at] + bytes([raw[at] ^ (1 << rng.randrange(8))]) + raw[at + 1 :], mutation
    doc = json.loads(raw)
    if mutation == "root":
        return _dumps(rng.choice(HOSTILE_VALUES)), mutation
    nodes = _nodes(doc)
    if not nodes:
        return _dumps(rng.choice(HOSTILE_VALUES)), "root"
    parent, key = rng.choice(nodes)
    if mutation == "value":
        parent[key] = rng.choice(HOSTILE_VALUES)
    elif mutation == "delete":
        del parent[key]
    elif mutation == "duplicate":
        if isinstance(parent, list):
            parent.insert(key, parent[key])
        else:
            parent[f"{key}_copy"] = parent[key]
    elif mutation == "wrap":
        parent[key] = [parent[key]]
    elif mutation == "nest":
        depth = rng.choice((65, 1_000, 100_000))
        parent[key] = "__nest__"
        marker = json.dumps("__nest__")
        text = _dumps(doc).decode("utf-8", "surrogatepass")
        return text.replace(marker, "[" * depth + "]" * depth, 1).encode(), mutation
    elif mutation == "text":
        parent[key] = rng.choice(("\ud800", "x" * 100_000, "é\u0000\u202e"))
    return _dumps(doc), mutation


# -- what the views show --


def _loose(raw: bytes) -> Any:
    """``raw`` as Python's own JSON reads it (NaN, 1e999 and all); None when it cannot."""
    try:
        return json.loads(raw)
    except (ValueError, RecursionError):
        return None


def _is_step(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 1 << 63


def _is_time(value: Any) -> bool:
    from tensortap.trials._sessions import MAX_TIME

    return (
        isinstance(value, (int, float)) and not isinstance(value, bool) and (0 <= value <= MAX_TIME)
    )


def _plain(doc: Any) -> bool:
    """Whether ``doc`` is JSON tensortap could have written: at most MAX_DEPTH deep, every
    float finite."""
    stack = [(doc, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > MAX_DEPTH or (isinstance(item, float) and not math.isfinite(item)):
            return False
        if isinstance(item, dict):
            stack.extend((v, depth + 1) for v in item.values())
        elif isinstance(item, list):
            stack.extend((v, depth + 1) for v in item)
    return True


def _rule_key(rule: dict[str, Any]) -> tuple[Any, ...]:
    return (rule.get("name"), rule.get("status"), rule.get("severity"), rule.get("gravest_step"))


class _Views:
    """The views of one runs directory, read afresh on each call."""

    def __init__(self, runs: Path) -> None:
        from tensortap.serve._catalog import Catalog

        self.catalog = Catalog([str(runs)])
        self.runs = {run.name: run for run in self.catalog.runs()}

    def overview(self, name: str) -> dict[str, Any]:
        from tensortap.serve import _meta as meta

        run = self.runs[name]
        run.meta, run.sessions = None, None
        return meta.overview(run)

    def line(self, name: str) -> Any:
        """``tensortap jobs``'s row of the job (a :class:`tensortap.jobs._runs.RunRow`)."""
        from tensortap.jobs._runs import run_row

        run = self.runs[name]
        assert run.job is not None
        return run_row(run.job, now=0.0)

    def single(self, name: str) -> str:
        """``tensortap summary`` and the report's job table: an answer or a typed error."""
        from tensortap.jobs._live import render_summary
        from tensortap.jobs._queries import job_summary
        from tensortap.report._training import _job_rows, _job_table

        run = self.runs[name]
        assert run.job is not None
        shown = _job_table(run.job) + str(_job_rows(run.job))
        try:
            shown += render_summary(run.job, job_summary(run.job))
        except (TensortapError, OSError) as exc:
            shown += f"tensortap: {exc}"
        return shown


def _check_summary(raw: bytes, shown: dict[str, Any]) -> str | None:
    """Why what the runs list shows of a mutated summary loses a value unsaid (None: it
    does not)."""
    problems = " | ".join(shown["problems"])
    doc = _loose(raw)
    if shown["status"] == "Unreadable":
        return None if "summary.json" in problems else "unreadable, with no reason listed"
    if not isinstance(doc, dict):
        return f"a summary of {type(doc).__name__} read as one: {shown['status']!r}"
    status = doc.get("status")
    if isinstance(status, str) and shown["status"] != status:
        return f"status {status!r} shown as {shown['status']!r}"
    if status is not None and not isinstance(status, str) and "'status'" not in problems:
        return f"a status of {status!r} left out unsaid"
    rules = doc.get("rules", [])
    if not isinstance(rules, list):
        return None if "'rules'" in problems else "rules of the wrong kind left out unsaid"
    expected = []
    for i, entry in enumerate(rules):
        named = isinstance(entry, dict) and isinstance(entry.get("RuleConfigurationName"), str)
        if not named:
            if f"rules[{i}]" not in problems:
                return f"rules[{i}] ({entry!r:.60}) left out unsaid"
            continue
        status, severity, step = (
            entry.get("RuleEvaluationStatus"),
            entry.get("severity"),
            entry.get("gravest_step"),
        )
        if not (isinstance(status, (str, type(None))) and isinstance(severity, (str, type(None)))):
            if f"rules[{i}]" not in problems:
                return f"rules[{i}]: a status or severity of the wrong kind left out unsaid"
            status = status if isinstance(status, str) else None
            severity = severity if isinstance(severity, str) else None
        if step is not None and not _is_step(step):
            if f"rules[{i}]" not in problems:
                return f"rules[{i}]: gravest_step {step!r:.40} left out unsaid"
            step = None
        expected.append((entry["RuleConfigurationName"], status, severity, step))
    got = sorted(map(_rule_key, shown["rules"]), key=repr)
    if got != sorted(expected, key=repr):
        return f"rules shown {got!r:.200} != the summary's {sorted(expected, key=repr)!r:.200}"
    return None


def _check_job(raw: bytes, shown: dict[str, Any], line: Any) -> str | None:
    """Why a mutated job.json's start is shown wrong or left out unsaid (None: it is not).
    A job.json that cannot be read is listed in the run's problems and on its line (its start
    is then the trial's own, from its first session record)."""
    said = " ".join(line.problems)
    if any("job.json" in p for p in shown["problems"]):
        return None if "job.json" in said else "job.json listed by the runs list, not the line"
    if "job.json" in said:
        return "job.json listed on the line, not by the runs list"
    doc = _loose(raw)
    if not isinstance(doc, dict):
        return f"a job.json of {type(doc).__name__} read as one"
    created = doc.get("created")
    if created is None:
        return None
    if not _is_time(created):
        return f"created {created!r:.40} left out unsaid"
    if shown["started"] != created or line.started != created:
        return f"created {created!r} shown as {shown['started']!r} and {line.started!r}"
    return None


def _check_events(record: Any, raw: bytes) -> str | None:
    """Why a mutated events.jsonl loses an event unsaid or alters one (None: it does not)."""
    lines = [ln for ln in raw.split(b"\n")[: raw.count(b"\n")] if ln.strip()]
    record.skipped_events = 0
    events, _ = record.events()
    if len(events) + record.skipped_events != len(lines):
        return (
            f"{len(lines)} lines, {len(events)} events read and {record.skipped_events} "
            "skipped: lines lost unsaid"
        )
    decoded = iter(events)
    for ln in lines:
        doc = _loose(ln)
        if not (isinstance(doc, dict) and _is_time(doc.get("time"))):
            continue
        if not isinstance(doc.get("event"), str) or not _plain(doc):
            continue  # no event tensortap writes (too deep, or 1e999): skipped, counted
        event = next(decoded, None)
        if event is None:
            return f"an event read by Python's JSON was skipped (line {ln[:120]!r})"
        altered = [k for k, v in event.items() if doc.get(k, object()) != v and v == v]
        if altered:
            return f"event fields altered: {altered} (line {ln[:120]!r})"
    return None


# -- the fuzz loop --


@dataclass
class JobFuzzSummary:
    cases: int = 0
    results: Counter[str] = field(default_factory=Counter)
    by_kind: dict[str, Counter[str]] = field(default_factory=dict)
    by_mutation: dict[str, Counter[str]] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)
    slowest: float = 0.0


def _views_of(run: str, views: _Views) -> tuple[dict[str, Any], Any, str]:
    return views.overview(run), views.line(run), views.single(run)


def fuzz_jobs(
    work: Path,
    cases: int,
    seed: int = 0,
    kinds: tuple[str, ...] = KINDS,
    deadline: float = 20.0,
) -> JobFuzzSummary:
    """``cases`` mutated documents of each of ``kinds`` (see the module docstring)."""
    from tensortap.jobs._record import EVENTS_FILE, SUMMARY_FILE, JobRecord
    from tensortap.trials._locate import JOB_FILE

    runs = work / "runs"
    healthy_job(runs / "good")
    healthy_job(runs / "bad", killed=True)
    files = {"summary": SUMMARY_FILE, "job": JOB_FILE, "events": EVENTS_FILE}
    originals = {kind: (runs / "bad" / files[kind]).read_bytes() for kind in kinds}
    views = _Views(runs)
    reference = _views_of("good", views)
    bad_record = JobRecord(runs / "bad")
    rng = random.Random(seed)
    summary = JobFuzzSummary()
    for kind in kinds:
        path = runs / "bad" / files[kind]
        for case in range(cases):
            original = originals[kind]
            if kind == "events":  # one line mutated, the others kept
                lines = original.splitlines(keepends=True)
                at = rng.randrange(len(lines))
                line, mutation = mutate_document(lines[at].rstrip(b"\n"), rng, kind)
                raw = b"".join([*lines[:at], line.replace(b"\n", b" ") + b"\n", *lines[at + 1 :]])
            else:
                raw, mutation = mutate_document(original, rng, kind)
            path.write_bytes(raw)
            started = time.perf_counter()
            try:
                good = _views_of("good", views)
                shown, row, _single = _views_of("bad", views)
                if good != reference:
                    why: str | None = "the good job's views changed beside the bad one"
                elif kind == "summary":
                    why = _check_summary(raw, shown)
                elif kind == "job":
                    why = _check_job(raw, shown, row)
                else:
                    why = _check_events(bad_record, raw)
                skipped = kind == "events" and bad_record.skipped_events
                result = "lost" if why else ("listed" if shown["problems"] or skipped else "read")
            except Exception as exc:  # an untyped error is what the fuzzer looks for
                why = "".join(traceback.format_exception_only(exc)).strip()
                result = "untyped"
            seconds = time.perf_counter() - started
            summary.slowest = max(summary.slowest, seconds)
            if seconds > deadline:
                result, why = "slow", f"{seconds:.1f} s (deadline {deadline} s)"
            summary.cases += 1
            summary.results[result] += 1
            summary.by_kind.setdefault(kind, Counter())[result] += 1
            summary.by_mutation.setdefault(f"{kind}/{mutation}", Counter())[result] += 1
            if why is not None and result in ("lost", "untyped", "slow"):
                summary.failures.append(f"{kind} case {case} ({mutation}): {result}: {why}")
        path.write_bytes(originals[kind])
    return summary


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """The views' log lines (a run left out of the list is logged) kept off the console."""
    import logging

    logging.disable(logging.CRITICAL)
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            yield
    finally:
        logging.disable(logging.NOTSET)


def report(found: Any, fmt: str, what: str, seconds: float, as_json: bool, width: int) -> int:
    """What a fuzz run found (``found``: its summary), as JSON or lines; 1 on a failure."""
    import platform

    result: dict[str, Any] = {
        "format": fmt,
        "machine": f"{platform.machine()} {platform.python_version()}",
        "cases": found.cases,
        "seconds": round(seconds, 1),
        "results": dict(found.results),
        "by_kind": {k: dict(v) for k, v in found.by_kind.items()},
        "by_mutation": {k: dict(v) for k, v in sorted(found.by_mutation.items())},
        "slowest_case_s": round(found.slowest, 3),
        "failures": found.failures[:20],
    }
    if as_json:
        print(json.dumps(result, indent=1))
    else:
        print(f"{found.cases} mutated {what} in {seconds:.0f} s on {result['machine']}")
        print(f"results: {result['results']}")
        for kind, counts in result["by_kind"].items():
            print(f"  {kind:<{width}} {counts}")
        print(f"slowest case {result['slowest_case_s']} s")
        for line in result["failures"]:
            print("FAIL", line)
    return 1 if found.failures else 0


def bench_main(cases: int, seed: int, deadline: float, as_json: bool) -> int:
    """``bench/bench_fuzz.py --format jobs``: ``cases`` per document kind; exit 1 on a
    failure."""
    import tempfile

    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp, _quiet():
        found = fuzz_jobs(Path(tmp), cases, seed, deadline=deadline)
    seconds = time.perf_counter() - started
    return report(found, "jobs", "job documents", seconds, as_json, width=8)


__all__ = [
    "HOSTILE_VALUES",
    "KINDS",
    "JobFuzzSummary",
    "fuzz_jobs",
    "healthy_job",
    "mutate_document",
]
