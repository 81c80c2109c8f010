"""TrainingLoop's checks of parameters that never move while others train (``frozen_layer``):
those in a param group at learning rate 0 (PyTorch), and the weights of layers set
``trainable = False`` (Keras). A certain fault where they still hold a fresh random
initialisation (never trained nor loaded), else evidence that needs harm (a pre-trained layer
is frozen on purpose)."""

from __future__ import annotations

from collections.abc import Iterator

from tensortap.rules.builtin._fresh_init import FreshInit
from tensortap.rules.builtin._loop_facts_view import LoopFacts, LoopVerdict


class FrozenChecks:
    """The checks of parameters held still, over ``facts`` (their values read from ``fresh``'s
    trial)."""

    def __init__(self, facts: LoopFacts, fresh: FreshInit) -> None:
        self._facts = facts
        self._fresh = fresh

    def _held_still(self, fact: str) -> tuple[int, str, str | None] | None:
        """Parameters that never move (``<fact>_params`` of them, ``<fact>/<name>``): how many,
        the names shown, and how they still hold a fresh random initialisation (else None);
        None where there are none."""
        count = self._facts.count(f"{fact}_params")
        if count <= 0:
            return None
        names = [n for n in self._facts.keys(f"{fact}/") if self._facts.num(f"{fact}/{n}")]
        shown = ", ".join(names[:8]) + (f" and {len(names) - 8} more" if len(names) > 8 else "")
        return count, shown, self._fresh.verdict(names)

    def zero_lr(self) -> Iterator[LoopVerdict]:
        found = self._held_still("zero_lr")
        if found is None:
            return
        count, shown, fresh = found
        yield LoopVerdict(
            "frozen_layer",
            f"{count} parameters sit in a param group whose learning rate is 0 while the other "
            f"groups train, so they never move from where they started: {shown}; "
            + (
                f"they still hold a random initialisation ({fresh}), so they were never "
                "trained nor loaded from a trained model: "
                if fresh
                else ""
            )
            + "if they must learn, give their group a learning rate (a rate of 0 freezes a "
            "layer as requires_grad_(False) does)",
            count,
            0,
            ("zero_lr_params",),
            needs_harm=fresh is None,  # a pre-trained layer may be frozen on purpose
        )

    def frozen(self) -> Iterator[LoopVerdict]:
        """Weights of layers set ``trainable = False`` while others train (the Keras hook's
        ``frozen/<name>``): a certain fault where they still hold a random initialisation,
        else evidence that needs harm (a trained layer is frozen on purpose)."""
        found = self._held_still("frozen")
        if found is None:
            return
        count, shown, fresh = found
        yield LoopVerdict(
            "frozen_layer",
            f"{count} weights belong to layers set trainable=False while the others train, so "
            f"they never move from where they started: {shown}; "
            + (
                f"they still hold a random initialisation ({fresh}), so they were never "
                "trained nor loaded from a trained model: let them train (layer.trainable = "
                "True), or load the trained weights meant to be frozen"
                if fresh
                else "if they must learn, set their layers trainable (frozen on purpose, a "
                "trained layer keeps what it learned)"
            ),
            count,
            0,
            ("frozen_params",),
            needs_harm=fresh is None,  # a trained layer may be frozen on purpose
        )
