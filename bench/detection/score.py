"""Scoring: which diagnosis each finding names, and the detection table over all programs."""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

#: The diagnoses a rule's finding names (rule -> diagnosis; some rules say more in details).
_BY_RULE = {
    "ExplodingTensor": "nonfinite",
    "NaNInfRootCause": "nonfinite",
    "GradientNormSpike": "exploding",
    "VanishingGradient": "vanishing",
    "DeadRelu": "dead_relu",
    "SaturatedActivation": "saturated",
    "WeightsNotUpdating": "not_updating",
    "UnchangedTensor": "not_updating",
    "CheckInputImages": "unnormalised_input",
    "ClassImbalance": "class_imbalance",
    "Overfit": "overfitting",
    "Overtraining": "overfitting",
    "PoorWeightInitialization": "poor_init",
    "AllZero": "all_zero",
    "LossSpike": "loss_spike",
}

#: Per problem class, the diagnoses that point a person at the right cause.
ACCEPTED = {
    "exploding": {"exploding", "nonfinite", "diverging", "update_too_large"},
    "vanishing": {"vanishing"},
    "dead_relu": {"dead_relu"},
    "saturated": {"saturated"},
    "lr_high": {"diverging", "update_too_large", "nonfinite", "exploding", "loss_spike"},
    "lr_low": {"update_too_small", "not_decreasing"},
    "not_updating": {"not_updating"},
    "unnormalised_input": {"unnormalised_input"},
    "class_imbalance": {"class_imbalance"},
    "overfitting": {"overfitting"},
    "poor_init": {"poor_init"},
    "nan": {"nonfinite"},
    "all_zero": {"all_zero"},
}


#: Causes named by ``details["cause"]`` (TrainingLoop's) that are one of the diagnoses above.
_BY_CAUSE = {
    "optimizer_not_stepping": "not_updating",
    "params_not_in_optimizer": "not_updating",
    "lr_too_high": "update_too_large",
    "lr_too_low": "update_too_small",
    "no_progress": "not_decreasing",
    "vanishing_gradient": "vanishing",
    "exploding_gradient": "exploding",
    "saturated_activation": "saturated",
    "overtraining": "overfitting",
}


def diagnosis(finding: dict[str, Any]) -> str:
    """What a triggered finding (``Finding.to_dict()``) says is wrong."""
    details = finding.get("details") or {}
    if details.get("nonfinite"):
        return "nonfinite"
    if details.get("symptom"):  # what the tensors show, where the cause named is the set-up's
        return str(details["symptom"])  # (DeadRelu: units dead from the first step, poor_init)
    if details.get("cause"):
        return _BY_CAUSE.get(details["cause"], details["cause"])
    rule = finding["rule"]
    if rule == "LossNotDecreasing":
        return "diverging" if details.get("diverging") else "not_decreasing"
    if rule == "WeightUpdateRatio":
        return "update_too_large" if details.get("direction") == "large" else "update_too_small"
    return _BY_RULE.get(rule, rule)


@dataclass
class ProgramResult:
    """One program's findings: ``findings`` are triggered findings as dicts (first per rule)."""

    name: str
    label: str  # "healthy" or the problem class
    findings: list[dict[str, Any]] = field(default_factory=list)
    no_data: list[str] = field(default_factory=list)  # rules that judged nothing
    seconds: float = 0.0
    verdict: str = ""  # the diagnosis: "healthy", "problem" or "unknown"
    first_cause: str | None = None  # the root cause it names first
    causes: list[str] = field(default_factory=list)  # every cause it names, roots first
    headline: str = ""

    def problems(self) -> list[dict[str, Any]]:
        return [f for f in self.findings if f.get("severity", "problem") == "problem"]

    def diagnoses(self) -> set[str]:
        return {diagnosis(f) for f in self.problems()}

    @property
    def detected(self) -> bool:
        """Whether the run's diagnosis is a problem (before one is made: any problem-severity
        finding, which is the same while the verdict keeps every such finding a problem)."""
        if self.verdict:
            return self.verdict == "problem"
        return bool(self.problems())

    @property
    def diagnosed(self) -> bool:
        return bool(self.diagnoses() & ACCEPTED.get(self.label, set()))

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "label": self.label,
            "findings": self.findings,
            "no_data": self.no_data,
            "seconds": self.seconds,
            "detected": self.detected,
            "diagnosed": self.diagnosed,
            "diagnoses": sorted(self.diagnoses()),
            "verdict": self.verdict,
            "first_cause": self.first_cause,
            "causes": self.causes,
            "headline": self.headline,
        }


def score(results: list[ProgramResult]) -> dict[str, Any]:
    """Precision and recall of detection, false alarms, diagnosis recall, per-rule counts."""
    buggy = [r for r in results if r.label != "healthy"]
    healthy = [r for r in results if r.label == "healthy"]
    flagged = [r for r in results if r.detected]
    true_pos = [r for r in buggy if r.detected]
    per_rule: dict[str, Counter[str]] = defaultdict(Counter)
    for r in results:
        for f in r.findings:
            column = "healthy" if r.label == "healthy" else r.label
            per_rule[f["rule"]][f"{column}:{f.get('severity', 'problem')}"] += 1
    return {
        "programs": len(results),
        "buggy": len(buggy),
        "healthy": len(healthy),
        "precision": len(true_pos) / len(flagged) if flagged else 1.0,
        "recall": len(true_pos) / len(buggy) if buggy else 1.0,
        "diagnosis_recall": sum(r.diagnosed for r in buggy) / len(buggy) if buggy else 1.0,
        "healthy_with_problems": [r.name for r in healthy if r.detected],
        "false_alarms": sum(len(r.problems()) for r in healthy),
        "healthy_warnings": sum(len(r.findings) - len(r.problems()) for r in healthy),
        "missed": [r.name for r in buggy if not r.detected],
        "misdiagnosed": [r.name for r in buggy if r.detected and not r.diagnosed],
        "per_rule": {rule: dict(c) for rule, c in sorted(per_rule.items())},
    }


def table(results: list[ProgramResult], summary: dict[str, Any]) -> str:
    """The report printed by ``python -m bench.detection`` (Markdown, as in docs/rules.md)."""
    lines = [
        f"programs: {summary['programs']} ({summary['buggy']} buggy, {summary['healthy']} healthy)",
        f"detection precision {summary['precision']:.0%}, recall {summary['recall']:.0%}; "
        f"diagnosis recall {summary['diagnosis_recall']:.0%}",
        f"problem findings on healthy programs: {summary['false_alarms']} "
        f"(programs: {', '.join(summary['healthy_with_problems']) or 'none'}); warnings and "
        f"advice on healthy programs: {summary['healthy_warnings']}",
        f"missed: {', '.join(summary['missed']) or 'none'}; wrong diagnosis: "
        f"{', '.join(summary['misdiagnosed']) or 'none'}",
        "",
        "| program | class | problems (diagnosis) | warnings / advice |",
        "| --- | --- | --- | --- |",
    ]
    for r in results:
        problems = ", ".join(f"{f['rule']} ({diagnosis(f)})" for f in r.problems()) or "-"
        others = ", ".join(
            f"{f['rule']} ({f.get('severity')})" for f in r.findings if f not in r.problems()
        )
        mark = "" if r.label == "healthy" else (" ✓" if r.diagnosed else " ✗")
        lines.append(f"| {r.name} | {r.label}{mark} | {problems} | {others or '-'} |")
    lines += ["", "| rule | fired on (class:severity count) |", "| --- | --- |"]
    for rule, counts in summary["per_rule"].items():
        text = ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
        lines.append(f"| {rule} | {text} |")
    return "\n".join(lines)
