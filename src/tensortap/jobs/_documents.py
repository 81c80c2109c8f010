"""The documents of a job directory, decoded once: ``job.json``, ``summary.json``, a rule's
status (``rules/NAME.json``) and the lines of ``events.jsonl``.

A job directory may be shared by someone else, damaged, or written by hand, so every field a
reader uses is checked here, once, and nothing downstream meets an unchecked value:

- JSON that cannot be read (not UTF-8, not JSON, nested deeper than :data:`MAX_DEPTH`, a
  non-finite number, larger than the caller's limit) is a :class:`JobDocumentError` saying
  what was expected, what was found and what to do.
- ``job.json`` is the job's configuration: one field of the wrong kind refuses the document.
- ``summary.json`` is what a job found: a rule entry or a field of the wrong kind is left out
  and listed (:attr:`SummaryDocument.problems`); the rest is shown. One bad rule never hides
  the others.
- Steps are whole numbers in ``[0, 2**63)``, counts too; times are finite and in
  ``[0, MAX_TIME]`` (what ``time.localtime`` and ``datetime`` take).

The work is linear in the size of a document (one pass over the parsed value; the depth is
checked without recursion).
"""

from __future__ import annotations

import json
import math
import reprlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tensortap.exceptions import FormatError
from tensortap.trials._sessions import MAX_TIME  # the latest time a document may hold

#: The deepest nesting of a job document (tensortap's own are at most about 8 deep).
MAX_DEPTH = 64
#: A step or a count: a whole number in ``[0, 2**63)``.
MAX_STEP = (1 << 63) - 1

_SHORT = reprlib.Repr()
_SHORT.maxlevel, _SHORT.maxstring, _SHORT.maxother, _SHORT.maxlist, _SHORT.maxdict = 2, 40, 40, 3, 3


class JobDocumentError(FormatError):
    """A job directory's document cannot be read: it is not what tensortap writes."""


def short(value: object) -> str:
    """``value`` for a message: bounded in length and depth, whatever it holds."""
    return _SHORT.repr(value)


def _refuse_constant(name: str) -> float:
    raise ValueError(f"{name} is not a JSON number")


def parse_json(raw: bytes, what: str) -> Any:
    """``raw`` as JSON: UTF-8, no NaN or Infinity (nor a number too large for a float), at
    most :data:`MAX_DEPTH` deep. A JobDocumentError otherwise."""
    try:
        value = json.loads(raw.decode("utf-8"), parse_constant=_refuse_constant)
    except RecursionError:
        raise JobDocumentError(
            f"{what} is nested too deeply to be a tensortap document (more than {MAX_DEPTH} "
            "levels); it was not written by tensortap: remove it or write it again"
        ) from None
    except ValueError as exc:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise JobDocumentError(
            f"{what} is not valid JSON ({exc}); tensortap writes it whole (a temporary file "
            "renamed): it was written by something else or damaged"
        ) from None
    _check_tree(value, what)
    return value


def _check_tree(value: Any, what: str) -> None:
    """No float that is not finite (``1e999`` parses as infinity), at most MAX_DEPTH deep;
    without recursion, one visit per value."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise JobDocumentError(
                f"{what} is nested more than {MAX_DEPTH} levels deep; tensortap's documents "
                "are not: it was written by something else"
            )
        if isinstance(item, float) and not math.isfinite(item):
            raise JobDocumentError(
                f"{what} holds a number too large for a float ({item}); tensortap writes "
                "finite numbers only: it was written by something else or damaged"
            )
        if isinstance(item, dict):
            stack.extend((v, depth + 1) for v in item.values())
        elif isinstance(item, list):
            stack.extend((v, depth + 1) for v in item)


# -- field checks: each answers whether a value is of its kind --


def is_str(value: Any) -> bool:
    return isinstance(value, str)


def is_step(value: Any) -> bool:
    """A step or a count: a whole number in ``[0, 2**63)`` (not a bool)."""
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_STEP


def is_int(value: Any) -> bool:
    """A whole number of 64 bits (an exit code, a pid)."""
    return (
        isinstance(value, int)
        and not isinstance(value, bool)
        and -MAX_STEP - 1 <= value <= MAX_STEP
    )


def is_time(value: Any) -> bool:
    """Seconds since the epoch, finite and at most :data:`MAX_TIME`."""
    return (
        isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value <= MAX_TIME
    )


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def is_dict(value: Any) -> bool:
    return isinstance(value, dict)


def is_str_list(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def optional(check: Callable[[Any], bool]) -> Callable[[Any], bool]:
    return lambda value: value is None or check(value)


_KINDS: dict[Callable[[Any], bool], str] = {
    is_str: "a string",
    is_step: f"a whole number from 0 to {MAX_STEP}",
    is_int: "a whole number of 64 bits",
    is_time: f"a time in seconds since 1970, at most {MAX_TIME:.0f}",
    is_number: "a number",
    is_dict: "an object",
    is_str_list: "a list of strings",
}


def _check_fields(
    doc: Mapping[str, Any], fields: Mapping[str, tuple[Callable[[Any], bool], bool]], what: str
) -> list[str]:
    """Why each field of ``doc`` named in ``fields`` is not of its kind (a field may be
    missing; with its flag set, null too)."""
    out = []
    for name, (check, nullable) in fields.items():
        if name not in doc or (nullable and doc[name] is None) or check(doc[name]):
            continue
        kind = _KINDS.get(check, "of another kind")
        out.append(f"{what}: {name!r} must be {kind}, got {short(doc[name])}")
    return out


# -- job.json --

_JOB_FIELDS: dict[str, tuple[Callable[[Any], bool], bool]] = {
    "name": (is_str, False),
    "created": (is_time, False),
    "command": (is_str_list, False),
    "user_command": (is_str_list, False),
    "trial_location": (is_str, True),
    "cwd": (is_str, True),
    "environment_names": (is_str_list, False),
    "hook_config": (is_dict, False),
    "rules_by_framework": (is_dict, False),
    "stop_grace_secs": (is_number, True),
    "rule_timeout_secs": (is_number, True),
    "rule_processes": (is_str, True),
    "framework": (is_str, True),
}


def decode_job(raw: bytes, what: str = "job.json") -> dict[str, Any]:
    """A job's ``job.json``: an object whose fields (each optional) are of their kind, its
    ``rules`` a list of objects with a string ``name``. A JobDocumentError otherwise: the
    job's configuration is read whole or not at all."""
    doc = parse_json(raw, what)
    if not isinstance(doc, dict):
        raise JobDocumentError(
            f"{what} must hold a JSON object (the job's configuration), got {short(doc)}; "
            "it was not written by tensortap"
        )
    wrong = _check_fields(doc, _JOB_FIELDS, what)
    rules = doc.get("rules", [])
    if not isinstance(rules, list):
        wrong.append(f"{what}: 'rules' must be a list of rules, got {short(rules)}")
    else:
        wrong += [
            f"{what}: rules[{i}] must be an object with a string 'name', got {short(r)}"
            for i, r in enumerate(rules)
            if not (isinstance(r, dict) and isinstance(r.get("name"), str))
        ]
    by_framework = doc.get("rules_by_framework")
    for framework, chosen in (by_framework if isinstance(by_framework, dict) else {}).items():
        if not (
            isinstance(chosen, list)
            and all(isinstance(r, dict) and isinstance(r.get("name"), str) for r in chosen)
        ):
            wrong.append(
                f"{what}: rules_by_framework[{framework!r}] must be a list of rules, got "
                f"{short(chosen)}"
            )
    if wrong:
        more = f" (and {len(wrong) - 1} more)" if len(wrong) > 1 else ""
        raise JobDocumentError(f"{wrong[0]}{more}; it was not written by tensortap")
    return doc


# -- a rule's status: an entry of summary.json's rules, and rules/NAME.json --

_RULE_FIELDS: dict[str, tuple[Callable[[Any], bool], bool]] = {
    "RuleEvaluationStatus": (is_str, False),
    "StatusDetails": (is_str, True),
    "LastModifiedTime": (is_str, True),  # ISO 8601, as SageMaker answers it
    "log": (is_str, True),
    "severity": (is_str, True),
    "gravest_step": (is_step, True),
    "gravest_message": (is_str, True),
    "first_fired_step": (is_step, True),
    "last_step": (is_step, True),
    "judged": (is_step, True),
    "evaluated": (is_step, True),
    "triggered": (is_step, True),
    "skipped": (is_step, True),
    "errors": (is_step, True),
    "message": (is_str, True),
    "rule_class": (is_str, True),
    "pid": (is_int, True),
    "severities": (is_dict, True),
}

#: Findings read from a rule status's ``evidence`` (a rule writes at most 3; the rest of a
#: longer list is left out, and said).
MAX_EVIDENCE_READ = 16
#: The fields of a finding (``gravest``, each of ``evidence``) a reader uses.
_FINDING_FIELDS: dict[str, tuple[Callable[[Any], bool], bool]] = {
    "rule": (is_str, True),
    "rule_class": (is_str, True),
    "step": (is_step, False),
    "mode_step": (is_step, True),
    "mode": (is_str, True),
    "message": (is_str, True),
    "severity": (is_str, True),
    "outcome": (is_str, True),
    "details": (is_dict, True),
}


def check_rule(entry: Any, what: str) -> tuple[dict[str, Any] | None, list[str]]:
    """A rule's status with each field of the wrong kind left out, and why; None (and why)
    when it is no object with a string ``RuleConfigurationName``."""
    if not isinstance(entry, dict) or not isinstance(entry.get("RuleConfigurationName"), str):
        return None, [
            f"{what} must be an object with a string 'RuleConfigurationName', got "
            f"{short(entry)}; left out"
        ]
    what = f"{what} ({short(entry['RuleConfigurationName'])})"
    problems = _check_fields(entry, _RULE_FIELDS, what)
    kept = {k: v for k, v in entry.items() if k not in _RULE_FIELDS or _fits(k, v, _RULE_FIELDS)}
    gravest = kept.get("gravest")
    if gravest is not None:
        wrong = _finding_problems(gravest, f"{what} gravest", f"{what}: 'gravest'")
        if wrong:
            problems += wrong
            del kept["gravest"]
    evidence = kept.get("evidence")
    if evidence is not None:
        if not isinstance(evidence, list):
            problems.append(f"{what}: 'evidence' must be a list of findings, got {short(evidence)}")
            del kept["evidence"]
        else:  # each bad finding left out with its reason, the others kept
            good = []
            for i, item in enumerate(evidence[:MAX_EVIDENCE_READ]):
                where = f"{what} evidence[{i}]"
                wrong = _finding_problems(item, where, where)
                problems += wrong
                if not wrong:
                    good.append(item)
            if len(evidence) > MAX_EVIDENCE_READ:
                problems.append(
                    f"{what}: 'evidence' holds {len(evidence)} findings, more than the "
                    f"{MAX_EVIDENCE_READ} read"
                )
            kept["evidence"] = good
    return kept, [f"{p}; left out" for p in problems]


def _finding_problems(item: Any, where: str, named: str) -> list[str]:
    """Why ``item`` is no finding a reader can use (``named`` says it in the wrong-kind case);
    empty when it is one."""
    if not isinstance(item, dict):
        return [f"{named} must be an object (a finding), got {short(item)}"]
    return _check_fields(item, _FINDING_FIELDS, where) + _check_details(item.get("details"), where)


def _check_details(details: Any, what: str) -> list[str]:
    """A finding's ``details``: the cause it names, when it names one, is a string."""
    if isinstance(details, dict) and not (details.get("cause") is None or is_str(details["cause"])):
        return [f"{what}: details 'cause' must be a string, got {short(details['cause'])}"]
    return []


def _fits(name: str, value: Any, fields: Mapping[str, tuple[Callable[[Any], bool], bool]]) -> bool:
    check, nullable = fields[name]
    return (nullable and value is None) or check(value)


def decode_rule_status(raw: bytes, what: str) -> dict[str, Any]:
    """A rule's status file (``rules/NAME.json``), written by its rule process: a field of
    the wrong kind is left out (as in the summary); a JobDocumentError when it is no rule's
    status at all."""
    return decode_rule_status_listed(raw, what)[0]


def decode_rule_status_listed(
    raw: bytes, what: str, rule: str | None = None
) -> tuple[dict[str, Any], list[str]]:
    """A rule's status file and what was left out of it, and why (see
    :func:`decode_rule_status`); with ``rule``, a status that names another rule is a
    JobDocumentError (it would be shown as that rule's, and shadow it)."""
    kept, problems = check_rule(parse_json(raw, what), what)
    if kept is None:
        raise JobDocumentError(f"{problems[0]} (a rule's status is written whole by tensortap)")
    if rule is not None and kept["RuleConfigurationName"] != rule:
        raise JobDocumentError(
            f"{what} holds the status of rule {short(kept['RuleConfigurationName'])}, not of "
            f"{short(rule)}; a rule's process writes its own status only"
        )
    return kept, problems


# -- summary.json --

_SUMMARY_FIELDS: dict[str, tuple[Callable[[Any], bool], bool]] = {
    "job": (is_str, True),
    "status": (is_str, False),
    "error": (is_str, True),
    "trial": (is_str, True),
    "supervisor_pid": (is_int, True),
    "started": (is_time, True),
    "updated": (is_time, True),
    "training": (is_dict, False),
    "diagnosis": (is_dict, False),
}

_TRAINING_FIELDS: dict[str, tuple[Callable[[Any], bool], bool]] = {
    "status": (is_str, True),
    "exit_code": (is_int, True),
    "pid": (is_int, True),
    "log": (is_str, True),
    "log_tail": (is_str, True),
    "failure": (is_dict, True),
}

_FAILURE_FIELDS: dict[str, tuple[Callable[[Any], bool], bool]] = {
    "step": (is_step, True),
    "error": (is_str, True),
    "signal": (is_int, True),  # the signal number that killed training
    "text": (is_str, True),
}


@dataclass(frozen=True)
class SummaryDocument:
    """A decoded ``summary.json``: what can be shown of it, and what was left out and why."""

    summary: dict[str, Any]
    problems: tuple[str, ...] = field(default_factory=tuple)


def decode_summary(raw: bytes, what: str = "summary.json") -> SummaryDocument:
    """A job's ``summary.json``: a JobDocumentError when it is no JSON object; otherwise each
    field of the wrong kind, and each rule entry that is not a rule's status, is left out and
    listed in :attr:`SummaryDocument.problems`."""
    doc = parse_json(raw, what)
    if not isinstance(doc, dict):
        raise JobDocumentError(
            f"{what} must hold a JSON object (the job's summary), got {short(doc)}; it was "
            "not written by tensortap"
        )
    problems = _check_fields(doc, _SUMMARY_FIELDS, what)
    if "status" not in doc:  # the supervisor writes one in every summary: not a job starting
        problems.append(f"{what}: 'status' is missing (every summary tensortap writes has one)")
    kept = {
        k: v for k, v in doc.items() if k not in _SUMMARY_FIELDS or _fits(k, v, _SUMMARY_FIELDS)
    }
    training = kept.get("training")
    if isinstance(training, dict):
        wrong = _check_fields(training, _TRAINING_FIELDS, f"{what} training")
        training = {
            k: v
            for k, v in training.items()
            if k not in _TRAINING_FIELDS or _fits(k, v, _TRAINING_FIELDS)
        }
        failure = training.get("failure")
        if isinstance(failure, dict):
            bad = _check_fields(failure, _FAILURE_FIELDS, f"{what} training failure")
            if bad:
                wrong += bad
                del training["failure"]
        problems += wrong
        kept["training"] = training
    rules = kept.pop("rules", [])
    shown: list[dict[str, Any]] = []
    if not isinstance(rules, list):
        problems.append(f"{what}: 'rules' must be a list of rule statuses, got {short(rules)}")
    else:
        for i, entry in enumerate(rules):
            rule, said = check_rule(entry, f"{what} rules[{i}]")
            problems += said
            if rule is not None:
                problems += _rule_problems(rule, f"{what} rules[{i}]")
                shown.append(rule)
    kept["rules"] = shown
    return SummaryDocument(
        kept, tuple(p if p.endswith("left out") else f"{p}; left out" for p in problems)
    )


def _rule_problems(rule: dict[str, Any], what: str) -> list[str]:
    """What the supervisor could not read of a rule's status file (its entry's ``problems``:
    said where the summary is shown); a ``problems`` of the wrong kind is one itself."""
    said = rule.get("problems")
    if said is None:
        return []
    if not is_str_list(said):
        del rule["problems"]
        return [f"{what}: 'problems' must be a list of strings, got {short(said)}"]
    return [f"{what} ({short(rule['RuleConfigurationName'])}): {p[:1000]}" for p in said[:64]]


# -- events.jsonl --

_EVENT_FIELDS: dict[str, tuple[Callable[[Any], bool], bool]] = {
    "time": (is_time, False),
    "event": (is_str, False),
    "step": (is_step, True),
    "mode_step": (is_step, True),
    "rule": (is_str, True),
    "message": (is_str, True),
    "pid": (is_int, True),
}


def decode_event(line: bytes, what: str = "events.jsonl") -> dict[str, Any]:
    """One line of ``events.jsonl``: an object with a ``time`` and an ``event`` name (a
    JobDocumentError otherwise: the caller skips that line); a common field (``step``,
    ``rule``, ``message``, ``pid``) of the wrong kind is left out."""
    doc = parse_json(line, what)
    if not (isinstance(doc, dict) and is_str(doc.get("event")) and is_time(doc.get("time"))):
        raise JobDocumentError(
            f"{what}: an event is an object with a 'time' (seconds since 1970) and an "
            f"'event' name, got {short(doc)}"
        )
    return {k: v for k, v in doc.items() if k not in _EVENT_FIELDS or _fits(k, v, _EVENT_FIELDS)}


__all__ = [
    "MAX_DEPTH",
    "MAX_STEP",
    "MAX_TIME",
    "JobDocumentError",
    "SummaryDocument",
    "check_rule",
    "decode_event",
    "decode_job",
    "decode_rule_status",
    "decode_rule_status_listed",
    "decode_summary",
    "parse_json",
    "short",
]
