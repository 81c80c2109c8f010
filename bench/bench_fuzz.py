"""The trial fuzzer at scale: mutate a healthy trial thousands of times and read each copy.

Counts how reading ended (``ok``: read, damaged parts skipped and listed in problems();
``typed``: refused with a tensortap error; ``untyped``: any other exception; ``hang``: still
reading after the deadline; ``lost`` / ``wrong``: ``trial.series()`` or ``trial.steps()`` lack
a row of the healthy trial's, or serve one that differs, while ``problems()`` lists nothing) per
kind of damage, the slowest read and the peak traced memory.
``tests/security/test_hostile_trials.py`` runs 150 cases; this runs more (docs/format.md has
figures).

    .venv/bin/python bench/bench_fuzz.py [--cases 2000] [--seed 0] [--json]
    .venv/bin/python bench/bench_fuzz.py --format smdebug [--cases 2000]
    .venv/bin/python bench/bench_fuzz.py --format documents [--cases 2000]

``--format documents`` fuzzes a trial's session records, a job's rule status files and smdebug's
collections files, ``--cases`` of each, checking values (see tensortap.testing._doc_fuzz).

``--format smdebug`` mutates the smdebug fixture (tests/golden/smdebug, with real data CRCs)
instead and adds a ``wrong`` result: a value that differs from the healthy trial's while
``problems()`` lists nothing (docs/smdebug.md has figures).
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

from tensortap.testing._fuzz import (
    build_healthy,
    build_merged,
    fuzz,
    fuzz_smdebug,
    trial_bytes,
    with_checksums,
)

SMDEBUG_FIXTURE = Path(__file__).resolve().parent.parent / "tests" / "golden" / "smdebug" / "trial"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--deadline", type=float, default=20.0)
    parser.add_argument("--json", action="store_true")
    parser.add_argument(
        "--format",
        choices=("tensortap", "merged", "smdebug", "jobs", "documents"),
        default="tensortap",
        help="merged: a tensortap trial compacted, half of its parts keeping their data objects",
    )
    args = parser.parse_args(argv)
    if args.format == "documents":  # session records, rule statuses, smdebug collections
        from tensortap.testing._doc_fuzz import bench_main as documents_main

        return documents_main(args.cases, args.seed, args.deadline, args.json, SMDEBUG_FIXTURE)
    if args.format == "jobs":  # a job directory's documents: --cases of each kind
        from tensortap.testing._job_fuzz import bench_main

        return bench_main(args.cases, args.seed, args.deadline, args.json)
    with tempfile.TemporaryDirectory() as tmp:
        if args.format == "smdebug":
            healthy = Path(tmp) / "healthy"
            shutil.copytree(SMDEBUG_FIXTURE, healthy)
            with_checksums(healthy)
        elif args.format == "merged":
            healthy = build_merged(Path(tmp) / "healthy")
        else:
            healthy = build_healthy(Path(tmp) / "healthy")
        size = trial_bytes(healthy)
        started = time.perf_counter()
        if args.format == "smdebug":
            summary = fuzz_smdebug(
                healthy, Path(tmp) / "work", args.cases, args.seed, args.deadline
            )
        else:
            summary = fuzz(healthy, Path(tmp) / "work", args.cases, args.seed, args.deadline)
        seconds = time.perf_counter() - started
    result = {
        "format": args.format,
        "machine": f"{platform.machine()} {platform.python_version()}",
        "cases": summary.cases,
        "seconds": round(seconds, 1),
        "results": dict(summary.results),
        "by_mutation": {k: dict(v) for k, v in sorted(summary.by_mutation.items())},
        "trial_bytes": size,
        "max_peak_bytes": round(summary.max_peak_ratio * size),
        "slowest_read_s": round(summary.max_seconds, 3),
        "failures": [f"{f.result}: {f.mutation}: {f.error}" for f in summary.failures[:20]],
    }
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        print(f"{summary.cases} mutated trials in {seconds:.0f} s on {result['machine']}")
        print(f"results: {dict(summary.results)}")
        for kind, counts in result["by_mutation"].items():
            print(f"  {kind:<11} {counts}")
        memory = (
            ""
            if args.format == "smdebug"
            else f"peak traced memory {result['max_peak_bytes']} bytes; "
        )
        print(f"trial {size} bytes; {memory}slowest read {result['slowest_read_s']} s")
        for line in result["failures"]:
            print("FAIL", line)
    return 1 if summary.failures else 0


if __name__ == "__main__":
    sys.exit(main())
