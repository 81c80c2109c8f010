"""RouterCollapse: a mixture-of-experts router that sends (nearly) every token to few experts."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from tensortap.rules.builtin._router import BALANCE_FIX, Load, RouterRule


class RouterCollapse(RouterRule):
    """Fires when an MoE layer's router has sent its tokens to few experts for ``num_steps``
    saved steps in a row: the entropy of its load, scaled to [0, 1] between the least a top-k
    router can have (all tokens on the same k experts: ln k) and the most (balanced: ln E), is
    below ``min_entropy``.

    Reads ``router/<layer>/tokens_per_expert`` and ``router/<layer>/tokens`` (k = assignments
    / tokens; without ``tokens`` k is taken as 1). Collapse onto a few experts is the failure
    that learned routing drifts into without a balancing term (Shazeer et al. 2017: "the
    gating network tends to converge to a state where it always produces large weights for
    the same few experts"); the remedies are the load-balance loss (Switch Transformer, Fedus
    et al. 2021, coefficient 0.01), the router z-loss (ST-MoE, Zoph et al. 2022, 0.001) and
    noisy gating. No paper gives a threshold: the default 0.5 means the load spreads like a
    uniform router over sqrt(k * E) experts (halfway, on a log scale, between all E experts and
    only k): 4 of 8 experts at top-2, 2 of 4 at top-1. It was set from that definition, not
    fitted to a run; healthy routers sit near 1. Findings name ``details["cause"] =
    "router_collapse"``. **Severity:** problem.
    """

    cause = "router_collapse"

    @classmethod
    def check_values(cls, params: Mapping[str, Any]) -> None:
        super().check_values(params)
        least = params["min_entropy"]
        cls.check_param("min_entropy", least, 0 < least < 1, "a number in (0, 1)")

    def __init__(self, base_trial: Any, num_steps: int = 3, min_entropy: float = 0.5) -> None:
        super().__init__(base_trial, num_steps)
        self.min_entropy = min_entropy

    def judge_layer(self, load: Load) -> tuple[float, str, dict[str, Any]] | None:
        experts = len(load.counts)
        top_k = round(load.assigned / load.tokens) if load.tokens else 1
        top_k = min(max(top_k, 1), experts)
        if top_k >= experts:
            return None  # every token goes to every expert: nothing to collapse
        p = load.counts / load.assigned
        p = p[p > 0]
        entropy = float(-(p * np.log(p)).sum())
        low, high = math.log(top_k), math.log(experts)
        spread = max(0.0, (entropy - low) / (high - low))
        collapsed = spread < self.min_entropy
        run = self.held(load.layer, collapsed)
        top = int(np.argmax(load.counts))
        share = load.share(top)
        effective = math.exp(entropy)
        text = (
            f"expert {top} receives {share:.0%} of the tokens and the load spreads like "
            f"{effective:.1f} of {experts} experts (entropy {spread:.2f} of the top-{top_k} "
            f"range, limit {self.min_entropy:g})"
        )
        fires = run >= self.num_steps
        if fires:
            message = (
                f"router collapse in {load.layer}: {text} for {run} saved steps; {BALANCE_FIX}"
            )
        else:
            message = f"{load.layer}: {text}" + (f", {run} saved step(s) in a row" if run else "")
        return (
            1.0 - spread,
            message,
            {
                "fires": fires,
                "pending": collapsed and not fires,
                "threshold": self.min_entropy,
                "layer": load.layer,
                "top_expert": top,
                "top_share": share,
                "normalised_entropy": spread,
                "effective_experts": effective,
            },
        )
