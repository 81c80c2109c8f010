"""ExpertImbalance: the busiest expert (or expert-parallel rank) gets far more than its share."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from tensortap.rules._finding import Severity
from tensortap.rules.builtin._router import Load, RouterRule


class ExpertImbalance(RouterRule):
    """Fires when an MoE layer's imbalance coefficient, the busiest expert's load over the
    mean load (max / mean), is above ``threshold`` at ``num_steps`` saved steps in a row.

    With ``ep_size`` > 1 (experts split over that many expert-parallel ranks, contiguously:
    rank r holds experts r*E/ep_size to (r+1)*E/ep_size - 1, as Megatron-LM and torchtitan
    place them), the findings also name the busiest EP rank and its load over the mean rank's
    (the tokens its experts receive from every rank's router): the step's straggler. That
    ratio is never above the busiest expert's (a rank's load is the mean of its experts'), so
    the expert's ratio is what is judged.

    Under torch.distributed the hook also saves each rank's own counts
    (``local_tokens_per_expert``): each rank's imbalance is judged too, and the worst rank's
    is named when it is above the whole layer's. Switch Transformer and GShard count an
    expert's capacity per batch of tokens on a rank, so a rank whose data all goes to one
    expert drops tokens even when the sum over ranks is balanced.

    The default 2.0 is the evaluation capacity factor of Switch Transformer and ST-MoE (Fedus
    et al. 2021; Zoph et al. 2022; 1.0 to 1.25 in training): an expert given more than twice
    the mean load overflows even that capacity, and its extra tokens are dropped (or, without
    a capacity, the step waits for it). Reads ``router/<layer>/tokens_per_expert``, which the
    PyTorch hook sums over ranks. Findings name ``details["cause"] = "expert_imbalance"``.
    **Severity:** warning (a capacity factor above the threshold, or dropless dispatch,
    absorbs it at a cost in speed).
    """

    cause = "expert_imbalance"
    severity = Severity.WARNING
    reads_local = True

    @classmethod
    def check_values(cls, params: Mapping[str, Any]) -> None:
        super().check_values(params)
        threshold, ep_size = params["threshold"], params["ep_size"]
        cls.check_param("threshold", threshold, threshold > 1, "a ratio > 1 (max / mean load)")
        cls.check_param("ep_size", ep_size, ep_size >= 1, "an integer >= 1")

    def __init__(
        self, base_trial: Any, num_steps: int = 3, threshold: float = 2.0, ep_size: int = 1
    ) -> None:
        super().__init__(base_trial, num_steps)
        self.threshold = threshold
        self.ep_size = ep_size

    def judge_layer(self, load: Load) -> tuple[float, str, dict[str, Any]] | None:
        experts = len(load.counts)
        mean = load.assigned / experts
        top = int(np.argmax(load.counts))
        ratio = float(load.counts[top]) / mean
        what = f"expert {top} gets {ratio:.2f}x the mean load of {experts} experts"
        rank_ratio, busiest = None, None
        if self.ep_size > 1 and experts % self.ep_size == 0:
            per_rank = experts // self.ep_size
            ranks = load.counts.reshape(self.ep_size, per_rank).sum(axis=1)
            busiest = int(np.argmax(ranks))
            rank_ratio = float(ranks[busiest] / ranks.mean())
            what += (
                f"; EP rank {busiest} (experts {busiest * per_rank}-{(busiest + 1) * per_rank - 1}"
                f") gets {rank_ratio:.2f}x the mean load of {self.ep_size} EP ranks: every step "
                "waits for it"
            )
        score = ratio
        worst_rank = _worst_local(load.local)
        if worst_rank is not None and worst_rank[1] > ratio:
            worker, score, expert = worst_rank
            what += (
                f"; on {worker}, expert {expert} gets {score:.2f}x the mean load of that rank's "
                "own tokens (capacity is counted per rank's batch)"
            )
        over = score > self.threshold
        run = self.held(load.layer, over)
        fires = run >= self.num_steps
        if fires:
            message = (
                f"expert imbalance in {load.layer}: {what} (limit {self.threshold:g}) for {run} "
                "saved steps: with a capacity factor below that its extra tokens are dropped, "
                "without one every step waits for it; raise the load-balance loss coefficient "
                "(Switch Transformer uses 0.01) or the capacity factor, or add the router z-loss"
            )
        else:
            message = f"{load.layer}: {what} (limit {self.threshold:g})"
        details: dict[str, Any] = {
            "fires": fires,
            "pending": over and not fires,
            "threshold": self.threshold,
            "layer": load.layer,
            "imbalance": ratio,
            "busiest_expert": top,
        }
        if rank_ratio is not None:
            details.update(ep_imbalance=rank_ratio, busiest_ep_rank=busiest)
        if worst_rank is not None:
            details.update(worst_rank=worst_rank[0], rank_imbalance=worst_rank[1])
        return score, message, details


def _worst_local(local: dict[str, np.ndarray]) -> tuple[str, float, int] | None:
    """(worker, max / mean, busiest expert) of the rank whose own counts are the most
    imbalanced; None without per-rank counts (or when none routed a token)."""
    worst = None
    for worker, counts in sorted(local.items()):
        total = float(counts.sum())
        if total <= 0 or counts.size < 2:
            continue
        expert = int(np.argmax(counts))
        ratio = float(counts[expert]) * counts.size / total
        if worst is None or ratio > worst[1]:
            worst = (worker, ratio, expert)
    return worst
