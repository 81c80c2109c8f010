"""Re-derive every run's verdict from a results file's stored findings, with this tree's
verdict (``tensortap.diagnosis.build``), and score it: a change to how findings become a
diagnosis is then judged without training or evaluating a rule again.

    python -m bench.detection.generated.rediagnose RESULTS.json [--json OUT.json]

Valid only while the rules' findings are what the file holds (each rule's gravest finding and
the rules without data, as ``--json`` wrote them): a change to a rule needs the runs again. The
rules judged without a finding are the recommended set less those two.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from bench.detection.generated.run import CaseResult
from bench.detection.generated.scoring import named_first, summarise, tables
from tensortap.diagnosis import build
from tensortap.rules import rule_configs
from tensortap.rules._verdict import RuleOutcome


def outcomes(result: Mapping[str, Any], recommended: list[str]) -> list[RuleOutcome]:
    """What each rule said of one run, as stored: a finding, no data, or judged without one."""
    found = [RuleOutcome(f["rule"], "IssuesFound", f) for f in result["findings"]]
    none = [RuleOutcome(rule, "NoData", None, "no data") for rule in result["no_data"]]
    said = {o.rule for o in (*found, *none)}
    return found + none + [RuleOutcome(r, "NoIssuesFound") for r in recommended if r not in said]


def rediagnose(result: Mapping[str, Any], recommended: list[str]) -> CaseResult:
    """One stored run with its verdict, first cause and causes derived again."""
    found = build(outcomes(result, recommended))
    return CaseResult(
        name=result["name"],
        label=result["label"],
        findings=list(result["findings"]),
        no_data=list(result["no_data"]),
        seconds=float(result.get("seconds", 0.0)),
        verdict=found.verdict,
        first_cause=None if found.cause is None else found.cause.id,
        causes=list(found.causes),
        headline=found.headline(),
        split=str(result.get("split", "")),
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.detection.generated.rediagnose", description=__doc__
    )
    parser.add_argument("results", type=Path, help="a results file --json wrote")
    parser.add_argument("--json", help="write the re-derived results and scores here")
    ns = parser.parse_args(argv)
    stored = json.loads(ns.results.read_text())
    recommended = [config.name for config in rule_configs.recommended()]
    results = [rediagnose(r, recommended) for r in stored["results"]]
    changed = sum(
        (r.verdict, r.first_cause) != (s.get("verdict"), s.get("first_cause"))
        for r, s in zip(results, stored["results"], strict=True)
    )
    splits = sorted({r.split for r in results})
    summaries = {s: summarise([r for r in results if r.split == s]) for s in splits}
    for s in splits:
        print(tables(s, summaries[s]))
        print()
    print(f"{len(results)} runs re-diagnosed; {changed} with another verdict or first cause")
    if ns.json:
        out = {
            "summary": summaries,
            "results": [
                {**r.to_dict(), "root_cause_first": named_first(r, r.label)} for r in results
            ],
        }
        Path(ns.json).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
