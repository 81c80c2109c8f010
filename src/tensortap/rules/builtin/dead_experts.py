"""DeadExperts: an expert of a mixture-of-experts layer that receives no token."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from tensortap.rules.builtin._router import BALANCE_FIX, Load, RouterRule


class DeadExperts(RouterRule):
    """Fires when an expert of an MoE layer received no token in each of ``num_steps`` saved
    steps in a row (each a saving window: every forward since the previous saved step).

    Reads ``router/<layer>/tokens_per_expert`` (the PyTorch hook's ``router`` collection:
    ``hook.register_router``). A dead expert is one the router never picks: its parameters
    train no more and the other experts carry its load, a known failure of learned routing
    since Shazeer et al. (2017), which the load-balance loss of Switch Transformer (Fedus et
    al. 2021) exists to prevent. A window is judged only when it holds at least
    ``min_tokens_per_expert`` assignments per expert on average: with a balanced router an
    expert then misses every token by chance with probability about exp(-10) = 5e-5 per
    window (Poisson), so three such windows in a row are never chance. ``num_steps`` (3) is
    this project's "it lasted" (as LossSpike's three values in a row), not a published value.
    Findings name ``details["cause"] = "dead_experts"``. **Severity:** problem.
    """

    cause = "dead_experts"

    @classmethod
    def check_values(cls, params: Mapping[str, Any]) -> None:
        super().check_values(params)
        least = params["min_tokens_per_expert"]
        cls.check_param("min_tokens_per_expert", least, least >= 0, "a number >= 0")

    def __init__(
        self, base_trial: Any, num_steps: int = 3, min_tokens_per_expert: float = 10.0
    ) -> None:
        super().__init__(base_trial, num_steps)
        self.min_tokens_per_expert = min_tokens_per_expert
        self._zero_runs: dict[str, np.ndarray] = {}

    def judge_layer(self, load: Load) -> tuple[float, str, dict[str, Any]] | None:
        experts = len(load.counts)
        if load.assigned / experts < self.min_tokens_per_expert:
            return None
        runs = self._zero_runs.get(load.layer)
        if runs is None or len(runs) != experts:
            runs = np.zeros(experts, dtype=np.int64)
        runs = np.where(load.counts == 0, runs + 1, 0)
        self._zero_runs[load.layer] = runs
        dead = np.flatnonzero(runs >= self.num_steps)
        idle = np.flatnonzero(load.counts == 0)
        shown = dead if dead.size else idle
        listed = ", ".join(str(i) for i in shown[:8]) + (" ..." if shown.size > 8 else "")
        if dead.size:
            message = (
                f"dead experts in {load.layer}: expert{'s' if dead.size > 1 else ''} {listed} "
                f"of {experts} received no token for {int(runs[dead].min())} saved steps in a "
                f"row ({load.assigned:.0f} assignments in this window): their parameters no "
                f"longer train and the other experts carry their load; {BALANCE_FIX}, or "
                "re-initialise the dead experts"
            )
        elif idle.size:
            message = (
                f"{load.layer}: expert{'s' if idle.size > 1 else ''} {listed} of {experts} "
                f"received no token in this window ({int(runs.max())} saved step(s) in a row, "
                f"limit {self.num_steps})"
            )
        else:
            message = f"{load.layer}: every one of {experts} experts received tokens"
        return (
            float(dead.size),
            message,
            {
                "fires": bool(dead.size),
                "pending": bool(idle.size) and not dead.size,
                "threshold": self.num_steps,
                "layer": load.layer,
                "dead_experts": dead.tolist(),
                "idle_experts": idle.tolist(),
            },
        )
