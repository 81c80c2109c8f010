"""The detection benchmark: run every program with the hook a job attaches, evaluate the
recommended rule set at its defaults over its trial, and score what the rules said.

    python -m bench.detection [--quick] [--only NAME ...] [--json results.json]

``--quick`` runs the subset the tests run. Run from the repository root.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch

import tensortap.pytorch as tt
from bench.detection.buggy import BUGGY
from bench.detection.harness import evaluate_trial, train_into_trial
from bench.detection.healthy import HEALTHY
from bench.detection.score import ProgramResult, score, table

#: The subset the tests run: a healthy program for each trap fixed, a buggy one per cheap class.
QUICK = (
    "converged_flat",
    "frozen_backbone",
    "batchnorm_cnn",
    "eval_difficulty",
    "nan_standardise",
    "lr_low",
    "not_updating_no_step",
    "dead_relu_bias",
)


def programs() -> dict[str, tuple[str, Callable[[tt.Hook], None]]]:
    """name -> (label, program), the buggy ones first."""
    found: dict[str, tuple[str, Callable[[tt.Hook], None]]] = dict(BUGGY)
    found.update({name: ("healthy", fn) for name, fn in HEALTHY.items()})
    return found


def run_program(name: str, label: str, program: Callable[[tt.Hook], None]) -> ProgramResult:
    """Train one program with a job's hook, then evaluate the recommended rules over it."""
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix=f"detect-{name}-") as tmp:
        out = Path(tmp) / "trial"
        train_into_trial(out, program)
        result = evaluate_trial(out, name, label)
    result.seconds = time.perf_counter() - started
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.detection", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="only the tests' subset")
    parser.add_argument("--only", nargs="*", default=None, metavar="NAME")
    parser.add_argument("--json", help="also write the results and the score here")
    ns = parser.parse_args(argv)
    torch.set_num_threads(1)
    wanted = programs()
    names = ns.only or (list(QUICK) if ns.quick else list(wanted))
    unknown = [n for n in names if n not in wanted]
    if unknown:
        parser.error(f"no program {unknown}; programs: {', '.join(wanted)}")
    results = []
    for name in names:
        label, program = wanted[name]
        result = run_program(name, label, program)
        print(f"{name} ({label}): {sorted(result.diagnoses()) or 'nothing'} "
              f"[{result.seconds:.1f} s]", file=sys.stderr)  # fmt: skip
        results.append(result)
    summary = score(results)
    print(table(results, summary))
    if ns.json:
        Path(ns.json).write_text(
            json.dumps({"summary": summary, "results": [r.to_dict() for r in results]}, indent=1)
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
