"""A seeded mutator of trials, and a reader that must survive whatever it makes.

A trial may come from a shared bucket or another team, damaged or crafted. :func:`mutate`
damages a copy of a healthy trial in one of the ways such a trial can be damaged (bytes flipped,
truncated or extended objects, deleted or moved files, JSON fields of the wrong type, deeply
nested JSON, symlinks out of the trial or to ``/dev/zero``, FIFOs, catastrophic regexes: see
:mod:`._mutations`, and :mod:`._smdebug_mutations` for smdebug's format), and
:func:`read_everything` reads all of it through the public trial API. Reading may raise only
tensortap's typed errors (or skip the damaged part and list it in ``trial.problems()``); it must
finish within a deadline and use memory within a small constant of the trial's real size.
It must also lose nothing silently: what ``trial.series()`` and ``trial.steps()`` return is
compared with the healthy trial's (:func:`read_rows`), and a row missing (``lost``) or
differing (``wrong``) while ``trial.problems()`` lists nothing is a failure.

``tests/security/test_hostile_trials.py`` runs a few hundred cases; ``python -m bench.fuzz`` runs
thousands and reports the counts (docs/format.md).
"""

from __future__ import annotations

import logging
import os
import random
import shutil
import threading
import time
import traceback
import tracemalloc
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from tensortap.exceptions import TensortapError

# the damage itself (re-exported: tests and bench/bench_fuzz.py import it from here)
from tensortap.testing._mutations import (
    MUTATIONS,
    Mutation,
    mutate,
    rewrite_index_header,
    trial_files,
)
from tensortap.testing._smdebug_mutations import SMDEBUG_MUTATIONS, with_checksums

__all__ = [
    "MUTATIONS",
    "SMDEBUG_MUTATIONS",
    "Mutation",
    "Outcome",
    "Summary",
    "build_healthy",
    "check_one",
    "check_one_smdebug",
    "fuzz",
    "fuzz_smdebug",
    "mutate",
    "read_everything",
    "read_rows",
    "read_values",
    "rewrite_index_header",
    "row_damage",
    "trial_bytes",
    "with_checksums",
    "wrong_values",
]


def read_everything(path: str | os.PathLike[str]) -> int:
    """Read all of a trial through the public API; returns how many values were read.

    A damaged value raises a typed error, which is counted as handled and reading goes on."""
    from tensortap.trials._trial import create_trial

    trial = create_trial(path)
    read = 0
    trial.workers()
    trial.config()  # the run's configuration documents: a damaged one is a problem
    trial.problems()
    for name in trial.collections():
        trial.tensor_names(collection=name)
        trial.tensor_names(collection=name, step=0)
    names = trial.tensor_names()
    for step in trial.steps(show_incomplete_steps=True):
        try:
            trial.tensor_names(step=step)
            block = trial.step_block(step)
            block.reduce(block.names(), "max", abs=True)
            block.nonfinite(block.names())
        except TensortapError:
            pass
    for name in names:
        tensor = trial.tensor(name)
        for step in tensor.steps():
            try:
                np.asarray(tensor.value(step))
                read += 1
            except TensortapError:
                pass
            for reduction in ("min", "l2"):
                try:
                    tensor.reduction_value(step, reduction)
                except TensortapError:
                    pass
    trial.problems()
    return read


def build_healthy(path: Path, steps: int = 6) -> Path:
    """A small healthy trial: two workers, TRAIN and EVAL, raw values, reductions, shapes,
    several dtypes and collections with regexes (what :func:`fuzz` damages)."""
    from tensortap.core._reduction_config import ReductionConfig
    from tensortap.core._save_config import SaveConfig
    from tensortap.hook._hook import Hook
    from tensortap.modes import ModeKeys

    rng = np.random.default_rng(0)
    for worker in range(2):
        hook = Hook(
            path,
            save_config=SaveConfig(save_interval=1),
            include_collections=["weights", "gradients", "losses", "scalars", "default", "norms"],
            worker=worker,
            num_workers=2,
        )
        hook.get_collection("norms").include("^norm/")
        hook.get_collection("norms").reduction_config = ReductionConfig(
            reductions=("min", "max"), norms=("l2",)
        )
        with hook:
            for step in range(steps):
                hook.set_mode(ModeKeys.EVAL if step % 3 == 2 else ModeKeys.TRAIN)
                hook.save_tensor("fc.weight", rng.normal(size=(4, 3)).astype(np.float32), "weights")
                hook.save_tensor("gradient/fc.weight", rng.normal(size=(4, 3)), "gradients")
                hook.save_tensor("norm/h", rng.normal(size=16).astype(np.float16), "norms")
                hook.save_tensor("count", np.arange(5, dtype=np.int64))
                hook.save_scalar("loss", float(1.0 / (step + 1)), "losses")
                # a name on which a backtracking regex engine takes forever with (a+)+$
                hook.save_tensor("a" * 30 + "!", np.ones(1))
                hook.next_step()
    return path


def build_merged(path: Path, steps: int = 8) -> Path:
    """A small healthy trial compacted: two workers whose segments of one step each (raw
    values of two sizes, reductions, a loss, TRAIN and EVAL) were merged, the larger half of
    them keeping their own data objects (a merged index of version 3, what :func:`fuzz`
    damages then)."""
    from tensortap.core._save_config import SaveConfig
    from tensortap.hook._hook import Hook
    from tensortap.modes import ModeKeys
    from tensortap.writer._compaction import compact_trial
    from tensortap.writer._options import WriterOptions

    rng = np.random.default_rng(0)
    for worker in range(2):
        hook = Hook(
            path,
            save_config=SaveConfig(save_interval=1),
            include_collections=["weights", "gradients", "losses", "default"],
            worker=worker,
            num_workers=2,
            writer_options=WriterOptions(compact=False),
        )
        with hook:
            for step in range(steps):
                hook.set_mode(ModeKeys.EVAL if step % 3 == 2 else ModeKeys.TRAIN)
                wide = rng.normal(size=(4, 3 + 20 * (step % 2))).astype(np.float32)
                hook.save_tensor("fc.weight", wide, "weights")
                hook.save_tensor("gradient/fc.weight", rng.normal(size=(4, 3)), "gradients")
                hook.save_scalar("loss", float(1.0 / (step + 1)), "losses")
                hook.save_tensor("count", np.arange(5, dtype=np.int64))
                hook.next_step()
                hook.flush()
    sizes = sorted(p.stat().st_size for p in path.rglob("*.ttdat") if p.stat().st_size)
    compact_trial(path, keep_bytes=sizes[len(sizes) // 2])
    return path


#: Every row a trial serves, keyed by (worker, tensor, statistic, mode, mode step, global
#: step) -> its values in order; and (``"steps"``, worker) -> the global steps it holds.
Rows = dict[tuple[Any, ...], tuple[float, ...]]


def read_rows(path: str | os.PathLike[str]) -> tuple[Rows, list[str]]:
    """Every row of every series of a trial (``trial.series()``), each worker's steps, the
    trial's steps (``trial.steps(show_incomplete_steps=True)``), and its problems."""
    from tensortap.trials._trial import create_trial

    trial = create_trial(path)
    rows: dict[tuple[Any, ...], list[float]] = {}
    table = trial.series()
    columns = [
        table[c].tolist()
        for c in ("worker", "tensor", "statistic", "mode", "step", "global_step", "value")
    ]
    steps: dict[str, set[int]] = {}
    for worker, tensor, statistic, mode, step, global_step, value in zip(*columns, strict=True):
        key = (str(worker), str(tensor), str(statistic), str(mode), int(step), int(global_step))
        rows.setdefault(key, []).append(float(value))
        steps.setdefault(str(worker), set()).add(int(global_step))
    out: Rows = {key: tuple(values) for key, values in rows.items()}
    for worker, held in steps.items():
        out["steps", worker] = tuple(float(s) for s in sorted(held))
    out["steps", "trial"] = tuple(float(s) for s in trial.steps(show_incomplete_steps=True))
    return out, trial.problems()


def row_damage(healthy: Rows, got: Rows) -> tuple[str, str]:
    """``("lost", what)`` when ``got`` lacks a row or a step the healthy trial has, ``("wrong",
    what)`` when one differs (or is not the healthy trial's at all), else ``("", "")``."""
    lost = [key for key in healthy if key not in got]
    if lost:
        return "lost", f"{len(lost)} rows or step lists missing, e.g. {lost[0]}"
    for key, values in got.items():
        want = healthy.get(key)
        if want is None or not np.array_equal(np.asarray(values), np.asarray(want), equal_nan=True):
            return "wrong", f"{key}: {values[:4]} where the healthy trial has {want}"
    return "", ""


@dataclass
class Outcome:
    """What reading one mutated trial did."""

    mutation: str
    # "ok", "typed", "untyped", "hang"; "lost" or "wrong": a row missing or differing from
    # the healthy trial's while problems() listed nothing
    result: str
    error: str = ""
    peak_bytes: int = 0
    seconds: float = 0.0


@dataclass
class Summary:
    cases: int = 0
    results: Counter[str] = field(default_factory=Counter)
    by_mutation: dict[str, Counter[str]] = field(default_factory=dict)
    failures: list[Outcome] = field(default_factory=list)
    typed: list[Outcome] = field(default_factory=list)  # reading refused the whole trial
    max_peak_ratio: float = 0.0
    max_seconds: float = 0.0


def trial_bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in trial_files(root))


def check_one(
    trial: Path,
    mutation: str,
    deadline: float = 10.0,
    measure_memory: bool = True,
    healthy: Rows | None = None,
) -> Outcome:
    """Read a (mutated) trial in a daemon thread with a deadline, tracing its peak memory; with
    the ``healthy`` trial's rows, compare its rows with them (``lost``, ``wrong``)."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            read_everything(trial)
            box["result"] = "ok"
            if healthy is not None:
                got, problems = read_rows(trial)
                damage, what = row_damage(healthy, got)
                if damage and not problems:
                    box["result"], box["error"] = damage, what
        except TensortapError as exc:
            box["result"], box["error"] = "typed", f"{type(exc).__name__}: {exc}"
        except BaseException as exc:  # what the fuzzer is looking for
            where = traceback.extract_tb(exc.__traceback__)[-1]
            box["result"] = "untyped"
            box["error"] = f"{type(exc).__name__}: {exc} (at {where.filename}:{where.lineno})"

    if measure_memory:
        tracemalloc.start()
        tracemalloc.reset_peak()
    started = time.monotonic()
    thread = threading.Thread(target=run, daemon=True, name="tensortap-fuzz-read")
    thread.start()
    thread.join(deadline)
    seconds = time.monotonic() - started
    peak = tracemalloc.get_traced_memory()[1] if measure_memory else 0
    if measure_memory:
        tracemalloc.stop()
    if thread.is_alive():
        return Outcome(mutation, "hang", f"still reading after {deadline} s", peak, seconds)
    return Outcome(mutation, box["result"], box.get("error", ""), peak, seconds)


def fuzz(
    healthy: Path,
    work: Path,
    cases: int,
    seed: int = 0,
    deadline: float = 10.0,
    memory_slack: int = 32 << 20,
    measure_memory: bool = True,
) -> Summary:
    """Mutate copies of the trial at ``healthy`` ``cases`` times and read each one.

    A case fails when reading raises an untyped exception, hangs past ``deadline``, traces
    more than ``memory_slack`` bytes above the trial's real size, or serves rows that are
    missing or differ from the healthy trial's while ``problems()`` lists nothing."""
    log = logging.getLogger("tensortap")
    level = log.level
    log.setLevel(logging.ERROR)  # every case logs its problems
    try:
        return _fuzz(healthy, work, cases, seed, deadline, memory_slack, measure_memory)
    finally:
        log.setLevel(level)


def _fuzz(
    healthy: Path,
    work: Path,
    cases: int,
    seed: int,
    deadline: float,
    memory_slack: int,
    measure_memory: bool,
) -> Summary:
    rng = random.Random(seed)
    summary = Summary()
    size = trial_bytes(healthy)
    rows, problems = read_rows(healthy)
    if problems:
        raise ValueError(f"the healthy trial has problems: {problems}")
    for case in range(cases):
        root = work / f"case_{case}" / "trial"
        shutil.copytree(healthy, root, symlinks=True)
        mutation = mutate(root, rng)
        for _ in range(rng.choice([0, 0, 0, 1, 2])):  # sometimes several kinds of damage
            try:
                mutation += " + " + mutate(root, rng)
            except Exception:  # the first damage left nothing to damage this way
                break
        outcome = check_one(root, mutation, deadline, measure_memory, rows)
        kind = mutation.split(":", 1)[0]
        summary.cases += 1
        summary.results[outcome.result] += 1
        summary.by_mutation.setdefault(kind, Counter())[outcome.result] += 1
        summary.max_seconds = max(summary.max_seconds, outcome.seconds)
        if measure_memory:
            summary.max_peak_ratio = max(summary.max_peak_ratio, outcome.peak_bytes / size)
        too_big = measure_memory and outcome.peak_bytes > size + memory_slack
        if outcome.result in ("untyped", "hang", "lost", "wrong") or too_big:
            summary.failures.append(outcome)
        elif outcome.result == "typed":
            summary.typed.append(outcome)
        if outcome.result != "hang":
            shutil.rmtree(root.parent, ignore_errors=True)
    return summary


# -- trials written by smdebug ----------------------------------------------------------------
#
# The same harness over smdebug's format (TFRecord event files, index and collections JSON):
# :func:`fuzz_smdebug` damages copies of a healthy smdebug trial (bits flipped, files cut or
# extended, record lengths changed, crafted index JSON, catastrophic collection regexes: see
# :mod:`._smdebug_mutations`) and reads each through ``create_trial``. Besides no hang and no
# untyped exception, every value read must equal the healthy trial's, or the trial must list a
# problem: a value that differs while ``problems()`` is empty is a ``wrong`` result (a failure).


Values = dict[tuple[str, int, str, str], Any]


def read_values(path: str | os.PathLike[str]) -> tuple[Values, list[str]]:
    """Every raw value and reduction of a trial, keyed by (name, global step, worker, what),
    and its problems; typed errors of single values are kept as the error's class name."""
    from tensortap.trials._trial import create_trial

    trial = create_trial(path)
    for name in trial.collections():
        trial.tensor_names(collection=name)
    out: Values = {}
    for name in trial.tensor_names():
        tensor = trial.tensor(name)
        for worker in trial.workers():
            for step in tensor.steps():
                for what in ("value", "min", "max", "mean", "l2", "abs_max"):
                    try:
                        if what == "value":
                            got: Any = np.asarray(tensor.value(step, worker=worker))
                        else:
                            red, on_abs = what.removeprefix("abs_"), what.startswith("abs_")
                            got = tensor.reduction_value(step, red, abs=on_abs, worker=worker)
                    except TensortapError as exc:
                        got = type(exc).__name__
                    out[name, step, worker, what] = got
    return out, trial.problems()


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, str) or isinstance(b, str):
        return bool(a == b)
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and a.dtype == b.dtype and bool(np.array_equal(a, b, equal_nan=True))


def wrong_values(healthy: Values, got: Values) -> list[str]:
    """The values ``got`` holds that differ from ``healthy``'s (a missing one is not wrong)."""
    out = []
    for key, value in got.items():
        if isinstance(value, str):
            continue  # a typed refusal of that value
        if key not in healthy or not _same(healthy[key], value):
            out.append(f"{key}: {value!r} where the healthy trial has {healthy.get(key)!r}")
    return out


def check_one_smdebug(trial: Path, healthy: Values, mutation: str, deadline: float) -> Outcome:
    """Read a (mutated) smdebug trial in a daemon thread with a deadline; ``wrong`` when a
    value differs from the healthy trial's and no problem is listed."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            got, problems = read_values(trial)
            wrong = wrong_values(healthy, got)
            if wrong and not problems:
                box["result"], box["error"] = "wrong", f"{len(wrong)} wrong, e.g. {wrong[0]}"
            else:
                box["result"] = "ok"
        except TensortapError as exc:
            box["result"], box["error"] = "typed", f"{type(exc).__name__}: {exc}"
        except BaseException as exc:  # what the fuzzer is looking for
            where = traceback.extract_tb(exc.__traceback__)[-1]
            box["result"] = "untyped"
            box["error"] = f"{type(exc).__name__}: {exc} (at {where.filename}:{where.lineno})"

    started = time.monotonic()
    thread = threading.Thread(target=run, daemon=True, name="tensortap-fuzz-smdebug")
    thread.start()
    thread.join(deadline)
    seconds = time.monotonic() - started
    if thread.is_alive():
        return Outcome(mutation, "hang", f"still reading after {deadline} s", 0, seconds)
    return Outcome(mutation, box["result"], box.get("error", ""), 0, seconds)


def fuzz_smdebug(
    healthy: Path, work: Path, cases: int, seed: int = 0, deadline: float = 20.0
) -> Summary:
    """Mutate copies of the smdebug trial at ``healthy`` ``cases`` times and read each one (the
    conversion cache under ``work``). A case fails when reading raises an untyped exception,
    hangs past ``deadline`` or returns a wrong value without listing a problem."""
    log = logging.getLogger("tensortap")
    level = log.level
    log.setLevel(logging.CRITICAL)
    cache = os.environ.get("TENSORTAP_CACHE")
    os.environ["TENSORTAP_CACHE"] = str(work / "cache")
    try:
        values, problems = read_values(healthy)
        if problems:
            raise ValueError(f"the healthy smdebug trial has problems: {problems}")
        rng = random.Random(seed)
        summary = Summary()
        for case in range(cases):
            root = work / f"case_{case}" / "trial"
            shutil.copytree(healthy, root, symlinks=True)
            name = rng.choice(sorted(SMDEBUG_MUTATIONS))
            mutation = f"{name}: {SMDEBUG_MUTATIONS[name](root, rng)}"
            for _ in range(rng.choice([0, 0, 0, 1, 2])):
                extra = rng.choice(sorted(SMDEBUG_MUTATIONS))
                try:
                    mutation += f" + {extra}: {SMDEBUG_MUTATIONS[extra](root, rng)}"
                except Exception:  # the first damage left nothing to damage this way
                    break
            outcome = check_one_smdebug(root, values, mutation, deadline)
            summary.cases += 1
            summary.results[outcome.result] += 1
            summary.by_mutation.setdefault(name, Counter())[outcome.result] += 1
            summary.max_seconds = max(summary.max_seconds, outcome.seconds)
            if outcome.result in ("untyped", "hang", "wrong"):
                summary.failures.append(outcome)
            elif outcome.result == "typed":
                summary.typed.append(outcome)
            if outcome.result != "hang":
                shutil.rmtree(root.parent, ignore_errors=True)
                shutil.rmtree(work / "cache", ignore_errors=True)
        return summary
    finally:
        log.setLevel(level)
        if cache is None:
            os.environ.pop("TENSORTAP_CACHE", None)
        else:
            os.environ["TENSORTAP_CACHE"] = cache
