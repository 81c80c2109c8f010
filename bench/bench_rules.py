"""Rule throughput and live latency.

Throughput: a trial of 2,000 steps x 50 gradient tensors (1,000 float32 values each) is
written once; each rule then walks it (evaluations per second, median of --repeats runs).
PerTensorVanishingGradient reads one tensor at a time (as smdebug's rules did): the speed-up
of reading a step at once, as a ratio measured in the same run.
Latency: a writer publishes a step every 50 ms while VanishingGradient runs live; the delay is
from the step's publication (its wall time + flush) to the rule's finding on it.

    .venv/bin/python bench/bench_rules.py [--steps 2000] [--tensors 50] [--repeats 3]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from tensortap import create_trial
from tensortap.rules import (
    AllZero,
    ExplodingTensor,
    GradientNormSpike,
    Rule,
    UnchangedTensor,
    VanishingGradient,
    iter_findings,
)
from tensortap.testing import TrialBuilder


class PerTensorVanishingGradient(Rule):
    """VanishingGradient written the way smdebug's rules read (and ours did before StepBlock):
    one Tensor and one reduction_value per gradient per step. The same-run baseline."""

    def set_required_tensors(self, step: int) -> None:
        for name in self.base_trial.tensor_names(step=step, collection="gradients"):
            self.req_tensors.add(name, [step])

    def invoke_at_step(self, step: int) -> bool:
        names = self.base_trial.tensor_names(step=step, collection="gradients")
        means = [self.base_trial.tensor(n).reduction_value(step, "mean", abs=True) for n in names]
        return min(means) < 1e-7


RULES = {
    "VanishingGradient": lambda t: VanishingGradient(t),
    "PerTensorVanishingGradient": lambda t: PerTensorVanishingGradient(t),
    "ExplodingTensor": lambda t: ExplodingTensor(t),
    "AllZero": lambda t: AllZero(t),
    "GradientNormSpike": lambda t: GradientNormSpike(t),
    "UnchangedTensor": lambda t: UnchangedTensor(t, collection_names="gradients"),
}


def write_trial(path: Path, steps: int, tensors: int, size: int) -> None:
    rng = np.random.default_rng(0)
    values = [rng.standard_normal(size).astype(np.float32) for _ in range(tensors)]
    builder = TrialBuilder(path)
    for _ in range(steps):
        builder.step({f"gradient/layer{i}.weight": v for i, v in enumerate(values)})
    builder.close()


def throughput(path: Path, repeats: int) -> dict[str, float]:
    out = {}
    for name, make in RULES.items():
        rates = []
        for _ in range(repeats):
            rule = make(create_trial(path))
            start = time.perf_counter()
            count = sum(1 for _ in iter_findings(rule))
            rates.append(count / (time.perf_counter() - start))
        out[name] = statistics.median(rates)
    return out


def latency(root: Path, steps: int, tensors: int, size: int) -> list[float]:
    path = root / "live"
    rng = np.random.default_rng(1)
    values = {f"gradient/layer{i}.weight": rng.standard_normal(size) for i in range(tensors)}
    builder = TrialBuilder(path)
    builder.step(values)
    builder.flush()
    published: dict[int, float] = {}
    delays: list[float] = []

    def train() -> None:
        for _ in range(steps):
            time.sleep(0.05)  # the time a training step takes
            step = builder.step(values)
            builder.flush()
            published[step] = time.time()
        builder.close()

    trainer = threading.Thread(target=train)
    trainer.start()
    for finding in iter_findings(VanishingGradient(create_trial(path)), poll_interval=0.1):
        if finding.step in published:
            delays.append(time.time() - published[finding.step])
    trainer.join()
    return delays


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--tensors", type=int, default=50)
    parser.add_argument("--size", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--live-steps", type=int, default=60)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        start = time.perf_counter()
        write_trial(root / "trial", args.steps, args.tensors, args.size)
        print(
            f"wrote {args.steps} steps x {args.tensors} tensors "
            f"in {time.perf_counter() - start:.1f} s"
        )
        rates = throughput(root / "trial", args.repeats)
        for name, rate in rates.items():
            print(f"{name:26s} {rate:8.0f} evaluations/s  ({rate / 330:.1f}x smdebug's ~330/s)")
        ratio = rates["VanishingGradient"] / rates["PerTensorVanishingGradient"]
        print(f"VanishingGradient / its per-tensor twin (same run): {ratio:.1f}x")
        delays = latency(root, args.live_steps, args.tensors, args.size)
        print(
            f"live: finding after publication median {1000 * statistics.median(delays):.0f} ms, "
            f"max {1000 * max(delays):.0f} ms over {len(delays)} steps"
        )


if __name__ == "__main__":
    main()
