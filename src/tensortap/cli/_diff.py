"""``tensortap diff RUN_A RUN_B``: which layer changed between two runs, the most first (see
:mod:`tensortap.query._layer_diff`)."""

from __future__ import annotations

import argparse
import json
from typing import Any


def add_parser(sub: Any) -> None:
    diff = sub.add_parser(
        "diff",
        help="which layer changed between two runs: per-layer statistics of gradients, "
        "weights and activations at aligned steps, the layers that differ most first",
    )
    diff.add_argument("run_a", help="a trial (directory or URL), or a job directory")
    diff.add_argument("run_b", help="the run to compare it with")
    diff.add_argument("--top", type=int, default=10, help="layers shown (default 10)")
    diff.add_argument("--json", action="store_true", help="every layer and statistic, as JSON")


def diff(ns: argparse.Namespace) -> int:
    from tensortap.cli._views import open_trial
    from tensortap.query import layer_diff

    with open_trial(ns.run_a) as a, open_trial(ns.run_b) as b:
        layers = layer_diff(a, b)
    if ns.json:
        print(json.dumps([d.to_dict() for d in layers], indent=1))
        return 0
    if not layers:
        print(
            "no layer to compare: neither run saved gradients, weights or activations "
            "(save the weights and gradients collections)"
        )
        return 0
    print(f"layers of {ns.run_a} (A) and {ns.run_b} (B), the most changed first:")
    width = max(len(d.layer) for d in layers[: ns.top])
    for d in layers[: ns.top]:
        print(
            f"  {d.layer.ljust(width)}  own {_effect(d.score):>6}  then {_effect(d.spread):>6}"
            f"  {d.headline}"
        )
    print(
        "own: orders of magnitude its weights differ (inf: saved or moving in one run only);"
        " then: its gradients, drift and activations, which follow a change anywhere"
    )
    return 0


def _effect(value: float) -> str:
    return "inf" if value == float("inf") else f"{value:.2f}"
