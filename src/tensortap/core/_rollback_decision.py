"""What a rollback does with a request, given what the replays said about the steps it names.

Framework-free: the evidence is what an attribution by replay found (its kind, the batch, the
first bad layer), the answer a :class:`Decision` the rollback acts on. After Megatron-LM's rerun
logic: a fault that does not repeat is never a reason to drop data, and one that repeats from
finite data is a question about the numerics, not the batch.

======================  ===============================================================
evidence                decision
======================  ===============================================================
``data``                restore the last good checkpoint and leave those batches out
``transient``           go on (the guard undid the update): drop nothing, count the rank
``numerics``            drop nothing; restore and try the next remedy (a lower learning
                        rate, then tighter clipping); none left: stop, naming the layer
``reproducible``        stop now, with the evidence (a restore would replay the fault)
none (not replayed)     as without evidence: restore and leave the batches out
======================  ===============================================================

Where a request names several batches, the graver evidence decides (numerics, then
reproducible, then data or none, then transient); only the batches with no evidence or data
evidence are left out, and none under numerics.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

TRANSIENT = "transient"
DATA = "data"
NUMERICS = "numerics"
REPRODUCIBLE = "reproducible"

RESTORE = "restore"  #: load the last good checkpoint, leave ``drop`` out
GO_ON = "go_on"  #: restore nothing, drop nothing
REMEDY = "remedy"  #: load the last good checkpoint, drop nothing, apply ``remedy``
STOP = "stop"  #: end training with the evidence
ACTIONS = (RESTORE, GO_ON, REMEDY, STOP)

LOWER_LR = "lower_lr"
TIGHTER_CLIP = "tighter_clip"
#: The remedies for a numerics fault, in the order they are tried.
REMEDIES = (LOWER_LR, TIGHTER_CLIP)


@runtime_checkable
class RemedyPlan(Protocol):
    """What a rollback (``remedies=``) tries when a replay says a step went non-finite from
    finite data: :attr:`order` names the remedies to try (some of :data:`REMEDIES`),
    :meth:`apply` turns one on for the next :attr:`steps` steps and says what it does. The
    framework's adapter implements it (:class:`~tensortap.pytorch.Remedies` for a
    ``torch.optim`` optimizer)."""

    order: tuple[str, ...]
    steps: int

    def apply(self, name: str) -> str:
        """Turn remedy ``name`` on; returns what it does, in words."""


@dataclass(frozen=True)
class Evidence:
    """What a replay said about the step that trained ``batch``: ``kind`` (transient, data,
    numerics, reproducible), the first layer that went non-finite, the rank that replayed it."""

    kind: str
    step: int
    batch: Hashable
    layer: str | None = None
    message: str = ""
    rank: int = 0


@dataclass(frozen=True)
class Decision:
    """What to do with a rollback request (:func:`decide`), and why."""

    action: str
    #: The evidence that decided (``None``: no replay said anything about these batches).
    evidence: str | None
    #: The batches to leave out of the data.
    drop: tuple[Hashable, ...]
    #: The batches the request named that stay in (the evidence does not blame them).
    keep: tuple[Hashable, ...]
    reason: str
    layer: str | None = None
    remedy: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """As JSON values (batch ids that are not numbers or strings as their ``repr``)."""
        return {
            "action": self.action,
            "evidence": self.evidence,
            "drop": [_plain(b) for b in self.drop],
            "keep": [_plain(b) for b in self.keep],
            "layer": self.layer,
            "remedy": self.remedy,
            "reason": self.reason,
        }


_GRAVITY = (NUMERICS, REPRODUCIBLE, DATA, None, TRANSIENT)


def decide(
    batches: Sequence[Hashable],
    evidence: Mapping[Hashable, Evidence],
    *,
    remedies: Sequence[str] = (),
    tried: Sequence[str] = (),
) -> Decision:
    """The decision for a request to roll back over ``batches``, given ``evidence`` by batch
    id. ``remedies``: those that can be applied, in order; ``tried``: those already applied
    for this fault (the next untried one is chosen)."""
    found = {b: evidence.get(b) for b in batches}
    kinds = {None if e is None else e.kind for e in found.values()}
    if not batches or not any(e is not None for e in found.values()):
        return Decision(RESTORE, None, tuple(batches), (), "no replay said why these steps failed")
    worst = next(k for k in _GRAVITY if k in kinds)
    named = [e for e in found.values() if e is not None and e.kind == worst]
    steps = ", ".join(str(e.step) for e in named)
    if worst == NUMERICS:
        layer = next((e.layer for e in named if e.layer), None)
        where = f"in {layer}" if layer else "after every layer's output was finite"
        left = [r for r in remedies if r not in tried]
        if left:
            return Decision(
                REMEDY,
                NUMERICS,
                (),
                tuple(batches),
                f"step(s) {steps} went non-finite from finite data {where}; no batch is left "
                f"out; trying the remedy {left[0]}",
                layer,
                left[0],
            )
        spent = f" after the remedies {', '.join(tried)}" if tried else " (no remedy given)"
        return Decision(
            STOP,
            NUMERICS,
            (),
            tuple(batches),
            f"step(s) {steps} went non-finite from finite data {where}{spent}: training stops; "
            "look at that layer (its scale, its precision, a division by ~0)",
            layer,
        )
    if worst == REPRODUCIBLE:
        return Decision(
            STOP,
            REPRODUCIBLE,
            (),
            tuple(batches),
            f"step(s) {steps} fail again from the same weights and a moderate, finite batch: "
            "a restore would replay the fault; training stops with the evidence",
        )
    if worst == TRANSIENT:
        return Decision(
            GO_ON,
            TRANSIENT,
            (),
            tuple(batches),
            f"step(s) {steps} replayed fine (a transient fault): the guard undid their "
            "updates; training goes on with every batch",
        )
    drop = tuple(b for b, e in found.items() if e is None or e.kind == DATA)
    keep = tuple(b for b in batches if b not in drop)
    why = (
        f"the batch(es) of step(s) {steps} hold non-finite or extreme values"
        if worst == DATA
        else f"no replay said why batch(es) {', '.join(map(str, drop))} failed"
    )
    if keep:
        why += f" (batch(es) {', '.join(map(str, keep))} replayed fine and stay in)"
    return Decision(
        RESTORE,
        worst,
        drop,
        keep,
        f"{why}: they are left out, and training goes back to the last good checkpoint",
    )


def _plain(value: Any) -> Any:
    return value if isinstance(value, (bool, int, float, str)) or value is None else repr(value)


__all__ = [
    "ACTIONS",
    "DATA",
    "GO_ON",
    "LOWER_LR",
    "NUMERICS",
    "REMEDIES",
    "REMEDY",
    "REPRODUCIBLE",
    "RESTORE",
    "STOP",
    "TIGHTER_CLIP",
    "TRANSIENT",
    "Decision",
    "Evidence",
    "RemedyPlan",
    "decide",
]
