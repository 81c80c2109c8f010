"""The cost per step of the JAX/Optax guard (``tensortap.jax.Guard``) and of the Keras guard
(``tensortap.keras.Guard``) on a small MLP on the CPU: the same jitted step, or the same
``model.fit``, with and without the guard, interleaved in rounds, median of the rounds.

    PYTHONPATH=$PWD/src python bench/bench_heal_guard.py [--steps 2000] [--rounds 5] [--keras]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from typing import Any

import numpy as np


def optax_rounds(steps: int, rounds: int, width: int) -> dict[str, float]:
    import jax
    import jax.numpy as jnp
    import optax

    import tensortap.jax as ttj

    k1, k2 = jax.random.split(jax.random.PRNGKey(0))
    params0 = {
        "w1": jax.random.normal(k1, (64, width)) * 0.1,
        "b1": jnp.zeros(width),
        "w2": jax.random.normal(k2, (width, 10)) * 0.1,
    }
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.normal(size=(64, 64)).astype("float32"))
    y = jnp.asarray(rng.integers(0, 10, size=64))

    def loss_fn(p: Any) -> Any:
        logits = jnp.tanh(x @ p["w1"] + p["b1"]) @ p["w2"]
        return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()

    def make(tx: Any, extra: bool) -> Any:
        @jax.jit
        def step(p: Any, s: Any) -> Any:
            loss, grads = jax.value_and_grad(loss_fn)(p)
            kwargs = {"value": loss} if extra else {}
            updates, s = tx.update(grads, s, p, **kwargs)
            return optax.apply_updates(p, updates), s

        return step

    guard = ttj.Guard(optax.adam(1e-3))
    finite = optax.apply_if_finite(optax.adam(1e-3), max_consecutive_errors=5)
    variants = {
        "adam": (optax.adam(1e-3), make(optax.adam(1e-3), False)),
        "apply_if_finite(adam)": (finite, make(finite, False)),
        "guard(adam)": (guard, make(guard, True)),
        "guard(adam)+read": (guard, make(guard, True)),
        "guard(adam)+read/10": (guard, make(guard, True)),
    }
    times: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(rounds):
        for name, (tx, step) in variants.items():
            params, state = params0, tx.init(params0)
            params, state = step(params, state)  # compiled outside the timing
            jax.block_until_ready(params)
            start = time.perf_counter()
            every = {"+read": 1, "+read/10": 10}.get(name[len("guard(adam)") :], 0)
            for index in range(steps):
                params, state = step(params, state)
                if every and index % every == 0:
                    guard.read(state)  # waits for the step: the host reads its counts
            jax.block_until_ready(params)
            times[name].append((time.perf_counter() - start) / steps * 1e6)
    return {name: statistics.median(t) for name, t in times.items()}


def keras_rounds(epochs: int, rounds: int) -> dict[str, float]:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import keras

    import tensortap.keras as tt

    rng = np.random.default_rng(0)
    x = rng.normal(size=(2048, 64)).astype("float32")
    y = rng.integers(0, 10, size=2048)

    def fit(callbacks: list[Any]) -> float:
        keras.utils.set_random_seed(0)
        model = keras.Sequential(
            [keras.Input((64,)), keras.layers.Dense(64, activation="relu"), keras.layers.Dense(10)]
        )
        model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(True))
        model.fit(x[:64], y[:64], batch_size=32, verbose=0)  # compile outside the timing
        start = time.perf_counter()
        model.fit(x, y, batch_size=32, epochs=epochs, verbose=0, callbacks=callbacks)
        return (time.perf_counter() - start) / (epochs * len(x) // 32) * 1e6

    times: dict[str, list[float]] = {"fit": [], "fit+Guard": []}
    for _ in range(rounds):
        times["fit"].append(fit([]))
        times["fit+Guard"].append(fit([tt.Guard()]))
    return {name: statistics.median(t) for name, t in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--width", type=int, default=256)
    parser.add_argument("--keras", action="store_true", help="also the Keras guard")
    args = parser.parse_args()
    result = optax_rounds(args.steps, args.rounds, args.width)
    base = result["adam"]
    for name, us in result.items():
        print(f"optax {name:22s} {us:8.1f} us/step  {us / base:5.2f}x")
    if args.keras:
        result = keras_rounds(2, args.rounds)
        base = result["fit"]
        for name, us in result.items():
            print(f"keras {name:22s} {us:8.1f} us/step  {us / base:5.2f}x")


if __name__ == "__main__":
    main()
