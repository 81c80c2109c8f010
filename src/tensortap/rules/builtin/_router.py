"""Shared by the mixture-of-experts rules: each MoE layer's load, read from ``router``.

The PyTorch hook saves, per MoE layer, ``router/<layer>/tokens_per_expert`` (assignments per
expert over the saving window, summed over ranks) and ``router/<layer>/tokens`` (see
:mod:`tensortap.pytorch._router`); any other writer that saves the same names is judged alike.
A rule here judges TRAIN (and GLOBAL) steps, layer by layer, and fires when its condition held
at ``num_steps`` saved steps of a layer in a row.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tensortap.core._collections import ROUTER, ROUTER_PREFIX
from tensortap.exceptions import TensorUnavailableForStep
from tensortap.rules._finding import Severity
from tensortap.rules._rule import Rule
from tensortap.rules.builtin._common import (
    NOT_TRAINING,
    fire_nonfinite,
    names_in,
    step_mode,
    training_step,
)

_LOAD = re.compile("^" + re.escape(ROUTER_PREFIX) + r"(.+)/tokens_per_expert$")
_NO_ROUTER = (
    "no router statistics saved at this step; register the routers with "
    "hook.register_router(module, top_k=...) (PyTorch) and include 'router'"
)
#: Fix shared by the messages of a router that sends its tokens to few experts.
BALANCE_FIX = (
    "raise the load-balance loss coefficient (Switch Transformer uses 0.01), add the router "
    "z-loss (ST-MoE: 0.001) or noise to the router logits, or lower the router's learning rate"
)


@dataclass(frozen=True)
class Load:
    """One MoE layer's window: ``counts[i]`` assignments of expert ``i``; ``tokens`` routed
    (None when not saved: shares are then of the assignments)."""

    layer: str
    name: str
    counts: np.ndarray
    tokens: float | None
    #: Each rank's own counts (``local_tokens_per_expert``, by worker), where saved and asked.
    local: dict[str, np.ndarray] = field(default_factory=dict)

    @property
    def assigned(self) -> float:
        return float(self.counts.sum())

    def share(self, expert: int) -> float:
        """The share of the tokens sent to ``expert`` (of the assignments without ``tokens``)."""
        whole = self.tokens if self.tokens else self.assigned
        return float(self.counts[expert]) / whole if whole else 0.0

    def entropy(self) -> float:
        """The entropy of the load (assignments' shares), over ln(E): 1 balanced, 0 one expert."""
        p = self.counts / self.assigned
        p = p[p > 0]
        return float(-(p * np.log(p)).sum() / math.log(len(self.counts)))


class RouterRule(Rule):
    """A condition on each MoE layer's load, held ``num_steps`` saved steps in a row."""

    collections_needed = (ROUTER,)
    #: What a finding points at (``details["cause"]``).
    cause = "router_collapse"

    @classmethod
    def check_values(cls, params: Mapping[str, Any]) -> None:
        steps = params["num_steps"]
        cls.check_param("num_steps", steps, steps >= 1, "an integer >= 1")

    def __init__(self, base_trial: Any, num_steps: int = 3) -> None:
        super().__init__(base_trial)
        self.num_steps = num_steps
        self._runs: dict[str, Any] = {}  # per layer: the condition's run so far

    #: Whether :meth:`loads` reads every rank's own counts too.
    reads_local = False

    def loads(self, step: int) -> list[Load]:
        """Every MoE layer's load at ``step``; non-finite ones make the step a finding."""
        block = self.base_trial.step_block(step)
        names = [n for n in names_in(self.base_trial, ROUTER, step) if _LOAD.match(n)]
        out = []
        for name in sorted(names):
            layer = _LOAD.match(name).group(1)  # type: ignore[union-attr]
            counts = np.asarray(block.value(name), dtype=np.float64).reshape(-1)
            tokens_name = f"{ROUTER_PREFIX}{layer}/tokens"
            try:
                tokens: float | None = float(np.asarray(block.value(tokens_name)).reshape(-1)[0])
            except (TensorUnavailableForStep, KeyError):
                tokens = None
            out.append(Load(layer, name, counts, tokens, self._local(layer, step)))
        return out

    def _local(self, layer: str, step: int) -> dict[str, np.ndarray]:
        """Each worker's ``local_tokens_per_expert`` of ``layer`` at ``step`` (under
        torch.distributed the hook saves it beside the sum), when this rule reads them."""
        name = f"{ROUTER_PREFIX}{layer}/local_tokens_per_expert"
        if not self.reads_local or not self.base_trial.has_tensor(name):
            return {}
        tensor = self.base_trial.tensor(name)
        try:
            return {
                w: np.asarray(tensor.value(step, worker=w), dtype=np.float64).reshape(-1)
                for w in tensor.workers(step)
            }
        except TensorUnavailableForStep:
            return {}

    def invoke_at_step(self, step: int) -> bool:
        if training_step(self.base_trial, step) is None:
            mode = step_mode(self.base_trial, step)[0]
            self.explain(NOT_TRAINING.format(mode=mode.name), judged=False)
            return False
        loads = self.loads(step)
        if not loads:
            raise self.skip(_NO_ROUTER)
        bad = [
            x.name
            for x in loads
            if not (np.isfinite(x.counts).all() and (x.tokens is None or math.isfinite(x.tokens)))
            or not all(np.isfinite(v).all() for v in x.local.values())
        ]
        if bad:
            return fire_nonfinite(self, bad, "the router statistic")
        judged = [x for x in loads if x.assigned > 0 and len(x.counts) >= 2]
        if not judged:
            raise self.skip("no token was routed in this saving window")
        worst: tuple[float, str, dict[str, Any]] | None = None
        fired: list[tuple[float, str, dict[str, Any]]] = []
        pending = []
        for load in judged:
            verdict = self.judge_layer(load)
            if verdict is None:
                continue
            score, message, details = verdict
            if details.pop("fires"):
                fired.append(verdict)
            pending.append(details.pop("pending"))
            if worst is None or score > worst[0]:
                worst = verdict
        if worst is None:
            raise self.skip("no MoE layer had enough tokens in this window to judge")
        if not fired and all(pending):
            # the condition holds but not yet at num_steps saved steps in a row: a run that
            # ends here was not judged (NoData), never "no issues"
            self.explain(
                f"{self.rule_name} fires once its condition held at {self.num_steps} saved "
                f"steps in a row; so far {worst[1]}",
                judged=False,
            )
            return False
        score, message, details = max(fired, key=lambda v: v[0]) if fired else worst
        if fired and len(fired) > 1:
            message += f" (and {len(fired) - 1} more MoE layer(s))"
        self.explain(
            message,
            tensors=[x.name for x in judged],
            value=score,
            threshold=details.pop("threshold", None),
            severity=details.pop("severity", self.severity),
            cause=self.cause,
            **details,
        )
        return bool(fired)

    severity = Severity.PROBLEM

    def judge_layer(self, load: Load) -> tuple[float, str, dict[str, Any]] | None:
        """(score, message, details with ``fires``, ``pending`` (the condition holds, not yet
        ``num_steps`` in a row) and ``threshold``) of one layer, or None when it cannot be
        judged in this window."""
        raise NotImplementedError

    def held(self, layer: str, now: bool) -> int:
        """How many saved steps in a row the condition has held for ``layer``, this one too."""
        run = self._runs.get(layer, 0) + 1 if now else 0
        self._runs[layer] = run
        return int(run)
