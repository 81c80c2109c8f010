"""Tensor statistics against the core's reductions: random float tensors of every dtype (with
NaN and infinities, for hypothesis), converted to records as the hook does, and the check that
each record holds what :func:`~tensortap.core._reductions.compute_reduction` gives."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from tensortap.core._recorder import SavePlan
from tensortap.core._reductions import compute_reduction

DTYPES = {"float32": torch.float32, "float64": torch.float64, "bfloat16": torch.bfloat16}
DTYPES["float16"] = torch.float16
VALUES = st.one_of(
    st.floats(-1e3, 1e3, width=16),
    st.sampled_from([0.0, 1e-6, -2.5, 600.0, float("nan"), float("inf"), -float("inf")]),
)


def tensor_lists(min_numel: int) -> st.SearchStrategy[list[tuple[str, np.ndarray]]]:
    """One to six tensors, each a dtype name (of :data:`DTYPES`) and ``min_numel`` to 30
    values."""
    return st.lists(
        st.tuples(
            st.sampled_from(sorted(DTYPES)),
            hnp.arrays(np.float64, st.integers(min_numel, 30), elements=VALUES),
        ),
        min_size=1,
        max_size=6,
    )


def converted(
    converter: Any, tensors: list[tuple[str, np.ndarray]], plan: SavePlan, grouped: bool
) -> list[tuple[list[Any], torch.Tensor]]:
    """Each tensor (of :func:`tensor_lists`) and its records from ``converter`` (a
    ``TorchConverter``; inside one ``together()`` block when ``grouped``), resolved."""
    saved: list[tuple[list[Any], torch.Tensor]] = []
    with converter.together() if grouped else contextlib.nullcontext():
        for i, (dtype, values) in enumerate(tensors):
            t = torch.from_numpy(values).to(DTYPES[dtype])
            saved.append((converter.records(f"t{i}", t, plan), t))
    converter.resolve()
    return saved


def check_records(
    records: list[Any],
    tensor: torch.Tensor,
    rel: float,
    slack: Callable[[str, float], float],
) -> None:
    """Each record's value is the core's reduction of ``tensor``, within ``rel`` and an
    absolute ``slack(reduction, scale)``, ``scale`` the largest finite magnitude (sums err
    relative to it)."""
    whole = tensor.double().numpy()
    finite = np.abs(whole[np.isfinite(whole)])
    scale = float(finite.max()) if finite.size else 0.0
    for rec in records:
        want = compute_reduction(whole, rec.reduction, rec.on_abs)
        where = (rec.name, rec.reduction, rec.on_abs)
        assert rec.deferred is None, where
        if np.isnan(want):
            assert np.isnan(rec.value), (where, rec.value)
        else:
            allowed = slack(rec.reduction, scale) + 1e-30
            assert rec.value == pytest.approx(want, rel=rel, abs=allowed), where
