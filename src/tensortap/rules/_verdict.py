"""One diagnosis per run: the rules' findings turned into a verdict.

The verdict is *healthy* (rules judged the run and none found a problem), *unknown* (no rule
could judge it), or a *problem*: the most likely root cause first, with its evidence in time
order (its first anomaly, then what followed from it), and a fix to try. Consequences are
folded under their cause (a NaN after a learning rate far too high is not a second problem);
causes that nothing present explains are listed after it, gravest first.

Harm first: a symptom (what the tensors show, :data:`SYMPTOM_TIER`) is a problem only in a
*harmed* run (an outcome rule found a problem, values went non-finite, or training did not
finish); in a run that still learns it is a warning that says so. Facts about the loop and
faults of the set-up stand on their own, except evidence a rule marks ``needs_harm`` (a param
group at learning rate 0 may freeze a layer on purpose): that is a problem only where a harm
seen is one its cause explains.

A job whose training did not finish (it raised, or was killed) is *failed*, whatever the rules
said: its headline says how it ended ("training failed at step 12: RuntimeError: ..."), then
what the rules saw before it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from tensortap.rules._causes import (
    CAUSES,
    DYNAMICS_TIER,
    PROGRESS_RULES,
    RULE_CAUSES,
    SETUP_TIER,
    SYMPTOM_TIER,
    Cause,
    cause_of,
    is_harm,
)

if TYPE_CHECKING:
    from tensortap.rules._invoker import RuleSummary

_ORDER = {cause_id: i for i, cause_id in enumerate(CAUSES)}
#: Statuses of a rule that judged the run.
JUDGED = frozenset({"NoIssuesFound", "IssuesFound"})


@dataclass(frozen=True)
class RuleOutcome:
    """What one rule said of a run: its status and its gravest triggered finding (the first
    of its gravest severity, as ``Finding.to_dict()``), or why it could not judge."""

    rule: str
    status: str
    finding: Mapping[str, Any] | None = None
    details: str = ""
    #: The built-in rule it is (a configuration's ``rule_class``) when its name does not say.
    kind: str = ""
    #: Its other triggered findings that are evidence needing harm (``RuleSummary.evidence``):
    #: weighed as the gravest is, which would otherwise hide them.
    evidence: tuple[Mapping[str, Any], ...] = ()

    @property
    def rule_class(self) -> str:
        return self.kind or str((self.finding or {}).get("rule_class") or self.rule)


@dataclass(frozen=True)
class Evidence:
    """A finding in the chain: when (global ``step``), which rule, what it names and says."""

    step: int
    rule: str
    cause: str
    severity: str
    message: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "rule": self.rule,
            "cause": self.cause,
            "severity": self.severity,
            "message": self.message,
        }


@dataclass(frozen=True)
class Problem:
    """A root cause and its chain: its own evidence first, then its consequences by step."""

    cause: Cause
    evidence: tuple[Evidence, ...]
    consequences: tuple[Evidence, ...] = ()

    @property
    def first_step(self) -> int:
        return self.evidence[0].step

    def headline(self, limit: int = 3) -> str:
        """``learning rate too high: <first anomaly>; then NaN or infinite values at step 10``"""
        text = f"{self.cause.title}: {self.evidence[0].message}"
        seen: set[str] = {self.cause.id}
        then = []
        for e in self.consequences:
            if e.cause not in seen:
                seen.add(e.cause)
                then.append(f"{_title(e.cause)} at step {e.step} ({e.rule})")
        if then:
            text += "; then " + ", ".join(then[:limit])
            if len(then) > limit:
                text += f" and {len(then) - limit} more"
        return text

    def to_dict(self) -> dict[str, Any]:
        return {
            "cause": self.cause.id,
            "title": self.cause.title,
            "fix": self.cause.fix,
            "first_step": self.first_step,
            "headline": self.headline(),
            "evidence": [e.to_dict() for e in self.evidence],
            "consequences": [e.to_dict() for e in self.consequences],
        }


@dataclass(frozen=True)
class Diagnosis:
    """The verdict on one run (see the module docstring)."""

    verdict: str  # "healthy", "problem", "unknown" or "failed"
    problems: tuple[Problem, ...] = ()
    warnings: tuple[Evidence, ...] = ()
    judged: tuple[str, ...] = ()
    not_judged: tuple[tuple[str, str], ...] = field(default_factory=tuple)
    #: How training ended when it did not finish ("training failed at step 12: ..."), else None.
    failure: str | None = None
    #: For an *unknown* verdict with symptoms: their causes, which no rule that judges what
    #: training achieves could weigh (see :func:`build`).
    undecided: tuple[str, ...] = ()

    @property
    def healthy(self) -> bool:
        return self.verdict == "healthy"

    @property
    def cause(self) -> Cause | None:
        """The most likely root cause, or None when no rule found a problem."""
        return self.problems[0].cause if self.problems else None

    @property
    def causes(self) -> tuple[str, ...]:
        """Every cause named, root causes in order, then their consequences."""
        named = [p.cause.id for p in self.problems]
        for p in self.problems:
            named += [e.cause for e in p.consequences if e.cause not in named]
        return tuple(dict.fromkeys(named))

    def headline(self) -> str:
        """One line: ``healthy``, ``unknown: ...``, the root cause with its chain, or how a
        failed run ended, then what the rules saw before it."""
        if self.failure is not None:
            return f"{self.failure}; before it, {self._rules_saw()}"
        if self.verdict == "problem":
            return self.problems[0].headline()
        if self.verdict == "healthy":
            text = f"healthy: {len(self.judged)} rules judged the run and found no problem"
            if self.not_judged:
                text += f" ({len(self.not_judged)} could not judge it)"
            return text
        if self.undecided:
            seen = " and ".join(_title(c) for c in self.undecided[:3])
            first = next(e for e in self.warnings if e.cause in self.undecided)
            return (
                f"unknown: {seen} ({first.rule} at step {first.step}), "
                "but no rule that judges what training achieves (its loss, its accuracy) "
                "cleared the run, so whether this harms training is not known; add "
                "accuracy_at_chance or loss_not_decreasing, or train longer"
            )
        return "unknown: no rule could judge the run" + (
            f" ({self.not_judged[0][0]}: {self.not_judged[0][1]})" if self.not_judged else ""
        )

    def demoted(self) -> dict[str, str]:
        """Rules whose problem this verdict takes as a warning, with why in a few words."""
        why = {
            UNHARMED: "training is not harmed",
            UNWEIGHED: "no rule judged harm",
            UNEXPLAINED: "it explains no harm seen",
        }
        out: dict[str, str] = {}
        for e in self.warnings:
            for suffix, words in why.items():
                if e.message.endswith(suffix):
                    out.setdefault(e.rule, words)
        return out

    def _rules_saw(self) -> str:
        """What the rules said of a failed run's saved steps."""
        if self.problems:
            return self.problems[0].headline()
        if self.judged:
            return f"{len(self.judged)} rules judged the steps saved and found no problem"
        return "no rule could judge the run" + (
            f" ({self.not_judged[0][0]}: {self.not_judged[0][1]})" if self.not_judged else ""
        )

    def __str__(self) -> str:
        lines = [f"diagnosis: {self.headline()}"]
        for i, p in enumerate(self.problems):
            if i:
                lines.append(f"also: {p.headline()}")
            lines.append(f"  try: {p.cause.fix}")
            for e in (*p.evidence, *p.consequences):
                lines.append(f"    step {e.step:>6}  {e.rule}: {e.message}")
        if self.warnings:
            lines.append("  to look at (not problems):")
            lines += [f"    step {e.step:>6}  {e.rule} ({e.severity}): {e.message}" for e in
                      self.warnings]  # fmt: skip
        if self.not_judged and (self.judged or self.problems):
            names = ", ".join(rule for rule, _ in self.not_judged)
            lines.append(f"  could not judge (not counted as healthy): {names}")
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict,
            "headline": self.headline(),
            "failure": self.failure,
            "cause": None if self.cause is None else self.cause.id,
            "problems": [p.to_dict() for p in self.problems],
            "warnings": [e.to_dict() for e in self.warnings],
            "judged": list(self.judged),
            "not_judged": [{"rule": r, "why": why} for r, why in self.not_judged],
            "undecided": list(self.undecided),
        }


def _in_time(e: Evidence) -> tuple[int, bool, str]:
    """Evidence in time order; at one step, the rule whose own subject the cause is first
    (NaN is ExplodingTensor's subject, not AllZero's)."""
    return (e.step, RULE_CAUSES.get(e.rule) != e.cause, e.rule)


def _title(cause_id: str) -> str:
    cause = CAUSES.get(cause_id)
    return cause.title if cause is not None else cause_id


def _evidence(outcome: RuleOutcome, finding: Mapping[str, Any], cause: Cause) -> Evidence:
    return Evidence(
        step=int(finding.get("step", 0)),
        rule=outcome.rule,
        cause=cause.id,
        severity=str(finding.get("severity") or "problem"),
        message=str(finding.get("message", "")),
    )


def _unnamed(rule: str) -> Cause:
    """The cause of a problem from a rule that names none (a custom rule): itself."""
    return Cause(f"rule:{rule}", f"{rule} found a problem", DYNAMICS_TIER, "see the rule's message")


#: What a symptom's message gets when the run shows no harm (and it is kept as a warning).
UNHARMED = " (training is not harmed: a warning, not a problem)"
#: What a symptom's message gets when no rule that judges what training achieves cleared the
#: run either (the verdict is then *unknown*, not *healthy*).
UNWEIGHED = " (no rule judged whether training is harmed: a warning, not a problem)"
#: What evidence that needs harm (``details["needs_harm"]``) gets when no harm it explains is
#: seen.
UNEXPLAINED = " (it explains none of the harm seen: a warning, not a problem)"


def harm_causes(outcomes: Iterable[RuleOutcome]) -> frozenset[str]:
    """The causes the harm findings name (see :func:`harmed`)."""
    found: set[str] = set()
    for o in outcomes:
        f = o.finding
        if (
            o.status == "IssuesFound"
            and f
            and str(f.get("severity") or "problem") == "problem"
            and is_harm(o.rule, f)
        ):
            cause = cause_of(f)
            if cause is not None:
                found.add(cause.id)
    return frozenset(found)


def harmed(outcomes: Iterable[RuleOutcome]) -> bool:
    """Whether the rules saw harm (see :func:`tensortap.rules._causes.is_harm`)."""
    return any(
        o.status == "IssuesFound"
        and o.finding
        and str(o.finding.get("severity") or "problem") == "problem"
        and is_harm(o.rule, o.finding)
        for o in outcomes
    )


def cleared(outcomes: Iterable[RuleOutcome]) -> bool:
    """Whether a rule that judges what training achieves beyond finite values
    (:data:`PROGRESS_RULES`) judged the run and saw it make progress: it found nothing, or only
    advice (a loss that levelled off). A warning from one (a loss too early or too noisy to
    tell) clears nothing: symptoms in a run nobody cleared leave its verdict *unknown*, never
    *healthy*."""
    return any(
        o.rule_class in PROGRESS_RULES
        and (
            o.status == "NoIssuesFound"
            or (
                o.status == "IssuesFound"
                and str((o.finding or {}).get("severity") or "problem") == "advice"
            )
        )
        for o in outcomes
    )


def _needs_harm(finding: Mapping[str, Any]) -> bool:
    details = finding.get("details") or {}
    return bool(isinstance(details, Mapping) and details.get("needs_harm"))


def _widest(known: Cause | None, cause: Cause) -> Cause:
    """A cause as its findings so far explain it (a finding may rule some of it out: see
    ``cause_of``): what any of them explains."""
    if known is None or known.explains <= cause.explains:
        return cause
    if cause.explains <= known.explains:
        return known
    return replace(known, explains=known.explains | cause.explains)


def build(outcomes: Iterable[RuleOutcome], failed: bool = False) -> Diagnosis:
    """The diagnosis of one run from what each of its rules said; ``failed``: its training
    did not finish (harm, whatever the rules saw)."""
    outcomes = list(outcomes)
    harm = failed or harmed(outcomes)
    harms = harm_causes(outcomes)
    clear = cleared(outcomes)
    gated: set[str] = set()  # causes named only by evidence that needs harm
    found: dict[str, list[Evidence]] = {}
    causes: dict[str, Cause] = {}
    warnings: list[Evidence] = []
    for o in outcomes:
        if not o.finding or o.status != "IssuesFound":
            continue
        for f in (o.finding, *(e for e in o.evidence if _needs_harm(e))):
            cause = cause_of({"rule_class": o.rule_class, **f}) or _unnamed(o.rule)
            e = _evidence(o, f, cause)
            if e.severity == "problem" and not harm and cause.tier >= SYMPTOM_TIER:
                e = replace(
                    e, severity="warning", message=e.message + (UNHARMED if clear else UNWEIGHED)
                )
            elif _needs_harm(f) and e.severity in ("problem", "warning"):
                if harms & cause.explains:  # evidence of the harm seen: a candidate cause
                    e = replace(e, severity="problem")
                else:
                    e = replace(e, severity="warning", message=e.message + UNEXPLAINED)
            if e.severity == "problem":
                causes[cause.id] = _widest(causes.get(cause.id), cause)
                if cause.id not in found and _needs_harm(f):
                    gated.add(cause.id)
                elif not _needs_harm(f):
                    gated.discard(cause.id)  # a certain finding of the same cause
                found.setdefault(cause.id, []).append(e)
            else:
                warnings.append(e)
    judged = tuple(o.rule for o in outcomes if o.status in JUDGED)
    not_judged = tuple(
        (o.rule, (o.details or o.status).splitlines()[0] if (o.details or o.status) else "")
        for o in outcomes
        if o.status not in JUDGED
    )
    warnings.sort(key=_in_time)
    if not found:
        undecided = tuple(dict.fromkeys(e.cause for e in warnings if e.message.endswith(UNWEIGHED)))
        if undecided:
            return Diagnosis(
                "unknown", (), tuple(warnings), judged, not_judged, undecided=undecided
            )
        return Diagnosis(
            "healthy" if judged else "unknown", (), tuple(warnings), judged, not_judged
        )
    for chain in found.values():
        chain.sort(key=_in_time)

    def key(cause_id: str) -> tuple[bool, int, int, int]:
        """Evidence that needs harm after every other cause; then by tier, step, order."""
        order = _ORDER.get(cause_id, len(_ORDER))
        return (cause_id in gated, causes[cause_id].tier, found[cause_id][0].step, order)

    present = sorted(found, key=key)
    rank = {c: i for i, c in enumerate(present)}

    def folds(d: str, c: str) -> bool:
        """Whether ``d`` explains ``c`` and is the cause between them: a cause that explains
        another that does not explain it back, whatever their tiers (a NaN explains
        predictions at chance), but never what came before it unless it is a fault of the
        loop or the set-up, there from the first step however late a rule saw it; of two that
        explain each other, the higher ranked."""
        if c not in causes[d].explains:
            return False
        if d in gated and c not in gated and c not in harms and causes[c].tier <= SETUP_TIER:
            return False  # weak evidence explains the harm, never another fault away
        if causes[d].tier > SETUP_TIER and found[d][0].step > found[c][0].step:
            return False
        return d not in causes[c].explains or rank[d] < rank[c]

    # Roots: the causes nothing present folds, gravest first; each root takes what it reaches
    # through the causes present. A cycle of three or more that no root reaches (each folds
    # the next) gets its highest-ranked cause as a root of its own. Only a cause that explains
    # ``c`` can fold it, so each cause is compared with those alone: linear in the causes
    # present and what they explain (a summary of 2,000 custom rules, each its own cause,
    # took 2.4 s comparing every pair).
    explained_by: dict[str, list[str]] = {}
    for d in present:
        for c in causes[d].explains:
            if c in found and c != d:
                explained_by.setdefault(c, []).append(d)
    roots = [c for c in present if not any(folds(d, c) for d in explained_by.get(c, ()))]
    owner: dict[str, str] = {}
    unowned = iter(present)  # for a cycle no root reaches, in rank order
    done = 0  # the roots walked so far
    while len(owner) < len(present):
        if done == len(roots):
            roots.append(next(c for c in unowned if c not in owner))
        for root in roots[done:]:
            done += 1
            if root in owner:
                continue
            owner[root] = root
            frontier = [root]
            while frontier:
                for c in causes[frontier.pop()].explains:
                    if c in found and c not in owner:
                        owner[c] = root
                        frontier.append(c)
    members: dict[str, list[str]] = {}
    for c in present:
        if owner[c] != c:
            members.setdefault(owner[c], []).append(c)
    problems = []
    for root in roots:
        folded = [e for c in members.get(root, ()) for e in found[c]]
        folded.sort(key=_in_time)
        problems.append(Problem(causes[root], tuple(found[root]), tuple(folded)))
    return Diagnosis("problem", tuple(problems), tuple(warnings), judged, not_judged)


def outcome_of(summary: RuleSummary) -> RuleOutcome:
    """A finished rule summary as a :class:`RuleOutcome`."""
    gravest = summary.gravest
    finding = None
    if gravest is not None:
        finding = {**gravest.to_dict(), "rule_class": summary.rule}
    evidence = tuple({**f.to_dict(), "rule_class": summary.rule} for f in summary.evidence)
    return RuleOutcome(
        summary.rule, summary.status.value, finding, summary.details, summary.rule, evidence
    )


def job_outcomes(rule_statuses: Iterable[Mapping[str, Any]]) -> list[RuleOutcome]:
    """What a job's rules said, from their status records (``summary["rules"]``)."""
    outcomes = []
    for status in rule_statuses:
        name = str(status.get("RuleConfigurationName", "?"))
        finding = status.get("gravest")
        if finding is None and status.get("gravest_step") is not None:  # an older record
            finding = {
                "rule": name,
                "rule_class": status.get("rule_class"),
                "step": status["gravest_step"],
                "message": status.get("gravest_message") or "",
                "severity": status.get("severity") or "problem",
            }
        evidence = status.get("evidence")
        outcomes.append(
            RuleOutcome(
                name,
                str(status.get("RuleEvaluationStatus", "")),
                finding,
                str(status.get("StatusDetails") or ""),
                str(status.get("rule_class") or ""),
                tuple(e for e in evidence if isinstance(e, Mapping))
                if isinstance(evidence, list)
                else (),
            )
        )
    return outcomes


def job_diagnosis(summary: Mapping[str, Any]) -> Diagnosis:
    """The diagnosis of a job from its summary (``summary.json``): what its rules said, and
    *failed* when its training did not finish (``summary["training"]``)."""
    failure = training_failure(summary.get("training"))
    found = build(job_outcomes(summary.get("rules", [])), failed=failure is not None)
    return found if failure is None else replace(found, verdict="failed", failure=failure)


def training_failure(training: object) -> str | None:
    """How training ended when it did not finish, from a job summary's ``training`` section:
    the supervisor's own words (``failure``), or for an older summary its exit code; None
    when it completed, was stopped on request, or still runs."""
    if not isinstance(training, Mapping) or training.get("status") != "Failed":
        return None
    said = training.get("failure")
    if isinstance(said, Mapping) and isinstance(said.get("text"), str):
        return str(said["text"])
    code = training.get("exit_code")
    return "training failed" + ("" if code is None else f" (exit code {code})")
