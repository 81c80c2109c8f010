"""The generated detection benchmark (bench/detection/generated): the suite's structure (splits,
counts, disjoint seeds, a deterministic case list), the space and the faults' mutations, and a
quick run of the runner. The whole suite runs under `make bench`."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("sklearn")
ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # the benchmarks live beside the package, not in it
    sys.path.insert(0, str(ROOT))

from bench.detection.generated.faults import FAULTS, KINDS  # noqa: E402
from bench.detection.generated.space import draw  # noqa: E402
from bench.detection.generated.suite import SPLITS, cases  # noqa: E402


def test_draw_is_deterministic() -> None:
    for seed in (0, 1, 17, 5003, 123456):
        assert draw(seed) == draw(seed)
    assert len({draw(seed) for seed in range(40)}) == 40
    assert len({draw(seed).arch for seed in range(200)}) == 8


@pytest.mark.parametrize("kind", KINDS)
def test_each_fault_applies_to_some_draw(kind: str) -> None:
    fault = FAULTS[kind]
    assert fault.name == kind
    assert any(fault.applies(draw(seed)) for seed in range(2000))


def test_fault_kinds() -> None:
    assert len(KINDS) >= 23
    assert {"lr_x100", "softmax_twice", "eval_mode_forgotten", "loss_broadcast"} <= set(KINDS)


def test_case_list_structure() -> None:
    every = cases("all")
    assert [c.name for c in every] == [c.name for c in cases("all")]  # deterministic
    assert every == cases("dev") + cases("heldout")
    assert {c.split for c in every} == set(SPLITS)
    labels = Counter(c.label for c in every)
    assert labels["healthy"] >= 200
    assert sum(n for label, n in labels.items() if label != "healthy") >= 400
    assert all(labels[kind] >= 20 for kind in KINDS), labels
    assert len({c.name for c in every}) == len(every)
    for split in SPLITS:
        mine = [c for c in every if c.split == split]
        assert abs(len(mine) - len(every) / 2) <= len(every) * 0.1
    dev = {c.seed for c in every if c.split == "dev"} | {
        c.draw.seed for c in every if c.split == "dev"
    }
    held = {c.seed for c in every if c.split == "heldout"}
    held |= {c.draw.seed for c in every if c.split == "heldout"}
    assert not dev & held
    for c in every:
        assert c.fault is None if c.label == "healthy" else c.fault == c.label
        assert c.fault is None or FAULTS[c.fault].applies(c.draw)


def test_quick_run(tmp_path: Path) -> None:
    out = tmp_path / "generated.json"
    done = subprocess.run(
        [sys.executable, "-m", "bench.detection.generated", "--quick", "--jobs", "2",
         "--cache", str(tmp_path / "cache"), "--json", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(out.read_text())
    results = report["results"]
    assert sum(r["label"] == "healthy" for r in results) >= 4
    assert sum(r["label"] != "healthy" for r in results) >= 4
    for r in results:
        assert r["split"] == "dev" and r["trained"]
        assert (tmp_path / "cache" / "dev" / r["name"] / "case.json").exists()
    assert set(report["summary"]) == {"dev"}
    dev = report["summary"]["dev"]
    assert dev["healthy"]["n"] + dev["faulty"]["n"] == len(results)
    assert report["cases"]["dev"] == [c.name for c in cases("dev")]
    assert "| fault kind | n | detected |" in done.stdout
