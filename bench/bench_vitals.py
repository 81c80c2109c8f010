"""What saving the vital signs every step (issue 43) costs a PyTorch job: the job's default hook
(the recommended rules' collections every 10th step, now with ``vitals`` at every step) against
the same job's default before vital signs, a checkout of the commit before them (``--before``,
its ``src`` directory), and against no hook (``--without``: also this tree's job hook with the
``vitals`` collection left out, which tells the vital signs' own work from the rest; and
``--budget-off``: this tree's job hook with its save budget off, ``$TENSORTAP_SAVE_BUDGET=off``:
``vitals`` is the job's default, budget on).

Each run is a fresh process (bench/vitals_train.py) that trains ``--steps`` steps after a
warm-up and times each; configurations take turns round by round (the order rotating) so the
machine's drift hits them alike. The figures per model are the medians over rounds of the mean
wall time per step (every step, the every-10th saving steps included) and of the process CPU
time per step (every thread: the writer's work too, closing included; steadier on a shared
machine), and their ratios to ``before``.

    git archive c85d00b src | tar -x -C /tmp/before
    .venv/bin/python bench/bench_vitals.py --before /tmp/before/src [--rounds 5] [--steps 200]
        [--model small|mlp|cnn|all]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).parent
SCRIPT = HERE / "vitals_train.py"
SRC = HERE.parent / "src"
NO_VITALS = Path("(this tree, vitals left out)")
BUDGET_OFF = Path("budget-off")  # a marker: SRC, with the save budget off


def run(src: Path | None, model: str, steps: int, out: Path) -> dict[str, float]:
    env = dict(os.environ)
    cmd = [sys.executable, str(SCRIPT), "--model", model, "--steps", str(steps), "-o", str(out)]
    if src is not None:
        env["PYTHONPATH"] = str(src)
        cmd.append("--hook")
    if src == NO_VITALS:
        env["PYTHONPATH"] = str(SRC)
        cmd.append("--no-vitals")
    if src == BUDGET_OFF:  # this tree's job default with its save budget off (core._save_budget)
        env["PYTHONPATH"] = str(SRC)
        env["TENSORTAP_SAVE_BUDGET"] = "off"
    subprocess.run(cmd, env=env, check=True, timeout=900)
    found: dict[str, float] = json.loads(out.read_text())
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--before", type=Path, required=True, help="src/ of the commit before")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--model", default="all")
    parser.add_argument(
        "--without", action="store_true", help="also this tree's job hook with vitals left out"
    )
    parser.add_argument(
        "--budget-off",
        action="store_true",
        help="also this tree's job hook with its save budget off (the default has it on)",
    )
    args = parser.parse_args()
    models = ["small", "mlp", "cnn"] if args.model == "all" else [args.model]
    configs: dict[str, Path | None] = {"no hook": None, "before": args.before, "vitals": SRC}
    if args.without:
        configs["without"] = NO_VITALS
    if args.budget_off:
        configs["budget off"] = BUDGET_OFF
    print(f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, 1 torch thread")
    with tempfile.TemporaryDirectory() as tmp:
        for model in models:
            times: dict[str, dict[str, list[float]]] = {k: {"mean": [], "cpu": []} for k in configs}
            for r in range(args.rounds):
                order = list(configs)
                order = order[r % len(order) :] + order[: r % len(order)]
                for label in order:
                    found = run(configs[label], model, args.steps, Path(tmp) / "t.json")
                    for key in ("mean", "cpu"):
                        times[label][key].append(found[key])
            print(f"\n{model}: per step, medians of {args.rounds} rounds of {args.steps} steps")
            for key, what in (("mean", "wall"), ("cpu", "CPU ")):
                base = statistics.median(times["before"][key])
                for label, values in times.items():
                    median = statistics.median(values[key])
                    print(
                        f"  {what} {label:8s} {1000 * median:8.3f} ms  {median / base:6.3f}x of "
                        f"before  (rounds: {', '.join(f'{1000 * v:.3f}' for v in values[key])})"
                    )


if __name__ == "__main__":
    main()
