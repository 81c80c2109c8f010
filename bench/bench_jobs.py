"""How much do a job's rules slow its training? 20 built-in rules, shared process vs one each.

The training script (bench/job_train.py) times its own training loop. Configurations, taking
turns so the machine's drift hits them alike:

- ``hook``: a job with the 20 rules' collections saved but no rule (the hook's own cost);
- ``shared``: the same job with 20 built-in rules in one rule process (the default);
- ``per_rule``: the same with one process per rule.

The figure is the median training time per configuration and its ratio to ``hook``.

    .venv/bin/python bench/bench_jobs.py [--rounds 3] [--steps 400]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

from tensortap.jobs import CollectionConfig, DebuggerHookConfig, Rule, TrainingJob
from tensortap.rules.builtin import BUILTIN_RULES
from tensortap.rules.rule_configs import config_for

SCRIPT = Path(__file__).parent / "job_train.py"


def twenty_rules() -> list[Rule]:
    names = [n for n in sorted(BUILTIN_RULES) if n != "SimilarAcrossRuns"][:20]
    return [Rule.builtin(config_for(n)) for n in names]


def run(root: Path, label: str, rules: list[Rule], steps: int, per_rule: bool) -> float:
    collections = {c.name: dict(c.parameters) for r in twenty_rules() for c in r.collections}
    hook = DebuggerHookConfig(
        hook_parameters={"save_interval": "10"},
        collection_configs=[CollectionConfig(n, p) for n, p in collections.items()],
    )
    job = TrainingJob(
        command=[sys.executable, str(SCRIPT), "--steps", str(steps), "--output", str(root / label)],
        output_path=root / "runs",
        debugger_hook_config=hook,
        rules=rules,
        rule_processes="per_rule" if per_rule else "shared",
    )
    job.fit(wait=False)
    summary = job.wait(logs=False)
    if summary["status"] != "Completed":
        raise SystemExit(f"{label}: the job ended {summary['status']}: {job.logs()[-2000:]}")
    return float((root / label).read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=400)
    args = parser.parse_args()
    configs = {
        "hook": ([], False),
        "shared": (twenty_rules(), False),
        "per_rule": (twenty_rules(), True),
    }
    times: dict[str, list[float]] = {k: [] for k in configs}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            for label, (rules, per_rule) in configs.items():
                seconds = run(Path(tmp), f"{label}-{r}", rules, args.steps, per_rule)
                times[label].append(seconds)
                print(f"round {r} {label:9s} training {seconds:.2f} s", flush=True)
    base = statistics.median(times["hook"])
    print(f"\n{args.steps} training steps, median of {args.rounds} rounds:")
    for label, values in times.items():
        median = statistics.median(values)
        print(f"  {label:9s} {median:7.2f} s  {median / base:5.3f}x of hook only")


if __name__ == "__main__":
    main()
