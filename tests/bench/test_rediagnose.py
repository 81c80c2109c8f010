"""Re-diagnosing stored results: the same findings give the same verdicts as the run's."""

from __future__ import annotations

from typing import Any

from bench.detection.generated.rediagnose import outcomes, rediagnose

RECOMMENDED = ["LossNotDecreasing", "DeadRelu", "AccuracyAtChance"]


def _stored(findings: list[dict[str, Any]], no_data: list[str]) -> dict[str, Any]:
    return {"name": "h-1-mlp", "label": "healthy", "findings": findings, "no_data": no_data,
            "split": "dev"}  # fmt: skip


def _finding(rule: str, cause: str, severity: str) -> dict[str, Any]:
    return {"rule": rule, "step": 30, "message": f"{rule} says", "severity": severity,
            "details": {"cause": cause}}  # fmt: skip


def test_outcomes_count_the_silent_rules_as_judged() -> None:
    stored = _stored([_finding("DeadRelu", "dead_relu", "warning")], ["AccuracyAtChance"])
    said = {o.rule: o.status for o in outcomes(stored, RECOMMENDED)}
    assert said == {
        "DeadRelu": "IssuesFound",
        "AccuracyAtChance": "NoData",
        "LossNotDecreasing": "NoIssuesFound",
    }


def test_a_problem_finding_is_the_first_cause_and_a_warning_leaves_the_run_healthy() -> None:
    harmed = [_finding("DeadRelu", "dead_relu", "problem"),
              _finding("LossNotDecreasing", "no_progress", "problem")]  # fmt: skip
    sick = rediagnose(_stored(harmed, []), RECOMMENDED)
    assert (sick.verdict, sick.first_cause, sick.detected) == ("problem", "dead_relu", True)
    # a symptom alone, in a run whose outcome shows no harm, is a warning
    alone = rediagnose(_stored(harmed[:1], []), RECOMMENDED)
    assert (alone.verdict, alone.first_cause, alone.detected) == ("healthy", None, False)
    fine = rediagnose(_stored([_finding("DeadRelu", "dead_relu", "warning")], []), RECOMMENDED)
    assert (fine.verdict, fine.first_cause, fine.detected) == ("healthy", None, False)
    unknown = rediagnose(_stored([], RECOMMENDED), RECOMMENDED)
    assert unknown.verdict == "unknown"
