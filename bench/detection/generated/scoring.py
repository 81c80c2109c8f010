"""Scoring the generated suite, per split: false alarms on healthy runs (with a Wilson 95%
interval), detection recall, per fault kind and per rule."""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any

from bench.detection import accepted
from bench.detection.generated.faults import KINDS
from bench.detection.score import ProgramResult
from tensortap.rules.builtin._common import wilson


def named_first(result: ProgramResult, label: str) -> bool:
    """Whether the run's diagnosis names the fault's root cause first (bench.detection.accepted
    says which causes count for each fault kind)."""
    return accepted.named_first(result.first_cause, label)


def problem_rules(result: ProgramResult) -> list[str]:
    return sorted({f["rule"] for f in result.problems()})


def summarise(results: list[ProgramResult]) -> dict[str, Any]:
    """One split's (or any set's) numbers."""
    healthy = [r for r in results if r.label == "healthy"]
    faulty = [r for r in results if r.label != "healthy"]
    alarms = [r for r in healthy if r.detected]
    detected = [r for r in faulty if r.detected]
    per_kind: dict[str, Any] = {}
    for kind in KINDS:
        mine = [r for r in faulty if r.label == kind]
        if not mine:
            continue
        rules = Counter(rule for r in mine for rule in problem_rules(r))
        per_kind[kind] = {
            "n": len(mine),
            "detected": sum(r.detected for r in mine),
            "root_cause_first": sum(named_first(r, kind) for r in mine),
            "first_causes": dict(Counter(r.first_cause or "-" for r in mine).most_common()),
            "rules": dict(rules.most_common()),
            "missed": [r.name for r in mine if not r.detected],
        }
    per_rule: dict[str, Counter[str]] = defaultdict(Counter)
    for r in results:
        for rule in problem_rules(r):
            per_rule[rule]["healthy" if r.label == "healthy" else "faulty"] += 1
    return {
        "runs": len(results),
        "healthy": {
            "n": len(healthy),
            "with_problem": len(alarms),
            "rate": len(alarms) / len(healthy) if healthy else 0.0,
            "wilson95": wilson(len(alarms), len(healthy)),
            "names": [r.name for r in alarms],
        },
        "faulty": {
            "n": len(faulty),
            "detected": len(detected),
            "recall": len(detected) / len(faulty) if faulty else 0.0,
            "wilson95": wilson(len(detected), len(faulty)),
            "root_cause_first": sum(named_first(r, r.label) for r in faulty),
        },
        "per_kind": per_kind,
        "per_rule": {
            rule: {"healthy": c["healthy"], "faulty": c["faulty"]}
            for rule, c in sorted(per_rule.items())
        },
    }


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def tables(split: str, s: dict[str, Any]) -> str:
    """The split's report (Markdown)."""
    h, f = s["healthy"], s["faulty"]
    lo, hi = h["wilson95"]
    flo, fhi = f["wilson95"]
    lines = [
        f"### {split}: {s['runs']} runs ({h['n']} healthy, {f['n']} faulty)",
        "",
        f"healthy runs with a problem finding: {h['with_problem']}/{h['n']} = {_pct(h['rate'])} "
        f"(Wilson 95% {_pct(lo)}-{_pct(hi)})",
        f"detection recall (faulty runs with a problem finding): {f['detected']}/{f['n']} = "
        f"{_pct(f['recall'])} (Wilson 95% {_pct(flo)}-{_pct(fhi)})",
        f"root cause named first: {f['root_cause_first']}/{f['n']} = "
        f"{_pct(f['root_cause_first'] / f['n'] if f['n'] else 0.0)}",
        "",
        "| fault kind | n | detected | root cause first | first causes named | rules that fired "
        "as problems |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for kind, k in s["per_kind"].items():
        rules = ", ".join(f"{rule} {n}" for rule, n in k["rules"].items()) or "-"
        firsts = ", ".join(f"{cause} {n}" for cause, n in k["first_causes"].items())
        lines.append(
            f"| {kind} | {k['n']} | {k['detected']} | {k['root_cause_first']} | {firsts} | "
            f"{rules} |"
        )
    lines += [
        "",
        "| rule | problems on healthy runs | problems on faulty runs |",
        "| --- | --- | --- |",
    ]
    for rule, c in s["per_rule"].items():
        lines.append(f"| {rule} | {c['healthy']} | {c['faulty']} |")
    return "\n".join(lines)
