"""The stranger corpus's scorer: manifests are validated, and the score counts what it says."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.stranger.__main__ import Result, load, score, wilson


def _corpus(root: Path, entries: list[dict[str, object]]) -> None:
    author = root / "a"
    author.mkdir(parents=True)
    for entry in entries:
        (author / str(entry["file"])).write_text("print('train')\n")
    (author / "manifest.json").write_text(json.dumps(entries))


def test_load_reads_every_author_manifest(tmp_path: Path) -> None:
    _corpus(
        tmp_path,
        [
            {"file": "01_ok.py", "framework": "pytorch", "label": "healthy"},
            {"file": "02_lr.py", "framework": "keras", "label": "buggy",
             "accepted_first": ["lr_too_high"]},
        ],
    )  # fmt: skip
    programs = load(tmp_path)
    assert [(p.path.name, p.label, sorted(p.accepted_first)) for p in programs] == [
        ("01_ok.py", "healthy", []),
        ("02_lr.py", "buggy", ["lr_too_high"]),
    ]


@pytest.mark.parametrize(
    ("entry", "says"),
    [
        ({"file": "01_ok.py", "label": "fine"}, "label is one of"),
        ({"file": "../escape.py", "label": "healthy"}, "no program file"),
        ({"file": "01_ok.py", "label": "buggy", "accepted_first": "lr"}, "list of cause ids"),
    ],
)
def test_load_names_the_bad_entry(tmp_path: Path, entry: dict[str, object], says: str) -> None:
    (tmp_path / "escape.py").write_text("")
    author = tmp_path / "a"
    author.mkdir()
    (author / "01_ok.py").write_text("")
    (author / "manifest.json").write_text(json.dumps([entry]))
    with pytest.raises(SystemExit, match=says):
        load(tmp_path)


def test_score_counts_problems_detections_and_first_causes() -> None:
    def r(label: str, verdict: str, cause: str | None, first: bool) -> Result:
        return Result("f.py", "a", "pytorch", label, verdict, cause, first, 1.0)

    results = [
        r("healthy", "healthy", None, False),
        r("healthy", "problem", "dead_relu", False),
        r("buggy", "problem", "lr_too_high", True),
        r("buggy", "problem", "all_zero", False),
        r("buggy", "failed", None, False),
        r("buggy", "healthy", None, False),
    ]
    found = score(results)
    assert (found["healthy"], found["healthy_with_problem"], found["healthy_failed"]) == (2, 1, 0)
    assert (found["buggy"], found["detected"], found["named_first"]) == (4, 3, 1)
    assert found["by_framework"]["pytorch"]["first"] == 1


def test_wilson_interval_brackets_the_rate() -> None:
    lo, hi = wilson(1, 20)
    assert lo < 0.05 < hi
    assert wilson(0, 0) == (0.0, 1.0)


def test_the_development_set_loads_and_differs_from_the_held_out_corpus() -> None:
    """The development corpus (details may be read) is its own author's, never one of the
    held-out corpus's programs (scored only)."""
    from bench.stranger.__main__ import DEV_PROGRAMS, PROGRAMS

    dev, held_out = load(DEV_PROGRAMS), load(PROGRAMS)
    programs = set(Path(DEV_PROGRAMS).glob("*/[0-9][0-9]_*.py"))
    assert len(programs) >= 140  # authors c-k
    # a fixed twin is a program where its author listed it (author m lists them, as healthy)
    programs |= {p.path for p in dev if p.path.parent.name == "fixed"}
    assert any(p.name.startswith("fixed/") and p.label == "healthy" for p in dev)
    # every program file has its manifest entry, and no entry is counted twice
    assert len(dev) == len(programs)
    assert {p.path.resolve() for p in dev} == {path.resolve() for path in programs}
    assert {p.label for p in dev} == {"healthy", "buggy"}
    assert not {p.author for p in dev} & {p.author for p in held_out}
    texts = {p.path.read_text() for p in held_out}
    assert not any(p.path.read_text() in texts for p in dev)
