"""``self.req_tensors``: the tensors and steps a rule needs at one step, fetched in one pass."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from tensortap.exceptions import InvalidConfigError, TensorUnavailable
from tensortap.trials._reader import RawRef
from tensortap.trials._tensor import Tensor

if TYPE_CHECKING:
    from tensortap.trials._trial import Trial


class RequiredTensorsForTrial:
    """The tensor names and steps a rule needs from one trial."""

    def __init__(self, trial: Trial) -> None:
        self.trial = trial
        self._steps: dict[str, list[int]] = {}
        self._tensors: dict[str, Tensor] = {}

    def add(self, name: str, steps: Iterable[int], should_match_regex: bool = False) -> None:
        if isinstance(name, Tensor):  # trial.tensors_in_collection() hands out Tensors
            name = name.name
        names = self.trial.tensor_names(regex=name) if should_match_regex else [name]
        if not should_match_regex and not self.trial.has_tensor(name):
            raise TensorUnavailable(name, self.trial.tensor_names())
        for n in names:
            known = self._steps.setdefault(n, [])
            known.extend(s for s in steps if s not in known)
            if n not in self._tensors:
                self._tensors[n] = self.trial.tensor(n)

    def get_names(self) -> list[str]:
        return list(self._steps)

    def get_tensor_steps(self, name: str) -> list[int]:
        return list(self._steps[name])

    def get(self) -> list[Tensor]:
        return list(self._tensors.values())

    def clear(self) -> None:
        self._steps.clear()
        self._tensors.clear()

    def fetch(self) -> None:
        """Read every raw value needed in as few reads as possible.

        Steps where only reductions (or only the shape) were saved are fine: there is nothing
        raw to read, and the rule reads the reductions (smdebug never ran the rule then).
        Steps the tensor was not saved at are left for the rule to meet as
        TensorUnavailableForStep, which the invoker counts as skipped.
        """
        if not self._steps:  # nothing asked for (most rules): no read to plan, at every step
            return
        refs: list[RawRef] = []
        for name, steps in self._steps.items():
            tensor = self._tensors[name]
            for step in steps:
                for entry in tensor._entries(step, None).values():
                    if entry.raw is not None:
                        refs.append(entry.raw)
        self.trial.prefetch(refs)


class RequiredTensors:
    """Per trial (the base trial unless ``trial`` is given), the tensors a rule needs."""

    def __init__(self, base_trial: Trial, other_trials: Iterable[Trial] | None = None) -> None:
        self.base_trial = base_trial
        self._per_trial: dict[int, RequiredTensorsForTrial] = {
            id(base_trial): RequiredTensorsForTrial(base_trial)
        }
        for trial in other_trials or ():
            self._per_trial[id(trial)] = RequiredTensorsForTrial(trial)

    def _for(self, trial: Trial | None) -> RequiredTensorsForTrial:
        found = self._per_trial.get(id(trial if trial is not None else self.base_trial))
        if found is None:
            raise InvalidConfigError(
                f"trial {getattr(trial, 'name', trial)!r} is neither the rule's base trial nor "
                "one of its other_trials; pass it to the rule's constructor"
            )
        return found

    def add(
        self,
        name: str | Tensor,
        steps: Iterable[int],
        trial: Trial | None = None,
        should_match_regex: bool = False,
    ) -> None:
        """Require ``name`` (a name, a Tensor, or with ``should_match_regex`` a regex) at
        ``steps``."""
        if isinstance(steps, int):
            steps = [steps]
        if isinstance(name, Tensor):
            name = name.name
        self._for(trial).add(name, list(steps), should_match_regex=should_match_regex)

    def get_names(self, trial: Trial | None = None) -> list[str]:
        return self._for(trial).get_names()

    def get_tensor_steps(
        self, name: str | None = None, trial: Trial | None = None
    ) -> dict[str, list[int]] | list[int]:
        """The steps required of ``name``; without a name, every name's steps as a dict."""
        required = self._for(trial)
        if name is None:
            return {n: required.get_tensor_steps(n) for n in required.get_names()}
        return required.get_tensor_steps(name)

    def get(self, trial: Trial | None = None) -> list[Tensor]:
        """The required tensors of a trial as :class:`Tensor` objects."""
        return self._for(trial).get()

    def clear(self) -> None:
        for required in self._per_trial.values():
            required.clear()

    def fetch(self) -> None:
        """Bulk-read everything required, one pass per trial."""
        for required in self._per_trial.values():
            required.fetch()
