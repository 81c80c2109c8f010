"""Score the stranger corpus: programs written by authors given only a bug's description and the
frameworks' documentation, never tensortap's rules, its generator or their code.

Each program under ``bench/stranger/programs/<author>/`` is a standalone training script, listed in
that directory's ``manifest.json`` (its file, framework, ``label`` healthy or buggy, the bug, and
``accepted_first``: the causes its author said a person must be told first to fix it). This runs
every program as an unmodified script under ``tensortap run`` (the recommended rules, the job's
default hook), reads the job's ``summary.json`` and scores its diagnosis:

- a healthy program *has a problem* when its verdict is ``problem``;
- a buggy program is *detected* when its verdict is ``problem`` (or ``failed``), and its *root
  cause is named first* when the diagnosis's first cause is one of its ``accepted_first``.

The programs are committed before they are scored and never edited to suit a rule (a program
that does not show its bug without tensortap is replaced by its author). Rules are developed on
the generated development split, never on this corpus: by default only the aggregate is printed;
``--details`` writes each program's verdict to a file for a session that must look at one.

    python -m bench.stranger [--set held_out|dev] [--jobs 2] [--only FILE ...]
                             [--json score.json] [--details out.json]
                             [--save-budget off|default|SHARE]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
PROGRAMS = HERE / "programs"
#: A development corpus written the same way (authors who never saw the rules), whose programs
#: and details may be looked at while rules change: the held-out corpus above is scored only.
DEV_PROGRAMS = HERE / "dev"
SETS = {"held_out": PROGRAMS, "dev": DEV_PROGRAMS}
LABELS = ("healthy", "buggy")
TIMEOUT_S = 600


@dataclass(frozen=True)
class Program:
    path: Path
    author: str
    framework: str
    label: str
    accepted_first: frozenset[str]

    @property
    def name(self) -> str:
        """The program's file as its manifest lists it (``fixed/<file>`` for a fixed twin)."""
        return self.path.name if self.path.parent.name != "fixed" else f"fixed/{self.path.name}"


@dataclass
class Result:
    file: str
    author: str
    framework: str
    label: str
    verdict: str
    cause: str | None
    named_first: bool
    seconds: float
    error: str = ""


def load(root: Path = PROGRAMS) -> list[Program]:
    """Every program of every author's manifest; a manifest entry that does not say what is
    expected is an error that names the entry."""
    found: list[Program] = []
    for manifest in sorted(root.glob("*/manifest.json")):
        entries = json.loads(manifest.read_text())
        if not isinstance(entries, list):
            raise SystemExit(f"{manifest}: expected a JSON list of programs, got {type(entries)}")
        for i, entry in enumerate(entries):
            where = f"{manifest} entry {i}"
            if not isinstance(entry, dict) or entry.get("label") not in LABELS:
                raise SystemExit(f"{where}: expected an object whose label is one of {LABELS}")
            path = manifest.parent / str(entry.get("file", ""))
            twins = manifest.parent / "fixed"  # a fixed twin may be listed (as healthy)
            if path.parent not in (manifest.parent, twins) or not path.is_file():
                raise SystemExit(f"{where}: no program file {entry.get('file')!r} beside it")
            accepted = entry.get("accepted_first", [])
            if not isinstance(accepted, list) or not all(isinstance(a, str) for a in accepted):
                raise SystemExit(f"{where}: accepted_first must be a list of cause ids")
            found.append(
                Program(
                    path,
                    manifest.parent.name,
                    str(entry.get("framework", "?")),
                    entry["label"],
                    frozenset(accepted),
                )
            )
    return found


def run(program: Program, work: Path, save_budget: str = "off") -> Result:
    """Run one program under ``tensortap run`` in its own directory; read its job's summary.
    ``save_budget``: the job's save budget (``off`` by default; ``default`` leaves the job's)."""
    started = time.perf_counter()
    out = work / f"{program.author}-{program.name.replace('/', '-').removesuffix('.py')}"
    out.mkdir(parents=True)
    # run a copy where the job's directory is: what the program writes (a trainer's output
    # directory, checkpoints) stays out of the corpus and goes with the job
    shutil.copy2(program.path, out / program.path.name)
    env = dict(
        os.environ,
        OMP_NUM_THREADS="1",
        MKL_NUM_THREADS="1",
        TF_NUM_INTRAOP_THREADS="1",
        TF_CPP_MIN_LOG_LEVEL="3",
        PYTHONHASHSEED="0",
    )
    # the save budget off by default, as in the generated benchmark: a job's default schedule
    # never widened by this machine's load, so a score does not depend on how busy it was;
    # ``--save-budget default`` measures what the budget a user gets does to the verdicts
    env.pop("TENSORTAP_SAVE_BUDGET", None)
    if save_budget != "default":
        env["TENSORTAP_SAVE_BUDGET"] = save_budget
    cmd = [
        sys.executable,
        "-m",
        "tensortap.cli",
        "run",
        "--quiet",
        "-o",
        str(out / "runs"),
        "--name",
        "job",
        "--",
        sys.executable,
        program.path.name,
    ]
    verdict, cause, error = "error", None, ""
    try:
        done = subprocess.run(
            cmd,
            cwd=out,
            env=env,
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
        )
        summary_path = out / "runs" / "job" / "summary.json"
        if summary_path.is_file():
            diagnosis = json.loads(summary_path.read_text()).get("diagnosis") or {}
            verdict = str(diagnosis.get("verdict", "error"))
            cause = diagnosis.get("cause")
        else:
            error = f"no summary.json (exit {done.returncode}): {done.stderr[-400:]}"
    except subprocess.TimeoutExpired:
        error = f"timed out after {TIMEOUT_S} s"
    finally:
        shutil.rmtree(out, ignore_errors=True)
    return Result(
        program.name,
        program.author,
        program.framework,
        program.label,
        verdict,
        cause,
        cause is not None and cause in program.accepted_first,
        time.perf_counter() - started,
        error,
    )


def wilson(k: int, n: int) -> tuple[float, float]:
    """The 95% Wilson interval of k successes in n."""
    if n == 0:
        return (0.0, 1.0)
    z, p = 1.96, k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return (max(0.0, centre - half), min(1.0, centre + half))


def score(results: list[Result]) -> dict[str, Any]:
    healthy = [r for r in results if r.label == "healthy"]
    buggy = [r for r in results if r.label == "buggy"]
    flagged = sum(r.verdict == "problem" for r in healthy)
    detected = sum(r.verdict in ("problem", "failed") for r in buggy)
    first = sum(r.named_first for r in buggy)
    by_framework: dict[str, dict[str, int]] = {}
    for r in results:
        row = by_framework.setdefault(
            r.framework, {"healthy": 0, "healthy_problem": 0, "buggy": 0, "detected": 0, "first": 0}
        )
        if r.label == "healthy":
            row["healthy"] += 1
            row["healthy_problem"] += r.verdict == "problem"
        else:
            row["buggy"] += 1
            row["detected"] += r.verdict in ("problem", "failed")
            row["first"] += r.named_first
    return {
        "programs": len(results),
        "healthy": len(healthy),
        "healthy_with_problem": flagged,
        "healthy_with_problem_interval": wilson(flagged, len(healthy)),
        # a healthy program that fails under tensortap run: the tool broke training
        "healthy_failed": sum(r.verdict == "failed" for r in healthy),
        "buggy": len(buggy),
        "detected": detected,
        "named_first": first,
        "errors": sum(bool(r.error) for r in results),
        "by_framework": by_framework,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.stranger", description=__doc__)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument(
        "--set",
        choices=sorted(SETS),
        default="held_out",
        help="held_out (default): bench/stranger/programs, aggregate only; dev: "
        "bench/stranger/dev, a development corpus whose details may be read",
    )
    parser.add_argument("--only", nargs="*", default=None, metavar="FILE")
    parser.add_argument("--json", help="write the aggregate score here")
    parser.add_argument("--details", help="write each program's verdict here (not printed)")
    parser.add_argument(
        "--save-budget",
        default="off",
        help="the jobs' save budget: off (default, a score independent of the machine's load), "
        "default (what a user gets), or a share of training time",
    )
    ns = parser.parse_args(argv)
    programs = load(SETS[ns.set])
    if ns.only:
        programs = [p for p in programs if p.path.name in ns.only or p.name in ns.only]
    with (
        tempfile.TemporaryDirectory(prefix="stranger-") as tmp,
        ThreadPoolExecutor(max(1, ns.jobs)) as pool,
    ):
        results = list(pool.map(lambda p: run(p, Path(tmp), ns.save_budget), programs))
    summary = score(results)
    lo, hi = summary["healthy_with_problem_interval"]
    b = max(1, summary["buggy"])
    print(f"{summary['programs']} programs ({summary['errors']} could not be scored)")
    if summary["healthy_failed"]:
        print(f"healthy programs that failed under tensortap run: {summary['healthy_failed']}")
    print(
        f"healthy with a problem: {summary['healthy_with_problem']} of {summary['healthy']} "
        f"(95% interval {100 * lo:.1f}-{100 * hi:.1f}%)"
    )
    print(
        f"buggy detected: {summary['detected']} of {summary['buggy']} "
        f"({100 * summary['detected'] / b:.1f}%)"
    )
    print(
        f"root cause named first: {summary['named_first']} of {summary['buggy']} "
        f"({100 * summary['named_first'] / b:.1f}%)"
    )
    for fw, row in sorted(summary["by_framework"].items()):
        print(
            f"  {fw}: healthy with a problem {row['healthy_problem']}/{row['healthy']}, "
            f"detected {row['detected']}/{row['buggy']}, first {row['first']}/{row['buggy']}"
        )
    if ns.json:
        Path(ns.json).write_text(json.dumps(summary, indent=1) + "\n")
    if ns.details:
        Path(ns.details).write_text(json.dumps([asdict(r) for r in results], indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
