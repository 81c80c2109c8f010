"""The generated detection benchmark: train each case of the suite with the hook a job
attaches (cached), evaluate the recommended rules over its trial, and score per split.

    python -m bench.detection.generated [--split dev|heldout|family|dev2|all] [--quick]
        [--only NAME ...] [--kinds KIND ...] [--jobs N] [--cache DIR] [--validate] [--json FILE]

``--validate`` runs the validation pass instead (no tensortap): every slot's healthy twin and
faulty run, accepting the first attempt that trains properly / shows its symptom; it prints
the per-kind table and writes the verdicts to accepted.json. Run from the repository root.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from bench.detection.generated.faults import KINDS
from bench.detection.generated.run import CaseResult, parallel, run_worker, validate_worker
from bench.detection.generated.scoring import named_first, summarise, tables
from bench.detection.generated.suite import SPLITS, Case, Slot, cases, slots

DEFAULT_CACHE = Path("bench/out/generated")
#: --quick: the first dev cases of these kinds (and the first healthy ones), cheap ones only
QUICK_HEALTHY = 6
QUICK_KINDS = (
    "lr_x100",
    "no_optimizer_step",
    "zero_init",
    "nan_op",
    "shuffled_labels",
    "softmax_twice",
)
CHEAP_ARCHS = ("mlp", "logreg", "linreg", "cnn", "autoencoder")
#: --validate writes accepted.json every this many verdicts (a split's pass takes minutes)
WRITE_EVERY = 100


def quick_cases() -> list[Case]:
    dev = [c for c in cases("dev") if c.draw.arch in CHEAP_ARCHS]
    chosen = [c for c in dev if c.label == "healthy"][:QUICK_HEALTHY]
    for kind in QUICK_KINDS:
        chosen += [c for c in dev if c.label == kind][:1]
    return chosen


def validate(chosen: list[Slot], jobs: int, write: bool) -> int:
    from bench.detection.generated.validate import table, write_manifest

    started = time.perf_counter()
    verdicts = []
    for v in parallel(validate_worker, chosen, jobs):
        verdicts.append(v)
        if write and len(verdicts) % WRITE_EVERY == 0:  # an interrupted pass keeps its verdicts
            write_manifest(verdicts)
        mark = "accepted" if v.attempt is not None else "NO DRAW"
        print(
            f"{v.split} {v.seed} ({v.label}): {mark} after {len(v.rejected)} rejected "
            f"{v.rejected or ''} [{v.seconds:.1f} s]",
            file=sys.stderr,
        )
    verdicts.sort(key=lambda v: v.seed)
    if write:
        write_manifest(verdicts)
    print(table(verdicts))
    print(f"\nvalidation: {len(verdicts)} slots in {time.perf_counter() - started:.0f} s")
    return 0 if all(v.attempt is not None for v in verdicts) else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.detection.generated", description=__doc__
    )
    parser.add_argument("--split", choices=[*SPLITS, "all"], default="all")
    parser.add_argument("--quick", action="store_true", help="a fixed small subset (the tests')")
    parser.add_argument("--only", nargs="*", default=None, metavar="NAME")
    parser.add_argument(
        "--kinds",
        nargs="*",
        default=None,
        metavar="KIND",
        help=f"healthy and/or fault kinds: {', '.join(KINDS)}",
    )
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    parser.add_argument(
        "--discard",
        action="store_true",
        help="delete each case's trial once evaluated (a split's cache is about 33 GB)",
    )
    parser.add_argument(
        "--validate",
        action="store_true",
        help="run the validation pass (no tensortap) and write accepted.json",
    )
    parser.add_argument(
        "--no-write",
        action="store_true",
        help="with --validate: print the table, leave accepted.json as it is",
    )
    parser.add_argument("--json", help="also write the results and the scores here")
    ns = parser.parse_args(argv)
    unknown = sorted(set(ns.kinds or ()) - {"healthy", *KINDS})
    if unknown:
        parser.error(f"no kind {unknown}; kinds: healthy, {', '.join(KINDS)}")

    if ns.validate:
        chosen_slots = [
            s
            for s in slots(ns.split)
            if (ns.kinds is None or s.label in ns.kinds)
            and (ns.only is None or any(str(s.seed) in n for n in ns.only))
        ]
        return validate(chosen_slots, ns.jobs, write=not ns.no_write)

    chosen = quick_cases() if ns.quick else cases(ns.split)
    if ns.only is not None:
        known = {c.name for c in chosen}
        missing = [n for n in ns.only if n not in known]
        if missing:
            parser.error(f"no case {missing} in split {ns.split}")
        chosen = [c for c in chosen if c.name in ns.only]
    if ns.kinds is not None:
        chosen = [c for c in chosen if c.label in ns.kinds]
    unvalidated = [c.name for c in chosen if not c.validated]
    if unvalidated:
        print(
            f"warning: {len(unvalidated)} cases were not validated (run --validate): "
            f"{', '.join(unvalidated[:5])}{' ...' if len(unvalidated) > 5 else ''}",
            file=sys.stderr,
        )

    started = time.perf_counter()
    results: list[CaseResult] = []
    for r in parallel(run_worker, [(c, ns.cache, not ns.discard) for c in chosen], ns.jobs):
        results.append(r)
        print(
            f"[{len(results)}/{len(chosen)}] {r.name} ({r.label}): "
            f"{', '.join(sorted({f['rule'] for f in r.problems()})) or 'nothing'} "
            f"[{'trained' if r.trained else 'cached'}, {r.seconds:.1f} s]",
            file=sys.stderr,
        )
    wall = time.perf_counter() - started
    order = {c.name: i for i, c in enumerate(chosen)}
    results.sort(key=lambda r: order[r.name])

    splits = [s for s in SPLITS if any(r.split == s for r in results)]
    summaries = {s: summarise([r for r in results if r.split == s]) for s in splits}
    for s in splits:
        print(tables(s, summaries[s]))
        print()
    trained = sum(r.trained for r in results)
    print(
        f"{len(results)} cases ({trained} trained, {len(results) - trained} cached) in "
        f"{wall:.0f} s with {ns.jobs} jobs"
    )
    if ns.json:
        out = {
            "cases": {s: [c.name for c in cases(s)] for s in SPLITS},
            "summary": summaries,
            "results": [
                {**r.to_dict(), "root_cause_first": named_first(r, r.label)} for r in results
            ],
            "seconds": wall,
        }
        Path(ns.json).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
