"""Which steps a trial has saved, across its workers: global step numbers, or the step numbers
within a mode, each list either every step saved or only those every worker completed; and the
mode and step within it of each global step. Computed from the index, again only when it grows."""

from __future__ import annotations

from tensortap.core._modes import ModeKeys
from tensortap.trials._index import TrialIndex
from tensortap.trials._worker_state import natural_key

#: (mode, or None for global steps; complete only?) -> sorted step numbers
StepSets = dict[tuple[ModeKeys | None, bool], list[int]]


class SavedSteps:
    """The steps saved in ``index`` so far (see the module docstring), kept per index version."""

    def __init__(self, index: TrialIndex) -> None:
        self._index = index
        self._sets: StepSets = {}
        self._version = -1
        self._global_to_mode: dict[int, tuple[ModeKeys, int]] = {}

    def sets(self) -> StepSets:
        """Sorted steps per (mode or None, complete?) — recomputed only when the index grows."""
        index = self._index
        if self._version == index.version:
            return self._sets
        workers = list(index.workers.values())
        union: set[int] = set().union(*(w.steps for w in workers)) if workers else set()
        if len(workers) >= index.expected_workers():
            # A worker that ended will never add a step, so it holds no step back.
            complete = {g for g in union if all(w.complete or w.has_passed(g) for w in workers)}
        else:
            complete = set()
        global_to_mode: dict[int, tuple[ModeKeys, int]] = {}
        for w in sorted(workers, key=lambda w: natural_key(w.name), reverse=True):
            global_to_mode.update(w.global_to_mode)
        cache: StepSets = {}
        for done, steps in ((True, complete), (False, union)):
            cache[(None, done)] = sorted(steps)
            for mode in ModeKeys:
                if mode != ModeKeys.GLOBAL:
                    # a step number counted again by a resumed session is listed once
                    cache[(mode, done)] = sorted(
                        {global_to_mode[g][1] for g in steps if global_to_mode[g][0] == mode}
                    )
        self._global_to_mode = global_to_mode
        self._sets, self._version = cache, index.version
        return cache

    def global_to_mode(self) -> dict[int, tuple[ModeKeys, int]]:
        """The mode and the step within it of every global step saved (the first worker's
        word where two workers differ)."""
        self.sets()
        return self._global_to_mode
