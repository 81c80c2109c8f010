"""What the vital signs of every step cost a PyTorch loop, pinned by counts (never durations):
the total gradient norm's kernels without ``get_total_norm``'s Python around them (equal to
clip_grad_norm_'s bit for bit)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
import tensortap as tt  # noqa: E402
import tensortap.pytorch as ttp  # noqa: E402
from tensortap.pytorch._vitals import total_norm  # noqa: E402


def _count_get_total_norm(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls = [0]
    original = torch.nn.utils.get_total_norm

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        return original(*args, **kwargs)

    monkeypatch.setattr(torch.nn.utils, "get_total_norm", counted)
    return calls


@pytest.mark.parametrize(
    "shapes", [[(3,)], [(4, 2), (2,)], [(64, 32), (32,), (10, 32), (10,)], [(8, 8)] * 40]
)
def test_the_norm_of_one_dtypes_gradients_equals_clip_grad_norm_s_without_its_python(
    shapes: list[tuple[int, ...]], monkeypatch: pytest.MonkeyPatch
) -> None:
    torch.manual_seed(0)
    grads = [torch.randn(*s) * 10 ** (i % 5 - 2) for i, s in enumerate(shapes)]
    expected = torch.nn.utils.get_total_norm(grads, 2.0)
    params = [torch.nn.Parameter(torch.zeros_like(g)) for g in grads]
    for p, g in zip(params, grads, strict=True):
        p.grad = g.clone()
    clipped = torch.nn.utils.clip_grad_norm_(params, 1e-3)
    calls = _count_get_total_norm(monkeypatch)
    got = total_norm(grads)
    assert calls[0] == 0  # the kernels only
    assert got is not None and torch.equal(got, expected) and torch.equal(got, clipped)


def test_gradients_of_mixed_dtypes_go_through_get_total_norm(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    grads = [torch.randn(5), torch.randn(3, dtype=torch.float64)]
    expected = torch.nn.utils.get_total_norm(grads, 2.0)
    calls = _count_get_total_norm(monkeypatch)
    got = total_norm(grads)
    assert calls[0] == 1
    assert got is not None and torch.equal(got, expected)
    assert total_norm([]) is None


def test_a_loop_that_does_not_clip_saves_get_total_norms_value_every_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.ReLU(), torch.nn.Linear(5, 3))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    hook = ttp.Hook(tmp_path, save_config=tt.SaveConfig(save_interval=10))
    hook.register_module(model)
    calls = _count_get_total_norm(monkeypatch)
    norms = []
    for _ in range(4):
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(torch.randn(8, 6)), torch.arange(8) % 3).backward()
        grads = [p.grad for p in model.parameters() if p.grad is not None]
        norms.append(float(torch.nn.utils.get_total_norm(grads, 2.0)))
        optimizer.step()
    hook.close()
    assert calls[0] == 4  # the test's own: the hook's norm took the kernels only
    saved = tt.create_trial(tmp_path).tensor("vitals/grad_norm").values(mode=tt.modes.TRAIN)
    assert list(saved.values()) == norms


def test_thinned_vital_signs_take_the_gradient_norm_only_where_saved(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``vitals`` every 3rd step (a collection setting): the pass over the gradients is taken
    at those steps only, not at every step and then thrown away."""
    import tensortap.pytorch._vitals as vitals

    taken: list[int] = []  # the steps at which the gradients' norm was taken
    original = vitals.total_norm

    def counted(grads: list[Any]) -> Any:
        taken.append(hook._recorder.mode_step)
        return original(grads)

    monkeypatch.setattr(vitals, "total_norm", counted)
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    hook = ttp.Hook(tmp_path, save_config=tt.SaveConfig(save_interval=100))
    hook.get_collection("vitals").save_config = tt.SaveConfig(save_interval=3)
    hook.register_module(model)
    for _ in range(9):
        optimizer.zero_grad()
        model(torch.randn(2, 4)).sum().backward()
        optimizer.step()
    hook.close()
    saved = tt.create_trial(tmp_path).tensor("vitals/grad_norm").steps(mode=tt.modes.TRAIN)
    assert saved == [0, 3, 6]
    assert set(taken) == {0, 3, 6}  # (twice at step 0: after backward, before the optimizer
    # was known, and again at its step)


@pytest.mark.parametrize("keyword", [False, True])
def test_a_clip_handed_its_norm_saves_that_norm_not_the_clipped_one(
    tmp_path: Path, keyword: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Accelerate (>= 1.16) clips as ``get_total_norm`` then ``clip_grads_with_norm_(params,
    max_norm, total_norm)``: the norm it was handed is the step's, from before the clip, and
    the hook computes none of its own once it knows the optimizer."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.ReLU(), torch.nn.Linear(5, 3))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    hook = ttp.Hook(tmp_path, save_config=tt.SaveConfig(save_interval=10))
    hook.register_module(model)
    import tensortap.pytorch._vitals as vitals

    own: list[int] = []
    original = vitals.total_norm

    def counted(grads: list[Any]) -> Any:
        own.append(1)
        return original(grads)

    monkeypatch.setattr(vitals, "total_norm", counted)
    from torch.nn.utils import clip_grads_with_norm_, get_total_norm  # as Accelerate imports

    norms, after = [], []
    for _ in range(4):
        optimizer.zero_grad()
        x = torch.randn(8, 6) * 10
        torch.nn.functional.cross_entropy(model(x), torch.arange(8) % 3).backward()
        params = list(model.parameters())
        total = get_total_norm([p.grad for p in params], 2.0)
        if keyword:
            clip_grads_with_norm_(params, max_norm=1e-3, total_norm=total)
        else:
            clip_grads_with_norm_(params, 1e-3, total)
        norms.append(float(total))
        after.append(float(get_total_norm([p.grad for p in params], 2.0)))
        optimizer.step()
    hook.close()
    assert all(a < 1.1e-3 < n for a, n in zip(after, norms, strict=True))  # it clipped
    saved = tt.create_trial(tmp_path).tensor("vitals/grad_norm").values(mode=tt.modes.TRAIN)
    assert list(saved.values()) == norms
    assert own == [1]  # at step 0 only, after backward, before the optimizer was known
