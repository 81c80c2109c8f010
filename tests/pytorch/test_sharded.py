"""Sharded and replicated models: statistics of whole parameters and gradients.

Shards' partial statistics combine into those of the whole tensor (hypothesis, against the
core's reductions); two real gloo processes under DDP and FSDP2 save the same values, under the
same names, as one process training the unsharded model on the whole batch; ranks configured
differently get NaN and a reported error for what they do not share, and never hang.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from tensortap.core._reductions import compute_reduction
from tensortap.core._vitals import Vital

torch = pytest.importorskip("torch")
from tensortap.pytorch._sharded import _combine, _partials  # noqa: E402
from tests.conftest import helper_cmd  # noqa: E402
from tests.helpers.ranks import run_ranks  # noqa: E402

STATISTICS = [
    *(
        (name, on_abs)
        for name in ("min", "max", "mean", "std", "variance", "sum", "prod")
        for on_abs in (False, True)
    ),
    ("l1", False),
    ("l2", False),
    ("amax", False),
    ("dynamic_range", False),
    ("nonfinite", False),
    ("underflow_fp16", False),
    ("underflow_fp8_e4m3", False),
    ("overflow_fp8_e4m3", False),
]
VALUES = st.one_of(
    st.floats(-1e3, 1e3, width=32),
    st.sampled_from([0.0, 1e-6, -3e-9, 600.0, float("nan"), float("inf")]),
)


@settings(max_examples=60, deadline=None)
@given(
    hnp.arrays(np.float32, st.integers(1, 40), elements=VALUES),
    st.lists(st.integers(0, 40), max_size=3),
)
def test_shards_combine_into_the_whole(values: np.ndarray, cuts: list[int]) -> None:
    bounds = sorted({0, len(values), *(min(c, len(values)) for c in cuts)})
    shards = [torch.from_numpy(values[a:b].copy()) for a, b in itertools.pairwise(bounds)]
    shards.append(torch.zeros(0))  # a rank whose shard is empty (uneven sharding)
    whole = values.astype(np.float64)
    for name, on_abs in STATISTICS:
        rows = np.array([[float(x) for x in _partials(s, name, on_abs)] for s in shards])
        with np.errstate(invalid="ignore", over="ignore"):  # as the caller runs it
            got = _combine(name, rows)
        want = compute_reduction(whole, name, on_abs)
        if np.isnan(want):
            assert np.isnan(got), (name, on_abs, got)
        else:
            assert got == pytest.approx(want, rel=1e-5, abs=1e-9), (name, on_abs)


def _run(out: Path, ranks: int, *args: str, helper_env) -> list[str]:
    env = dict(helper_env, PYTHONPATH=str(Path(__file__).parents[1] / "helpers"))
    done = run_ranks(helper_cmd("sharded_train.py", out, 5, *args), ranks, env, timeout=240)
    outputs = [p.stdout for p in done]
    assert [p.returncode for p in done] == [0] * ranks, (outputs, [p.stderr for p in done])
    return outputs


STATS = ["min", "max", "mean", "std", "variance", "sum", "prod", "amax", "dynamic_range"]
STATS += ["nonfinite", "underflow_bf16", "overflow_fp16", "l1", "l2"]


def test_ddp_and_fsdp2_save_the_statistics_of_the_unsharded_model(
    tmp_path: Path, helper_env
) -> None:
    import tensortap.pytorch as tt

    _run(tmp_path, 1, helper_env=helper_env)
    outputs = _run(tmp_path, 2, helper_env=helper_env)
    assert "rank 0: 6 DTensor parameters" in outputs[0]  # FSDP2 did shard them
    ref = tt.create_trial(tmp_path / "single")
    # each rank's loss is its own half batch's; the clock is no two runs' the same
    own = {"loss", Vital.LOSS, Vital.STEP_TIME, Vital.SAMPLES_PER_SECOND}
    names = sorted(n for n in ref.tensor_names() if n not in own)
    assert Vital.GRAD_NORM in names  # the whole model's, on every rank
    assert "gradient/0.weight" in names and "initial/0.weight" in names
    for kind in ("ddp", "fsdp", "fsdp_early"):
        trial = tt.create_trial(tmp_path / kind)
        assert sorted(trial.tensor_names()) == sorted(ref.tensor_names()), kind
        for worker in ("worker_0", "worker_1"):
            status = trial.worker_status(worker)
            assert status is not None and status["internal_errors"] == 0, (kind, status)
        for name in names:
            want, got = ref.tensor(name), trial.tensor(name)
            scale = float(np.abs(want.value(want.steps()[0])).max())
            for step in want.steps():
                for worker in ("worker_0", "worker_1"):
                    where = f"{kind} {name} step {step} {worker}"
                    np.testing.assert_allclose(
                        got.value(step, worker=worker),
                        want.value(step),
                        rtol=1e-4,
                        atol=1e-6 * scale,
                        err_msg=where,
                    )
                    for stat in STATS:
                        assert got.reduction_value(step, stat, worker=worker) == pytest.approx(
                            want.reduction_value(step, stat), rel=1e-4, abs=1e-6 * scale
                        ), f"{where} {stat}"
                    for stat in ("min", "max", "mean"):
                        assert got.reduction_value(
                            step, stat, abs=True, worker=worker
                        ) == pytest.approx(
                            want.reduction_value(step, stat, abs=True), rel=1e-4, abs=1e-6 * scale
                        ), f"{where} abs {stat}"


def test_ranks_configured_differently_get_nan_and_an_error_not_a_hang(
    tmp_path: Path, helper_env
) -> None:
    import tensortap.pytorch as tt

    _run(tmp_path, 2, "mismatch", helper_env=helper_env)
    trial = tt.create_trial(tmp_path / "fsdp")
    grad = trial.tensor("gradient/0.weight")
    # Rank 0 asked for statistics its peer did not compute: it reports them ...
    status = trial.worker_status("worker_0")
    assert status is not None and status["internal_errors"] > 0
    assert "ShardMismatchError" in status["last_internal_error"]
    status = trial.worker_status("worker_1")  # ... rank 1 found all of its own in rank 0's rows
    assert status is not None and status["internal_errors"] == 0
    for worker in ("worker_0", "worker_1"):
        # What both ranks saved still combines; what one rank alone saved is NaN, not wrong.
        assert grad.reduction_value(2, "l2", worker=worker) > 0
        assert grad.reduction_value(2, "max", worker=worker) > 0
    assert np.isnan(grad.reduction_value(2, "min", worker="worker_0"))
    assert np.isfinite(trial.tensor("0.weight").reduction_value(2, "min", worker="worker_1"))
