"""The validation pass, without tensortap: a healthy draw must train properly, a faulty draw
must show its fault's symptom against its healthy twin. Draws that fail are rejected and the
slot is redrawn (its next attempt); the verdicts go to ``accepted.json``.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from bench.detection.generated.faults import KINDS, broke
from bench.detection.generated.faults_family import implementation
from bench.detection.generated.record import RunRecord
from bench.detection.generated.space import Draw
from bench.detection.generated.suite import MANIFEST, Case, Slot, fingerprint
from bench.detection.generated.train import train

#: how many compatible attempts a slot may use before it gives up
MAX_TRIES = 12


def trains_properly(r: RunRecord, d: Draw) -> bool:
    """A healthy run's own check: no NaN/inf, the validation loss clearly below where it
    started and not climbing away from its minimum at the end (overtrained), and the task
    learned (balanced accuracy halfway from chance to perfect; R² at least 0.25; an
    autoencoder's reconstruction error under 60% of where it started)."""
    if broke(r):
        return False
    assert r.initial is not None and r.final is not None
    losses = [e.loss for e in r.evaluations]
    if losses[-1] > 1.5 * min(losses) + 0.03:
        return False
    if d.classify:
        learned = r.final.quality >= r.chance + 0.5 * (1.0 - r.chance)
        return learned and r.final.loss < 0.8 * r.initial.loss
    if d.regression:
        return r.final.quality >= 0.25 and r.final.loss < 0.8 * r.initial.loss
    return r.final.loss < 0.6 * r.initial.loss


@dataclass
class Verdict:
    """A slot's outcome: the accepted attempt (None: none within MAX_TRIES) and the reasons
    earlier attempts were rejected."""

    seed: int
    split: str
    label: str
    attempt: int | None = None
    fingerprint: str = ""
    rejected: list[str] = field(default_factory=list)  # per rejected attempt: why
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "split": self.split,
            "label": self.label,
            "attempt": self.attempt,
            "fingerprint": self.fingerprint,
            "rejected": self.rejected,
        }


def check(case: Case) -> tuple[bool, str]:
    """Train ``case`` (and, if faulty, its healthy twin) without tensortap; accept or say why
    not."""
    healthy = Case(case.name, "healthy", case.split, case.seed, case.draw, None)
    twin = train(healthy, None)
    if not trains_properly(twin, case.draw):
        return False, "twin_unhealthy" if case.fault else "unhealthy"
    if case.fault is None:
        return True, ""
    faulty = train(case, None)
    if not implementation(case.fault, case.split).symptom(faulty, twin):
        return False, "no_symptom"
    return True, ""


def validate_slot(slot: Slot) -> Verdict:
    """Try the slot's compatible attempts in order until one passes."""
    started = time.perf_counter()
    verdict = Verdict(slot.seed, slot.split, slot.label)
    for tries, (attempt, d) in enumerate(slot.attempts()):
        if tries >= MAX_TRIES:
            break
        ok, why = check(slot.case(attempt, d, validated=False))
        if ok:
            verdict.attempt, verdict.fingerprint = attempt, fingerprint(d, slot.fault)
            break
        verdict.rejected.append(why)
    verdict.seconds = time.perf_counter() - started
    return verdict


def write_manifest(verdicts: list[Verdict]) -> None:
    """Merge ``verdicts`` into accepted.json (other slots' entries stay), a slot a line."""
    slots = json.loads(MANIFEST.read_text())["slots"] if MANIFEST.exists() else {}
    slots.update({str(v.seed): v.to_dict() for v in verdicts})
    lines = [
        f"{json.dumps(k)}: {json.dumps(slots[k], sort_keys=True)}" for k in sorted(slots, key=int)
    ]
    MANIFEST.write_text('{"slots": {\n' + ",\n".join(lines) + "\n}}\n")


def table(verdicts: list[Verdict]) -> str:
    """Per kind: slots, accepted, rejected attempts (and why), slots that found no draw."""
    lines = [
        "| kind | slots | accepted | rejected attempts | why rejected | no draw found |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for kind in ("healthy", *KINDS):
        mine = [v for v in verdicts if v.label == kind]
        if not mine:
            continue
        why = Counter(w for v in mine for w in v.rejected)
        lines.append(
            f"| {kind} | {len(mine)} | {sum(v.attempt is not None for v in mine)} | "
            f"{sum(len(v.rejected) for v in mine)} | "
            f"{', '.join(f'{k} {n}' for k, n in sorted(why.items())) or '-'} | "
            f"{sum(v.attempt is None for v in mine)} |"
        )
    return "\n".join(lines)
