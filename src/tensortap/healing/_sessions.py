"""The writing sessions of a run that rolls back: each resumed run is a new session of the
hook, recorded as a branch of the one before at the restored step (see
:mod:`tensortap.healing._rollback`), with the hook's global step there so the dashboard draws
the fork where it is.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Hashable
from typing import Any

from tensortap.hook._hook import Hook

logger = logging.getLogger(__name__)


class Sessions:
    """The current hook (one ``make_hook`` makes, or one a trainer's callback hands over:
    :meth:`follow`), the hook's global step of each TRAIN step noted, and the branches."""

    def __init__(self, make_hook: Callable[[], Hook] | None) -> None:
        self._make_hook = make_hook
        self.hook: Hook | None = make_hook() if make_hook is not None else None
        self._global_of: dict[int, int] = {}  # TRAIN step -> the hook's global step there
        # a branch to record on the next session's hook (a trainer's callback makes it)
        self._waiting: tuple[str, int, int | None, str] | None = None

    def note(self, step: int) -> None:
        """Note the hook's global step of TRAIN step ``step`` (the hook's count is step
        ``step``'s, or still the open step before it). A hook in GLOBAL mode is one that has
        not trained yet (a branch's new hook: its TRAIN count starts at the restored step, its
        global count after the trial's last step) or one that counts global steps only; the
        TRAIN count gives the first, the global count the second."""
        hook = self.hook
        if hook is None or hook.closed or hook.mode.name not in ("TRAIN", "GLOBAL"):
            return
        counted = hook.mode_step
        if hook.mode.name == "GLOBAL":
            counted = hook.step_count("TRAIN") or counted
        self._global_of[step] = hook.step + (step - counted)

    def global_step(self, step: int) -> int | None:
        """The hook's global step of TRAIN step ``step``, where it was noted."""
        return self._global_of.get(step)

    def prune(self, oldest: int) -> None:
        """Forget the steps before ``oldest`` (no rollback goes back past it)."""
        self._global_of = {s: g for s, g in self._global_of.items() if s >= oldest}

    def follow(self, hook: Hook) -> tuple[str, str] | None:
        """``hook`` is the run's from now on; when a branch waits to be recorded, its session is
        that branch: returns (parent, session) then."""
        waiting, branched = self._waiting, None
        if waiting is not None and hook.session_id != waiting[0]:
            self._waiting = None
            parent, target, global_step, why = waiting
            hook.branch_from(parent, target, global_step=global_step, reason=why)
            branched = parent, hook.session_id
        self.hook = hook
        return branched

    def branch(
        self, target: int, step: int, ids: list[Hashable], reason: str
    ) -> tuple[str | None, str | None]:
        """End the hook's session and start one that branches from the restored step ``target``
        (or, where a trainer's callback makes the next hook, note the branch for
        :meth:`follow`): returns (parent, new session)."""
        if self.hook is None:
            return None, None
        parent = self.hook.session_id
        why = f"rollback to the checkpoint of step {target}: step {step} went bad ({reason})"
        if ids:
            why += f"; skipping batch(es) {', '.join(map(str, ids))}"
        global_step = self._global_of.get(target)
        if self._make_hook is None:
            self._waiting = (parent, target, global_step, why)
            return parent, None
        self.hook.close()
        self.hook = self._make_hook()
        self.hook.branch_from(parent, target, global_step=global_step, reason=why)
        return parent, self.hook.session_id

    def record(self, kind: str, fields: dict[str, Any]) -> None:
        """An event of the current session; never raises."""
        hook = self.hook
        if hook is None or hook.closed:
            return
        try:
            hook.record_event(kind, fields)
        except Exception:  # never break training for a record
            logger.exception("tensortap: could not record %s in the session", kind)

    def close(self) -> None:
        """Close the current hook."""
        if self.hook is not None:
            self.hook.close()
