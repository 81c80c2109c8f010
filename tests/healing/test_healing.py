"""tensortap.healing: the guard's decision written once, equal under NumPy and jax.numpy and to
the median/MAD it states; the window keeps tripped and non-finite steps out; the log spends the
skip budget; nothing here imports a framework."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import numpy as np
import pytest

from tensortap.exceptions import InvalidConfigError
from tensortap.healing import (
    BITS,
    MEDIAN,
    SKIPPED,
    GuardLog,
    GuardSettings,
    RobustWindow,
    SkipBudget,
    Z,
    score,
)


def test_score_matches_a_plain_median_and_mad() -> None:
    rng = np.random.default_rng(0)
    window = np.full((3, 20), np.nan)
    window[:, :13] = rng.lognormal(size=(3, 13))
    values = np.array([50.0, np.nan, 1.0])
    with np.errstate(invalid="ignore"):
        median, z, bits, fresh = score(
            np,
            window,
            values,
            np.array([True, True, False]),
            np.array([True, True, True]),
            warmup=10,
            spike_z=6,
            spike_ratio=2,
        )
    filled = window[:, :13]
    expected = np.median(filled, axis=1)
    mad = np.median(np.abs(filled - expected[:, None]), axis=1)
    np.testing.assert_allclose(median, expected)
    np.testing.assert_allclose(z[0], (50 - expected[0]) / (1.4826 * mad[0]))
    # loss: spike; gradient norm: non-finite; update norm: not measured, so neither
    assert bits.tolist() == [0, 1, 0, 1, 0, 0]
    assert np.isnan(fresh[1:]).all() and fresh[0] == 50


def test_score_is_the_same_under_jax() -> None:
    jnp = pytest.importorskip("jax.numpy")
    rng = np.random.default_rng(1)
    window = rng.lognormal(size=(3, 16)).astype(np.float32)
    window[1, 5:] = np.nan
    values = np.array([9.0, 1.0, np.inf], dtype=np.float32)
    args = (np.array([True, True, True]), np.array([True, False, True]))
    kwargs: dict[str, Any] = {"warmup": 4, "spike_z": 6.0, "spike_ratio": 2.0}
    with np.errstate(invalid="ignore"):
        ours = score(np, window, values, *args, **kwargs)
    theirs = score(jnp, jnp.asarray(window), jnp.asarray(values), *map(jnp.asarray, args), **kwargs)
    for a, b in zip(ours, theirs, strict=True):
        np.testing.assert_allclose(np.asarray(b), a, rtol=1e-6, equal_nan=True)


def test_window_keeps_trips_out_and_warms_up() -> None:
    window = RobustWindow(window=8, warmup=3, spike_z=6, spike_ratio=2)
    rows = [window.judge([1.0 + 0.01 * i, None, None]) for i in range(2)]
    assert np.isnan(rows[1][Z])  # still warming up
    row = window.judge([float("nan"), None, None])
    assert row[BITS] == 1 and row[SKIPPED] == 1
    for i in range(3):
        window.judge([1.0 + 0.01 * i, None, None])
    spike = window.judge([100.0, None, None])
    assert spike[BITS + 3] == 1 and spike[MEDIAN] == pytest.approx(
        1.01
    )  # of 1.0, 1.01, 1.0, 1.01, 1.02
    assert np.isfinite(window.values).sum() == 5  # the NaN and the spike never entered


def test_log_spends_the_budget_and_asks_for_a_rollback() -> None:
    asked: list[tuple[int, list[object], str]] = []

    class Target:
        def request(self, step: int, batches: list[object], reason: str) -> None:
            asked.append((step, batches, reason))

    settings = GuardSettings(budget=SkipBudget(2, 10, then="rollback"), rollback=Target())
    log = GuardLog(settings)
    window = RobustWindow(window=8, warmup=3, spike_z=6, spike_ratio=2)
    for step in range(12):
        value = float("inf") if step in (3, 8) else 1.0
        log.take(step, window.judge([value, None, None]), batch=f"b{step}")
    assert [e.step for e in log.events] == [3, 8] and log.skipped == 2
    assert [(s, b) for s, b, _ in asked] == [(3, ["b3", "b8"])]
    assert log.status.rollbacks_requested == 1 and not log.should_stop


def test_settings_refuse_bad_values() -> None:
    with pytest.raises(InvalidConfigError, match="needs rollback="):
        GuardSettings(budget=SkipBudget(1, 5, then="rollback"))
    with pytest.raises(InvalidConfigError, match="signals must be a list"):
        GuardSettings(signals="loss")
    with pytest.raises(InvalidConfigError, match="spike_z must be a number"):
        GuardSettings(spike_z=True)


def test_imports_no_framework() -> None:
    code = (
        "import sys, tensortap.healing; "
        "print(sorted(m for m in ('torch', 'jax', 'keras', 'tensorflow') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
