"""A rule judged step by step and in bulk over one trial, for tests that the two agree."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tensortap.rules._invoker import RuleSummary, walk
from tensortap.rules._rule import Rule


def judged_both_ways(make: Callable[[], Rule]) -> list[tuple[list[dict[str, Any]], Any, int]]:
    """(findings as dicts, status, steps judged) of a fresh rule from ``make``, judged step by
    step, then in bulk."""
    found = []
    for bulk in (False, True):
        rule = make()
        summary = RuleSummary(rule.rule_name)
        for finding in walk([rule], timeout=0, bulk=bulk):
            summary.add(finding)
        summary.finish(rule.no_data_reason())
        found.append(([f.to_dict() for f in summary.findings], summary.status, summary.judged))
    return found
