"""Rule throughput and live latency.

Throughput: a trial of 2,000 steps x 50 gradient tensors (1,000 float32 values each) is
written once; each rule then walks it (evaluations per second, median of --repeats runs).
PerTensorVanishingGradient reads one tensor at a time (as smdebug's rules did): the speed-up
of reading a step at once, as a ratio measured in the same run.
Latency: a writer publishes a step every 50 ms while VanishingGradient runs live; the delay is
from the step's publication (its wall time + flush) to the rule's finding on it. Then the same
with the default writer, never flushed (what a training script sees): from the step's end to
the finding, on a loop stepping every 50 ms and one stepping every 1.5 s, with idle publishing
(WriterOptions.idle_flush_secs) off and on.

    .venv/bin/python bench/bench_rules.py [--steps 2000] [--tensors 50] [--repeats 3]
    .venv/bin/python bench/bench_rules.py --live-only [--live-steps 60] [--slow-live-steps 20]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
import time
import uuid
from pathlib import Path

import numpy as np

from tensortap import WriterOptions, create_trial
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


def latency(
    root: Path,
    steps: int,
    tensors: int,
    size: int,
    step_secs: float = 0.05,
    options: WriterOptions | None = None,
    flush_each: bool = True,
) -> list[float]:
    """Seconds from each step's end to VanishingGradient's finding on it, the rule following
    the run live (``poll_interval=0.1``). ``flush_each``: the training loop calls flush() after
    every step and the delay counts from the end of that flush (the figure published first);
    otherwise the writer publishes by itself (``options``) and the delay counts from the end
    of the step, as a training script that never flushes sees it."""
    path = root / f"live-{uuid.uuid4().hex[:8]}"
    rng = np.random.default_rng(1)
    values = {f"gradient/layer{i}.weight": rng.standard_normal(size) for i in range(tensors)}
    builder = TrialBuilder(path, writer_options=options)
    builder.step(values)
    builder.flush()
    published: dict[int, float] = {}
    delays: list[float] = []

    def train() -> None:
        for _ in range(steps):
            time.sleep(step_secs)  # the time a training step takes
            step = builder.step(values)
            if flush_each:
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


def live_table(root: Path, tensors: int, size: int, fast_steps: int, slow_steps: int) -> None:
    """Step -> finding with the default writer (never flushed), before idle publishing (off)
    and after, on a loop stepping every 50 ms and one stepping every 1.5 s; the same steps
    flushed one by one for reference."""
    rows = [
        ("flush() after every step", 0.05, fast_steps, None, True),
        (
            "default writer, idle publishing off",
            0.05,
            fast_steps,
            WriterOptions(idle_flush_secs=None),
            False,
        ),
        ("default writer (idle_flush_secs=0.1)", 0.05, fast_steps, WriterOptions(), False),
        (
            "default writer, idle publishing off",
            1.5,
            slow_steps,
            WriterOptions(idle_flush_secs=None),
            False,
        ),
        ("default writer (idle_flush_secs=0.1)", 1.5, slow_steps, WriterOptions(), False),
    ]
    print("| writer | step every | median | max | steps |")
    print("| --- | --- | --- | --- | --- |")
    for label, step_secs, steps, options, flush_each in rows:
        delays = latency(root, steps, tensors, size, step_secs, options, flush_each)
        print(
            f"| {label} | {1000 * step_secs:.0f} ms | {1000 * statistics.median(delays):.0f} ms "
            f"| {1000 * max(delays):.0f} ms | {len(delays)} |",
            flush=True,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--tensors", type=int, default=50)
    parser.add_argument("--size", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--live-steps", type=int, default=60)
    parser.add_argument("--slow-live-steps", type=int, default=20)
    parser.add_argument(
        "--live-only", action="store_true", help="only the live-latency table (default writer)"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        if args.live_only:
            live_table(root, args.tensors, args.size, args.live_steps, args.slow_live_steps)
            return
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
        live_table(root, args.tensors, args.size, args.live_steps, args.slow_live_steps)


if __name__ == "__main__":
    main()
