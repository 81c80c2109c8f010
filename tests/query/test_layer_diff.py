"""Which layer changed between two runs (issue 47 item 5): two real short PyTorch runs of the
same model, data and seed, where run B changed one layer (its initial weights scaled x10, or
frozen); the per-layer diff names that layer first, by a wide margin, and two runs with no
change differ nowhere."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

import tensortap.pytorch as tt  # noqa: E402
from tensortap.query import layer_diff  # noqa: E402
from tests.cli.test_jobs import run_cli  # noqa: E402
from tests.helpers.json_get import get_json as get  # noqa: E402


def train(out: Path, change: str | None = None, steps: int = 40) -> None:
    """A small classifier trained with SGD; ``change``: ``scale`` multiplies the middle
    layer's initial weights by 10, ``freeze`` keeps it out of training."""
    torch.manual_seed(0)
    middle = nn.Linear(16, 16)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), middle, nn.ReLU(), nn.Linear(16, 3))
    if change == "scale":
        with torch.no_grad():
            middle.weight.mul_(10)
    if change == "freeze":
        for p in middle.parameters():
            p.requires_grad_(False)
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(256, 8, generator=g), torch.randint(0, 3, (256,), generator=g)
    hook = tt.Hook(
        str(out),
        save_config=tt.SaveConfig(save_interval=5),
        include_collections=["weights", "biases", "gradients"],
    )
    hook.register_module(model)
    opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.05)
    for i in range(steps):
        batch = slice((i * 32) % 256, (i * 32) % 256 + 32)
        opt.zero_grad()
        nn.functional.cross_entropy(model(x[batch]), y[batch]).backward()
        opt.step()
    hook.close()


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("diff")
    out = {}
    for name in ("base", "same", "scale", "freeze"):
        out[name] = root / name
        train(out[name], None if name in ("base", "same") else name)
    return out


@pytest.mark.parametrize("change", ["scale", "freeze"])
def test_the_changed_layer_is_named_first(runs: dict[str, Path], change: str) -> None:
    with tt.create_trial(str(runs["base"])) as a, tt.create_trial(str(runs[change])) as b:
        layers = layer_diff(a, b)
    assert [d.layer for d in layers][:1] == ["2"]
    first, rest = layers[0], layers[1:]
    assert {d.layer for d in rest} == {"0", "4"}
    # by a wide margin: the other layers' own weights barely differ (their gradients do:
    # a change spreads, which is why a layer is ranked by what it holds first)
    assert all(d.score < 0.1 for d in rest)
    if change == "scale":
        assert first.score == pytest.approx(1.0, abs=0.01)  # ten times: one order
        assert first.headline.startswith("2.weight rms") and "(x10)" in first.headline
        assert any(d.spread > 0.5 for d in rest)  # their gradients did change
    else:
        assert first.score == float("inf")
        assert first.headline == "2.weight never moves in run B"
        saved = [s for s in first.statistics if s.statistic == "saved"]
        # no gradient, and no weights "before the first update" (there is none) in run B
        assert {s.tensor for s in saved} == {
            "gradient/2.weight",
            "gradient/2.bias",
            "initial/2.weight",
        }


def test_two_runs_with_no_change_differ_nowhere(runs: dict[str, Path]) -> None:
    with tt.create_trial(str(runs["base"])) as a, tt.create_trial(str(runs["same"])) as b:
        layers = layer_diff(a, b)
    assert {d.layer for d in layers} == {"0", "2", "4"}
    assert all(d.score == 0.0 and d.spread == 0.0 for d in layers)


def test_the_cli_prints_the_layers_most_changed_first(runs: dict[str, Path]) -> None:
    code, out, err = run_cli("diff", str(runs["base"]), str(runs["scale"]))
    assert code == 0, err
    lines = out.splitlines()
    assert lines[1].split()[0] == "2" and "(x10)" in lines[1]
    code, out, err = run_cli("diff", str(runs["base"]), str(runs["freeze"]), "--json")
    assert code == 0, err
    layers = json.loads(out)
    assert layers[0]["layer"] == "2" and layers[0]["score"] == "Infinity"


def test_the_compare_view_lists_the_layers_that_differ(
    runs: dict[str, Path], serve, browser
) -> None:
    pytest.importorskip("starlette")
    dashboard = serve(runs["base"], runs["scale"])
    status, body = get(dashboard.url + "api/runs")
    assert status == 200
    ids = {Path(r["location"]).name: r["id"] for r in body["runs"]}
    status, diff = get(dashboard.url + f"api/diff?a={ids['base']}&b={ids['scale']}")
    assert status == 200 and [d["layer"] for d in diff["layers"]][:1] == ["2"]
    status, refused = get(dashboard.url + f"api/diff?a={ids['base']}&b={ids['base']}")
    assert status == 400 and "same run" in refused["error"]

    browser.visit(dashboard.url + f"compare?ids={ids['base']},{ids['scale']}")
    rows = browser.until(
        "return [...document.querySelectorAll('#diff tr.diff-row')]"
        ".map((tr) => [...tr.children].map((td) => td.textContent));",
        lambda v: len(v) == 3,
    )
    assert rows[0][0] == "2" and rows[0][1] == "1.00" and "(x10)" in rows[0][3]
    assert browser.errors() == []
