"""Run a case: train it into a cached trial with a job's hook, then evaluate the rules over it.

A case's directory is ``<cache>/<split>/<name>/``: ``trial/`` (what the hook wrote) and
``case.json`` (the case, its hash, the run's own record summary, seconds). A case whose
case.json carries the same hash is not trained again, so a change to the rules re-evaluates
the cached trials only.
"""

from __future__ import annotations

import json
import shutil
import time
import warnings
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from multiprocessing import get_context
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from bench.detection.generated.faults_family import implementation
from bench.detection.generated.record import RunRecord
from bench.detection.generated.suite import Case
from bench.detection.harness import evaluate_trial, train_into_trial
from bench.detection.score import ProgramResult

if TYPE_CHECKING:
    from bench.detection.generated.suite import Slot
    from bench.detection.generated.validate import Verdict

T = TypeVar("T")
R = TypeVar("R")

#: bump when a change to the generator should retrain every cached trial
# 2: the job hook saves training_loop facts; 3: and the initial scale, single-batch
# evaluations, losses recorded without a module, class weights
GENERATOR_VERSION = 3


@dataclass
class CaseResult(ProgramResult):
    """A generated case's result: a ProgramResult plus where it came from."""

    split: str = ""
    trained: bool = False  # False: the cached trial was reused
    train_seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            **super().to_dict(),
            "split": self.split,
            "trained": self.trained,
            "train_seconds": self.train_seconds,
        }


def case_key(case: Case) -> str:
    return f"{case.hash}-v{GENERATOR_VERSION}"


def trial_is_cached(case_dir: Path, case: Case) -> bool:
    meta = case_dir / "case.json"
    if not meta.exists() or not (case_dir / "trial").exists():
        return False
    try:
        return bool(json.loads(meta.read_text()).get("hash") == case_key(case))
    except (OSError, ValueError):
        return False


def train_case(case: Case, case_dir: Path) -> float:
    """Train ``case`` into ``case_dir/trial`` with a job's hook; write ``case.json``."""
    from bench.detection.generated.train import train
    from bench.detection.generated.validate import trains_properly

    shutil.rmtree(case_dir, ignore_errors=True)
    case_dir.mkdir(parents=True)
    records: list[RunRecord] = []
    started = time.perf_counter()
    train_into_trial(case_dir / "trial", lambda hook: records.append(train(case, hook)))
    seconds = time.perf_counter() - started
    record = records[0] if records else None
    meta = {
        **case.to_dict(),
        "hash": case_key(case),
        "fault_description": implementation(case.fault, case.split).describe(case.draw)
        if case.fault
        else None,
        "record": record.summary() if record else None,
        # a healthy case's own check, redone on the run the hook watched
        "trains_properly": trains_properly(record, case.draw)
        if record and case.fault is None
        else None,
        "seconds": seconds,
    }
    (case_dir / "case.json").write_text(json.dumps(meta, indent=1, default=str))
    return seconds


def evaluate(trial_dir: Path) -> CaseResult:
    """Evaluate the recommended rules over a finished trial; the case (name, label, split) is
    read from the ``case.json`` beside it."""
    meta = json.loads((Path(trial_dir).parent / "case.json").read_text())
    found = evaluate_trial(trial_dir, meta["name"], meta["label"])
    return CaseResult(**vars(found), split=meta["split"])  # with its diagnosis (harness)


def run_case(case: Case, cache: Path, keep: bool = True) -> CaseResult:
    """Train (unless cached) and evaluate one case; ``keep`` false: its trial is deleted once
    evaluated (a split's cache is about 33 GB)."""
    warnings.simplefilter("ignore")  # the faults' own warnings (broadcasting, scheduler order)
    started = time.perf_counter()
    case_dir = cache / case.split / case.name
    trained, train_seconds = False, 0.0
    if not trial_is_cached(case_dir, case):
        train_seconds, trained = train_case(case, case_dir), True
    result = evaluate(case_dir / "trial")
    if not keep:
        shutil.rmtree(case_dir, ignore_errors=True)
    result.trained, result.train_seconds = trained, train_seconds
    result.seconds = time.perf_counter() - started
    return result


def parallel(fn: Callable[[T], R], items: Iterable[T], jobs: int) -> Iterator[R]:
    """``fn`` over ``items`` in ``jobs`` spawned processes, in order of completion (``fn``
    must live in an importable module, not in ``__main__``)."""
    items = list(items)
    if jobs <= 1 or len(items) <= 1:
        yield from map(fn, items)
        return
    with get_context("spawn").Pool(jobs, maxtasksperchild=50) as pool:
        yield from pool.imap_unordered(fn, items)


def run_worker(args: tuple[Case, Path, bool]) -> CaseResult:
    """A worker process's task: one case (and whether to keep its trial)."""
    import torch

    torch.set_num_threads(1)
    return run_case(*args)


def validate_worker(slot: Slot) -> Verdict:
    """A worker process's task: validate one slot (no tensortap)."""
    from bench.detection.generated.validate import validate_slot

    warnings.simplefilter("ignore")
    return validate_slot(slot)
