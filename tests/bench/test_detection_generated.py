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

from bench.detection.accepted import ACCEPTED_FIRST  # noqa: E402
from bench.detection.generated.faults import FAULTS, KINDS, Fault  # noqa: E402
from bench.detection.generated.faults_dev2 import DEV2_FAULTS  # noqa: E402
from bench.detection.generated.faults_family import FAMILY_FAULTS, implementation  # noqa: E402
from bench.detection.generated.space import (  # noqa: E402
    FAMILY,
    HELD_OUT_ARCHS,
    HELD_OUT_SCHEDULES,
    HELD_OUT_TASKS,
    draw,
    space_of,
)
from bench.detection.generated.suite import SPLITS, Case, cases, manifest  # noqa: E402

NEW_KINDS = (
    "recurrent_explosion",
    "zero_gradients",
    "inputs_too_small",
    "gradient_ascent",
    "memorisation",
)
#: what a fault implementation changes in the script (faults.Fault's hooks and switches)
HOOKS = (
    "adjust", "wants_raw_features", "training_rows", "before_normalising", "after_normalising",
    "target_as_column", "handles_imbalance", "softmax_output", "mutate_model", "loss",
    "optimizer_params", "optimizer_options", "schedule", "regression_targets", "recurrence",
    "zero_grad", "optimizer_step", "divide_accumulated", "scheduler_per_batch", "eval_mode",
    "loss_sign", "sum_micro_batches", "clear_grads", "epoch_targets", "eval_module", "backward",
    "take_step",
)  # fmt: skip
#: what every implementation of a kind shares because the kind needs it: a recurrence explodes
#: only without gates (a plain ReLU RNN); the fault is how its recurrent weights start
SHARED_PRECONDITIONS = {("recurrent_explosion", "recurrence")}
#: sha256 of the by-seed and family splits' cases (name and hash, a line each) before the dev2
#: split came: adding a split must not change them (update only when a change to them is meant)
UNCHANGED_SPLITS = {
    "dev": "ede7a16f18ec917f",
    "heldout": "f54fad4d82113d0d",
    "family": "451a9b8fc7a88006",
}


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
    second = FAMILY_FAULTS[kind]
    assert second.name == kind
    assert any(second.applies(draw(seed, FAMILY)) for seed in range(2000))


def test_fault_kinds() -> None:
    assert len(KINDS) >= 28
    assert {"lr_x100", "softmax_twice", "eval_mode_forgotten", "loss_broadcast"} <= set(KINDS)
    assert set(NEW_KINDS) <= set(KINDS)
    assert tuple(FAMILY_FAULTS) == KINDS
    assert set(ACCEPTED_FIRST) == set(KINDS)  # every kind's accepted first causes are fixed


def _changes(fault: Fault) -> dict[str, object]:
    return {hook: getattr(type(fault), hook) for hook in HOOKS}


@pytest.mark.parametrize("kind", KINDS)
def test_family_implementation_is_a_second_one(kind: str) -> None:
    """The family split injects each kind through code the dev split never runs."""
    first, second = FAULTS[kind], FAMILY_FAULTS[kind]
    assert implementation(kind, "dev") is first and implementation(kind, "heldout") is first
    assert implementation(kind, "family") is second
    assert type(second) is not type(first) and isinstance(second, type(first))
    differ = [h for h, v in _changes(second).items() if v != _changes(first)[h]]
    assert differ, f"{kind}: the family implementation changes nothing the dev one does not"


def test_dev_space_never_draws_a_held_out_family() -> None:
    for seed in range(3000):
        d = draw(seed)
        assert d.arch not in HELD_OUT_ARCHS and d.task not in HELD_OUT_TASKS, d
        assert d.schedule not in HELD_OUT_SCHEDULES and space_of(d) != FAMILY
        assert space_of(draw(seed, FAMILY)) == FAMILY


def test_family_split_is_held_out_from_dev() -> None:
    """No architecture/data set pair, and no fault implementation, of the family split is one
    the dev (or by-seed held-out) split uses; every family case holds out its architecture or
    its data set."""
    family = cases("family")
    by_seed = cases("dev") + cases("heldout")
    for c in by_seed:
        assert c.draw.arch not in HELD_OUT_ARCHS and c.draw.task not in HELD_OUT_TASKS, c.name
        assert c.draw.schedule not in HELD_OUT_SCHEDULES, c.name
        assert c.fault is None or implementation(c.fault, c.split) is FAULTS[c.fault]
    for c in family:
        assert c.draw.arch in HELD_OUT_ARCHS or c.draw.task in HELD_OUT_TASKS, c.name
        if c.fault is not None:
            fault = implementation(c.fault, c.split)
            assert fault is FAMILY_FAULTS[c.fault] and fault.applies(c.draw)
    pairs = {(c.draw.arch, c.draw.task) for c in by_seed}
    assert not pairs & {(c.draw.arch, c.draw.task) for c in family}
    seeds = {c.seed for c in by_seed} | {c.draw.seed for c in by_seed}
    assert not seeds & ({c.seed for c in family} | {c.draw.seed for c in family})
    # every held-out architecture and data set is drawn
    assert set(HELD_OUT_ARCHS) <= {c.draw.arch for c in family}
    assert set(HELD_OUT_TASKS) <= {c.draw.task for c in family}


def test_case_list_structure() -> None:
    assert cases("all") == cases("dev") + cases("heldout")  # the family split only by name
    every = cases("all") + cases("family")
    assert [c.name for c in every] == [c.name for c in cases("all") + cases("family")]
    assert {c.split for c in every} == {"dev", "heldout", "family"}
    assert set(SPLITS) == {"dev", "heldout", "family", "dev2"}
    labels = Counter(c.label for c in every)
    assert labels["healthy"] >= 200
    assert sum(n for label, n in labels.items() if label != "healthy") >= 400
    assert all(labels[kind] >= 20 for kind in KINDS), labels
    assert len({c.name for c in every}) == len(every)
    for split in ("dev", "heldout", "family"):
        mine = Counter(c.label for c in every if c.split == split)
        assert mine["healthy"] == 1000
        per_kind = 22 if split == "family" else 11
        assert all(mine[kind] == per_kind for kind in KINDS), (split, mine)
    dev = {c.seed for c in every if c.split == "dev"} | {
        c.draw.seed for c in every if c.split == "dev"
    }
    held = {c.seed for c in every if c.split == "heldout"}
    held |= {c.draw.seed for c in every if c.split == "heldout"}
    assert not dev & held
    for c in every:
        assert c.fault is None if c.label == "healthy" else c.fault == c.label
        assert c.fault is None or implementation(c.fault, c.split).applies(c.draw)


@pytest.mark.parametrize("split", sorted(UNCHANGED_SPLITS))
def test_other_splits_unchanged_by_dev2(split: str) -> None:
    """The dev2 split adds cases; the others keep theirs (names, draws, faults)."""
    import hashlib

    lines = "\n".join(f"{c.name}:{c.hash}" for c in cases(split))
    assert hashlib.sha256(lines.encode()).hexdigest()[:16] == UNCHANGED_SPLITS[split]


def test_dev2_split_structure() -> None:
    """dev2: faulty slots only, 8 per kind, drawn from the dev space with seeds no other split
    uses, each injected by the third implementation (faults_dev2)."""
    dev2 = cases("dev2")
    assert cases("dev2") == dev2
    assert tuple(DEV2_FAULTS) == KINDS
    assert Counter(c.label for c in dev2) == {kind: 8 for kind in KINDS}
    assert len({c.name for c in dev2}) == len(dev2)
    others = cases("all") + cases("family")
    taken = {c.seed for c in others} | {c.draw.seed for c in others}
    for c in dev2:
        assert c.split == "dev2" and c.fault == c.label and 20000 <= c.seed < 21000
        assert c.draw == draw(c.draw.seed) and space_of(c.draw) != FAMILY, c.name
        assert c.seed not in taken and c.draw.seed not in taken, c.name
        fault = implementation(c.label, "dev2")
        assert fault is DEV2_FAULTS[c.label] and fault.applies(c.draw), c.name


@pytest.mark.parametrize("kind", KINDS)
def test_dev2_implementation_is_a_third_one(kind: str) -> None:
    """Each dev2 fault is its kind (a subclass of the dev one, keeping its name) injected
    through code of its own: no hook comes from the dev or the family implementation."""
    third = DEV2_FAULTS[kind]
    first, second = FAULTS[kind], FAMILY_FAULTS[kind]
    assert third.name == kind and isinstance(third, type(first))
    assert not isinstance(third, type(second))
    healthy = _changes(Fault())
    mine = _changes(third)
    for hook, value in mine.items():
        if value is healthy[hook] or (kind, hook) in SHARED_PRECONDITIONS:
            continue
        assert value is not _changes(first)[hook], f"{kind}: {hook} is the dev one's"
        assert value is not _changes(second)[hook], f"{kind}: {hook} is the family one's"
    assert any(mine[h] is not healthy[h] for h in HOOKS), f"{kind}: changes nothing"
    assert any(third.applies(draw(seed)) for seed in range(2000))


def test_every_dev2_kind_is_validated() -> None:
    """The validation pass accepted a draw for each dev2 slot (accepted.json)."""
    missing = [c.name for c in cases("dev2") if not c.validated]
    assert not missing, f"run --validate --split dev2: {missing}"
    for c in cases("dev2"):
        assert manifest()[str(c.seed)]["split"] == "dev2"


def test_family_case_list_is_deterministic() -> None:
    first, again = cases("family"), cases("family")
    assert first == again
    assert [c.hash for c in first] == [c.hash for c in again]
    assert len({c.name for c in first}) == len(first)
    assert all(c.draw == draw(c.draw.seed, FAMILY) for c in first)


def _first_accepted(split: str, kind: str) -> Case:
    chosen = [c for c in cases(split) if c.label == kind and c.validated]
    if not chosen:
        pytest.fail(f"no validated {kind} case in {split}: run the validation pass")
    return min(chosen, key=lambda c: c.draw.total_steps * max(1, c.draw.seq_len))


@pytest.mark.parametrize("split", ["dev", "family"])
@pytest.mark.parametrize("kind", NEW_KINDS)
def test_new_kind_shows_its_symptom(kind: str, split: str) -> None:
    """Each new kind's mutation (both implementations) shows its symptom against its healthy
    twin on a quick validated draw, trained here without tensortap."""
    from bench.detection.generated.validate import check

    case = _first_accepted(split, kind)
    assert manifest()[str(case.seed)]["split"] == split
    assert check(case) == (True, "")


@pytest.mark.parametrize(
    "kind",
    ["zero_gradients", "no_optimizer_step", "grad_accumulation_undivided", "gradient_ascent"],
)
def test_dev2_kind_shows_its_symptom(kind: str) -> None:
    """A few dev2 kinds' third implementations show their symptom on a quick validated draw,
    trained here without tensortap."""
    from bench.detection.generated.validate import check

    case = _first_accepted("dev2", kind)
    assert check(case) == (True, "")


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
