"""The suite: which cases there are, by split, deterministically.

Every case sits in a *slot* with its own seed: healthy slots (0-199 and 700-1499 past the
split's base) and, per fault kind, faulty slots (200-659 for the first 23 kinds, 1500-1599 for
the five added with the family split), in disjoint seed ranges per split (dev: 0-1599,
heldout: 5000-6599). The ``family`` split (10000 on: healthy slots as above, 22 faulty slots
per kind from 12000) draws from the family space (space.py) and injects each kind's second
implementation (faults_family.py). A slot's draw is
``draw(sub_seed(seed, attempt), SPACES[split])`` for the first attempt that the fault applies
to and that the validation pass accepted (see validate.py); the accepted attempts are kept in
``accepted.json`` beside this file, which ``python -m bench.detection.generated --validate``
writes. A slot missing from it (or whose draw changed since) falls back to its first compatible
attempt, marked unvalidated.

The ``dev2`` split (20000 on) is a development split like dev, from the dev space, whose faults
come from a third implementation of each kind (faults_dev2.py), so that rules fitted on the
development splits see each kind through two implementations. It has faulty slots only (dev's
healthy slots cover the same space), 8 per kind at 20000 + 20 * kind index + j.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from bench.detection.generated.faults import KINDS
from bench.detection.generated.faults_dev2 import DEV2_FAULTS
from bench.detection.generated.faults_family import implementation
from bench.detection.generated.space import DEV, FAMILY, Draw, draw, sub_seed

#: each split's seeds from its base
SPLITS = {"dev": 0, "heldout": 5000, "family": 10000, "dev2": 20000}
#: what "all" means: the two by-seed splits. The family split is named on its own, so that no
#: run of the whole benchmark (``make bench``) scores it by accident: it is scored once, by
#: whoever scores a change, after the rules were changed looking at dev only
ALL = ("dev", "heldout")
#: the space each split draws from: the by-seed held-out split keeps dev's, so that it stays
#: held out by seed only; the family split draws from the families dev never sees
SPACES = {"dev": DEV, "heldout": DEV, "family": FAMILY, "dev2": DEV}
#: healthy slots' seeds (plus the split's base): 1,000 a split, so that a healthy run with a
#: problem shows at a rate near 0.5% and an interval under 3% can be shown
HEALTHY_SEEDS = (*range(0, 200), *range(700, 1000), *range(1000, 1500))
PER_KIND_PER_SPLIT = 11
FAULT_SEEDS_FROM = 200  # faulty slots: base + 200 + 20 * kind index + j (up to 660)
#: the kinds added with the family split (the 24th on) take base + 1500 + 20 * j + ...
LATER_KINDS_FROM, FIRST_KINDS = 1500, 23
#: the family split: 22 slots per kind (both by-seed splits' worth), from base + 2000
FAMILY_PER_KIND, FAMILY_FAULTS_FROM = 22, 2000
#: the dev2 split: faulty slots only, 8 per kind, at base + 20 * kind index
DEV2_PER_KIND, DEV2_STRIDE = 8, 20
MAX_ATTEMPTS = 400
MANIFEST = Path(__file__).with_name("accepted.json")


@dataclass(frozen=True)
class Case:
    """One run of the suite. ``label`` is "healthy" or the fault kind (``fault``)."""

    name: str
    label: str
    split: str
    seed: int  # the slot's seed
    draw: Draw  # the healthy draw (a fault mutates it when the case trains)
    fault: str | None
    attempt: int = 0  # which redraw of the slot this is
    validated: bool = False  # the validation pass accepted this attempt

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "label": self.label,
            "split": self.split,
            "seed": self.seed,
            "draw": self.draw.to_dict(),
            "fault": self.fault,
            "attempt": self.attempt,
            "validated": self.validated,
        }

    @property
    def hash(self) -> str:
        """Identifies what trains: the case's draw and fault (not whether it was validated)."""
        key = {k: v for k, v in self.to_dict().items() if k != "validated"}
        return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Slot:
    """Where a case comes from: a split, a seed, and healthy or a fault kind."""

    split: str
    seed: int
    fault: str | None

    @property
    def label(self) -> str:
        return self.fault or "healthy"

    def attempts(self, start: int = 0) -> Any:
        """(attempt, draw) for the slot's draws its fault applies to, from ``start`` on."""
        fault = implementation(self.fault, self.split) if self.fault else None
        for attempt in range(start, MAX_ATTEMPTS):
            d = draw(sub_seed(self.seed, attempt), SPACES[self.split])
            if fault is None or fault.applies(d):
                yield attempt, d

    def case(self, attempt: int, d: Draw, validated: bool) -> Case:
        prefix = f"f-{self.fault}" if self.fault else "h"
        name = f"{prefix}-{self.seed:04d}-{d.label}"
        return Case(name, self.label, self.split, self.seed, d, self.fault, attempt, validated)


def slots(split: str) -> list[Slot]:
    """The split's slots: healthy first, then each fault kind's."""
    splits = list(ALL) if split == "all" else [split]
    found: list[Slot] = []
    for name in splits:
        base = SPLITS[name]
        if name != "dev2":  # dev2 has no healthy slots of its own
            found += [Slot(name, base + j, None) for j in HEALTHY_SEEDS]
        for k, kind in enumerate(KINDS):
            if name == "dev2" and kind not in DEV2_FAULTS:
                continue
            found += [Slot(name, s, kind) for s in fault_seeds(name, k)]
    return found


def fault_seeds(split: str, k: int) -> range:
    """The seeds of kind ``k``'s slots in ``split``."""
    base = SPLITS[split]
    if split == "dev2":
        return range(base + DEV2_STRIDE * k, base + DEV2_STRIDE * k + DEV2_PER_KIND)
    if split == "family":
        start = base + FAMILY_FAULTS_FROM + 30 * k
        return range(start, start + FAMILY_PER_KIND)
    if k < FIRST_KINDS:
        start = base + FAULT_SEEDS_FROM + 20 * k
    else:
        start = base + LATER_KINDS_FROM + 20 * (k - FIRST_KINDS)
    return range(start, start + PER_KIND_PER_SPLIT)


def fingerprint(d: Draw, fault: str | None) -> str:
    key = json.dumps([d.to_dict(), fault], sort_keys=True)
    return hashlib.sha256(key.encode()).hexdigest()[:12]


@cache
def manifest() -> dict[str, Any]:
    """The validation pass's verdicts: slot seed -> accepted attempt, rejections, fingerprint."""
    if not MANIFEST.exists():
        return {}
    return dict(json.loads(MANIFEST.read_text())["slots"])


def resolve(slot: Slot) -> Case:
    """The slot's case: its accepted attempt, or its first compatible one if none is known."""
    entry = manifest().get(str(slot.seed))
    if entry is not None and entry.get("attempt") is not None:
        attempt = int(entry["attempt"])
        d = draw(sub_seed(slot.seed, attempt), SPACES[slot.split])
        if fingerprint(d, slot.fault) == entry["fingerprint"]:
            return slot.case(attempt, d, validated=True)
    attempt, d = next(iter(slot.attempts()))
    return slot.case(attempt, d, validated=False)


def cases(split: str) -> list[Case]:
    """The split's cases ("dev", "heldout", "family", "dev2" or "all": dev and heldout), the same
    list every time."""
    if split not in (*SPLITS, "all"):
        raise ValueError(f"no split {split!r}; splits: {', '.join(SPLITS)}, all")
    return [resolve(s) for s in slots(split)]
