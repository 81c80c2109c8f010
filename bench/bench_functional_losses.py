"""What a functional loss call costs once a PyTorch hook wrapped it (issue 44: a functional
regression's outcome; the classification losses under zero code change).

Every PyTorch hook wraps ``F.mse_loss`` and its kin so that it saves a regression's prediction
and target where ``inputs`` is due; zero code change also lets ``F.cross_entropy`` and its kin
hand their inputs on (the outcome). On a step where nothing is due, each call pays the wrapper
and one look at the schedule. This times a call of the wrapped function against the original
(``__wrapped__``) in the same process, on a model's output of 64 rows, with a hook made through
the public API (the default configuration, a registered model, inside a training step whose
``inputs`` are not due), rounds alternating; it reports the median microseconds per call.

    .venv/bin/python bench/bench_functional_losses.py [--rounds 7] [--calls 20000]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import timeit
from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from torch.nn import functional

from tensortap.pytorch import Hook, _outcome


def _per_call(fn: Callable[..., Any], call_args: tuple[Any, ...], calls: int) -> float:
    """Microseconds a call of ``fn(*call_args)``, over ``calls`` calls."""
    return timeit.timeit(lambda: fn(*call_args), number=calls) / calls * 1e6


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--calls", type=int, default=20_000)
    args = parser.parse_args()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as out:
        model = nn.Linear(8, 10)
        hook = Hook(out_dir=out)  # the default collections: losses, vitals
        hook.register_module(model)
        x = torch.randn(64, 8)
        model(x)  # a step under way; its inputs are not due
        scores, classes = model(x).detach(), torch.randint(0, 10, (64,))
        prediction, target = scores[:, 0].contiguous(), torch.randn(64)
        cases: dict[str, tuple[Callable[..., Any], tuple[Any, ...]]] = {
            "F.mse_loss, every hook": (functional.mse_loss, (prediction, target)),
            "F.cross_entropy, zero code change": (functional.cross_entropy, (scores, classes)),
        }
        print(f"torch {torch.__version__}, {args.calls} calls a round, {args.rounds} rounds")
        for label, (wrapped, call_args) in cases.items():
            original: Callable[..., Any] = wrapped.__wrapped__  # type: ignore[attr-defined]
            tapped = _outcome._classification_tapped
            _outcome._classification_tapped = True  # as zero code change sets it
            try:
                times: dict[str, list[float]] = {"original": [], "wrapped": []}
                for _ in range(args.rounds):
                    for name, fn in (("original", original), ("wrapped", wrapped)):
                        times[name].append(_per_call(fn, call_args, args.calls))
            finally:
                _outcome._classification_tapped = tapped
            before = statistics.median(times["original"])
            after = statistics.median(times["wrapped"])
            print(
                f"{label}: original {before:.2f} us, wrapped {after:.2f} us a call "
                f"(+{after - before:.2f} us)"
            )
        hook.close()


if __name__ == "__main__":
    main()
