"""A trial's opening cost grows linearly in its workers: the store requests to open a trial of
W workers (each with the same steps) are a + b*W, counted exactly (issue 23's scaling
criterion; the times are in bench/bench_scale.py and docs/scale.md)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

import tensortap as tt
from tensortap.testing._counting import counting_store
from tensortap.trials._trial import Trial


def _write(out: Path, workers: int) -> None:
    for worker in range(workers):
        hook = tt.Hook(
            out,
            save_config=tt.SaveConfig(save_interval=1),
            include_collections=["losses", "gradients"],
            worker=worker,
            num_workers=workers,
        )
        hook.get_collection("gradients").reduction_config = tt.ReductionConfig(norms=["l2"])
        for step in range(3):
            hook.save_scalar("loss", 1.0 / (step + 1), "losses")
            hook.save_tensor("gradient/w", np.full(4, float(worker)), "gradients")
            hook.next_step()
        hook.close()


def _requests_to_open(out: Path) -> tuple[int, Trial]:
    store, counts = counting_store(out)
    trial = Trial(store)
    trial.steps()  # a trial reads its index when first asked (reading series never does)
    return sum(counts.values()), trial


def test_requests_to_open_a_trial_grow_linearly_in_its_workers(tmp_path: Path) -> None:
    counts = {}
    for workers in (2, 4, 8):
        _write(tmp_path / str(workers), workers)
        counts[workers], trial = _requests_to_open(tmp_path / str(workers))
        assert trial.workers() == [f"worker_{w}" for w in range(workers)]
        w = trial.tensor("gradient/w")
        assert [w.reduction_value(2, "l2", worker=f"worker_{k}") for k in range(workers)] == [
            float(np.linalg.norm(np.full(4, float(k)))) for k in range(workers)
        ]
    per_worker = (counts[4] - counts[2]) / 2
    assert per_worker > 0
    assert counts[8] - counts[4] == 4 * per_worker  # exactly affine: a + b * workers
