"""A structure-aware fuzzer of the small documents a reader meets beside a trial's data, that
checks values, not only exceptions: a trial's session records, a job's rule status files
(``rules/NAME.json``) and smdebug's collections files.

For each kind :func:`fuzz_documents` builds a healthy place holding a good document beside the
one it damages (:func:`tensortap.testing._job_fuzz.mutate_document`: a field of the wrong kind,
a number out of range or one JSON cannot hold as a float, deep nesting, a deleted or
duplicated entry, the bytes cut or flipped), reads it as tensortap does and compares what is
served with the documents themselves. A case passes when

- no reader raises an error that is not tensortap's own, nor takes longer than the deadline;
- the good document is served with the very values it had (one bad item hides nothing), and
  a trial's rows are all still served;
- the damaged one is served with the values it holds, each of its kind and in range, or what
  is left out is listed with its reason (``trial.problems()``, a rule entry's ``problems``
  and the summary's, the smdebug reader's ``problems``). A value lost or altered with nothing
  listed (``lost``), or an out-of-range value served (``unchecked``), is a failure.

``tests/security/test_hostile_documents.py`` runs a few hundred cases; ``python
bench/bench_fuzz.py --format documents`` runs thousands per kind (docs/format.md has figures).
"""

from __future__ import annotations

import json
import random
import shutil
import time
import traceback
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from tensortap.testing._job_fuzz import JobFuzzSummary, _loose, _plain, mutate_document

#: The documents fuzzed, by kind.
KINDS = ("session", "rule_status", "smdebug_collections")

_MODES = ("TRAIN", "EVAL", "PREDICT", "GLOBAL")
_MAX_TIME = 253_402_300_799.0


def _is_step(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 1 << 63


def _is_opt(check: Callable[[Any], bool]) -> Callable[[Any], bool]:
    return lambda value: value is None or check(value)


def _is_str(value: Any) -> bool:
    return isinstance(value, str)


# -- session records --


def _healthy_trial(path: Path) -> None:
    """A trial of one worker and two sessions: three steps, then a resumed session of one step
    that records an event (so its record holds mode steps, a resumed step and events)."""
    from tensortap.core._save_config import SaveConfig
    from tensortap.hook._hook import Hook

    with Hook(path, save_config=SaveConfig(save_interval=1)) as hook:
        for step in range(3):
            hook.save_tensor("loss", np.float32(1.0 / (step + 1)), collections="losses")
            hook.next_step()
    with Hook(path, save_config=SaveConfig(save_interval=1)) as hook:
        hook.save_tensor("loss", np.float32(0.2), collections="losses")
        hook.record_event("note", {"lr": 0.1, "why": "a test"})
        hook.next_step()


#: What a served session record's fields must be (an independent statement of the format).
_SESSION_FIELDS: dict[str, Callable[[Any], bool]] = {
    "session": lambda v: isinstance(v, str) and 0 < len(v) <= 256,
    "started": _is_opt(
        lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v <= _MAX_TIME
    ),
    "host": _is_opt(_is_str),
    "pid": _is_opt(lambda v: _is_step(v) and v < 1 << 32),
    "resumed_from_step": _is_opt(_is_step),
    "step_source": _is_opt(_is_str),
    "mode_steps": _is_opt(
        lambda v: isinstance(v, dict) and all(k in _MODES and _is_step(s) for k, s in v.items())
    ),
    "rolled_back": _is_opt(
        lambda v: (
            isinstance(v, list)
            and all(
                isinstance(r, list)
                and len(r) == 3
                and r[0] in _MODES
                and _is_step(r[1])
                and _is_step(r[2])
                and r[1] <= r[2]
                for r in v
            )
        )
    ),
    "events": _is_opt(
        lambda v: (
            isinstance(v, list)
            and len(v) <= 256
            and all(
                isinstance(e, dict)
                and isinstance(e.get("kind"), str)
                and e["kind"] != ""
                and isinstance(e.get("fields"), dict)
                and _is_opt(_is_step)(e.get("global_step"))
                for e in v
            )
        )
    ),
}


#: What a session's field is when its record holds none.
_EMPTY: dict[str, Any] = {"mode_steps": {}, "rolled_back": [], "events": []}


def _shown_session(session: Any) -> dict[str, Any]:
    """A Session's fields as its record holds them."""
    return {
        "session": session.id,
        "started": session.started,
        "host": session.host,
        "pid": session.pid,
        "resumed_from_step": session.resumed_from_step,
        "step_source": session.step_source,
        "mode_steps": dict(session.mode_steps),
        "rolled_back": [list(r) for r in session.rolled_back],
        "events": [dict(e) for e in session.events],
    }


def _check_session(raw: bytes, key: str, problems: list[str], shown: Any) -> tuple[str, str]:
    """(result, why) of a damaged record as the trial serves it (``shown``: its Session, None
    when the trial has none of that index)."""
    if any(key in p for p in problems):
        return "listed", ""
    doc = _loose(raw)
    if shown is None:
        return "lost", f"record not served and not listed (it holds {raw[:80]!r})"
    if not isinstance(doc, dict):
        return "unchecked", f"a record of {type(doc).__name__} served as a session"
    got = _shown_session(shown)
    for name, ok in _SESSION_FIELDS.items():
        value = doc.get(name)
        if not ok(value):
            return "unchecked", f"{name} {value!r:.60} served as {got[name]!r:.60}"
        want = _EMPTY[name] if value is None and name in _EMPTY else value
        if got[name] != want or type(got[name]) not in (type(want), float):
            return "lost", f"{name} {want!r:.60} served as {got[name]!r:.60}"
    if not _plain(doc):
        return "unchecked", "a record holding NaN, an infinity or deep nesting served"
    return "read", ""


class _SessionCase:
    """A trial whose second session record is damaged; its first is the good one."""

    def __init__(self, work: Path) -> None:
        from tensortap.testing._fuzz import read_rows
        from tensortap.trials._trial import create_trial

        self.root = work / "trial"
        _healthy_trial(self.root)
        sessions = self.root / "workers" / "worker_0" / "sessions"
        self.path = sessions / "000001.json"
        self.key = "workers/worker_0/sessions/000001.json"
        self.original = self.path.read_bytes()
        self.rows, problems = read_rows(self.root)
        if problems:
            raise AssertionError(f"the healthy trial has problems: {problems}")
        self.good = _shown_session(create_trial(self.root).sessions()[0])

    def run(self, raw: bytes) -> tuple[str, str]:
        from tensortap.report._training import _sessions_table
        from tensortap.testing._fuzz import read_rows, row_damage
        from tensortap.trials._trial import create_trial

        self.path.write_bytes(raw)
        rows, problems = read_rows(self.root)
        result, why = row_damage(self.rows, rows)
        if result:
            return result, f"rows: {why}"
        trial = create_trial(self.root)
        sessions = {s.index: s for s in trial.sessions()}
        _sessions_table(list(sessions.values()))  # the report's table: no untyped error
        problems = trial.problems()
        if 0 not in sessions or _shown_session(sessions[0]) != self.good:
            return "lost", "the good session record is not served as it was"
        return _check_session(raw, self.key, problems, sessions.get(1))

    def restore(self) -> None:
        self.path.write_bytes(self.original)


# -- a job's rule status files --

_GOOD_STATUS: dict[str, Any] = {
    "RuleConfigurationName": "Good",
    "RuleEvaluationStatus": "NoIssuesFound",
    "StatusDetails": "",
    "LastModifiedTime": "2026-11-29T17:00:00+00:00",
    "rule_class": "LossNotDecreasing",
    "judged": 4,
    "evaluated": 4,
    "triggered": 0,
    "pid": 4242,
}
_BAD_STATUS: dict[str, Any] = {
    "RuleConfigurationName": "Bad",
    "RuleEvaluationStatus": "IssuesFound",
    "StatusDetails": "RuleEvaluationConditionMet: the loss stopped decreasing",
    "LastModifiedTime": "2026-11-29T17:00:00+00:00",
    "rule_class": "LossNotDecreasing",
    "first_fired_step": 2,
    "message": "the loss stopped decreasing",
    "severity": "problem",
    "severities": {"problem": 1},
    "gravest_step": 2,
    "gravest_message": "the loss stopped decreasing",
    "gravest": {
        "rule": "Bad",
        "step": 2,
        "mode": "TRAIN",
        "mode_step": 2,
        "message": "the loss stopped decreasing",
        "severity": "problem",
        "details": {"cause": "lr_too_high"},
    },
    "evidence": [
        {
            "rule": "Bad",
            "step": 3,
            "mode": "TRAIN",
            "mode_step": 3,
            "message": "the weights grew 9 times",
            "severity": "warning",
            "details": {"cause": "lr_too_high", "needs_harm": True},
        }
    ],
    "judged": 4,
    "evaluated": 4,
    "triggered": 1,
    "skipped": 0,
    "errors": 0,
    "pid": 4242,
}
_RULE_STEPS = frozenset(
    ("gravest_step", "first_fired_step", "last_step", "judged", "evaluated", "triggered")
) | {"skipped", "errors"}
_RULE_TEXTS = frozenset(
    ("RuleEvaluationStatus", "StatusDetails", "LastModifiedTime", "log", "severity")
) | {"gravest_message", "message", "rule_class"}


#: A rule status's lists whose bad items are left out one by one (each named), the rest kept.
_ITEM_LISTS = frozenset({"evidence"})


def _items_left_out_said(held: Any, served: Any, name: str, listed: list[str]) -> bool:
    """Whether ``served`` is the list ``held`` with some items left out, each named in
    ``listed`` (``name[i]``), the others kept in order as they were."""
    if not isinstance(held, list) or not isinstance(served, list):
        return False
    kept = iter(served)
    expected = next(kept, None)
    for i, item in enumerate(held):
        if expected is not None and item == expected:
            expected = next(kept, None)
        elif not any(f"{name}[{i}]" in p for p in listed):
            return False
    return expected is None


def _rule_field_ok(name: str, value: Any) -> bool:
    """Whether a rule status's field, as served, is of its kind (None is no value)."""
    if value is None:
        return True
    if name in _RULE_STEPS:
        return _is_step(value)
    if name in _RULE_TEXTS:
        return isinstance(value, str)
    if name == "gravest":  # a finding: its step, when it names one, is a step
        return isinstance(value, dict) and _is_opt(_is_step)(value.get("step"))
    if name == "evidence":  # findings, each as the gravest
        return isinstance(value, list) and all(_rule_field_ok("gravest", v) for v in value)
    if name == "severities":
        return isinstance(value, dict)
    return True


class _RuleStatusCase:
    """A job whose rule ``Bad``'s status file is damaged beside rule ``Good``'s."""

    def __init__(self, work: Path) -> None:
        from tensortap.jobs._record import JobRecord, write_json
        from tensortap.jobs._supervisor import rule_entry

        self.record = JobRecord(work / "job")
        self.record.create({"name": "job", "created": 1_700_000_000.0, "command": ["x"]})
        write_json(self.record.rule_status_file("Good"), _GOOD_STATUS)
        write_json(self.record.rule_status_file("Bad"), _BAD_STATUS)
        self.path = self.record.rule_status_file("Bad")
        self.original = self.path.read_bytes()
        self.entry = rule_entry
        self.good = rule_entry(self.record, "Good")
        if rule_entry(self.record, "Bad") != _BAD_STATUS or self.good != _GOOD_STATUS:
            raise AssertionError("the healthy rule statuses are not served as written")

    def run(self, raw: bytes) -> tuple[str, str]:
        from tensortap.jobs._documents import decode_summary

        self.path.write_bytes(raw)
        good, bad = self.entry(self.record, "Good"), self.entry(self.record, "Bad")
        if good != self.good:
            return "lost", "the good rule's status changed beside the bad one"
        summary = {"job": "job", "status": "Completed", "rules": [good, bad]}
        shown = decode_summary(json.dumps(summary).encode())  # as every view reads it
        named = {r["RuleConfigurationName"]: r for r in shown.summary["rules"]}
        if named.get("Good") != good or named.get("Bad") != bad:
            return "lost", "the summary does not show the entries the supervisor wrote"
        listed = bad.get("problems") or []
        if listed and not any("rules[1]" in p and "Bad" in p for p in shown.problems):
            return "lost", "the rule status's problems are not in the summary's"
        doc = _loose(raw)
        kept = {k: v for k, v in bad.items() if k != "problems"}
        if self.record.read_rule_status("Bad")[0] is None:
            # unreadable: shown in progress, with the reason
            if not listed:
                return "lost", f"an unreadable status ({raw[:60]!r}) shown with no reason"
            return "listed", ""
        for name, value in kept.items():
            if not _rule_field_ok(name, value):
                return "unchecked", f"{name} {value!r:.60} served"
            if name in _ITEM_LISTS and _items_left_out_said(doc.get(name), value, name, listed):
                continue  # each bad item left out and named, the others kept as they were
            if name in doc and doc[name] != value and value == value:
                return "lost", f"{name} {doc[name]!r:.60} served as {value!r:.60}"
        for name in doc:
            if name not in kept and not any(name in p for p in listed):
                return "lost", f"{name} {doc[name]!r:.60} left out unsaid"
        if not listed and (doc.get("RuleConfigurationName") != "Bad" or not _plain(doc)):
            return "unchecked", "a status that is not rule Bad's, or not JSON tensortap writes"
        return ("listed" if listed else "read"), ""

    def restore(self) -> None:
        self.path.write_bytes(self.original)


# -- smdebug collections files --

_SECOND_COLLECTIONS: dict[str, Any] = {
    "collections": {
        "weights": {"name": "weights", "include_regex": [], "tensor_names": ["dense2_weight"]},
        "custom": {
            "name": "custom",
            "include_regex": ["^dense1_"],
            "tensor_names": ["dense1_bias"],
            "reduction_config": {"save_raw_tensor": True, "reductions": ""},
            "save_config": {"TRAIN": {"save_interval": 2}},
        },
        "empty": {"name": "empty"},
    }
}


def _collections_of(doc: Any) -> dict[str, dict[str, list[str]]] | None:
    """The collections an smdebug collections document holds, those that are not what smdebug
    writes left out (None: it is no such document)."""
    data = doc.get("collections") if isinstance(doc, dict) else None
    if not isinstance(data, dict):
        return None
    out: dict[str, dict[str, list[str]]] = {}
    for name, entry in data.items():
        if not isinstance(entry, dict):
            continue
        lists: dict[str, Any] = {k: entry.get(k) for k in ("include_regex", "tensor_names")}
        lists = {k: [] if v is None else v for k, v in lists.items()}
        if all(isinstance(v, list) and all(isinstance(s, str) for s in v) for v in lists.values()):
            out[name] = lists
    return out


def _merge(*docs: dict[str, dict[str, list[str]]]) -> dict[str, dict[str, list[str]]]:
    merged: dict[str, dict[str, list[str]]] = {}
    for doc in docs:
        for name, entry in doc.items():
            into = merged.setdefault(name, {"include_regex": [], "tensor_names": []})
            for k, values in entry.items():
                for value in values:
                    if value not in into[k]:
                        into[k].append(value)
    return merged


class _CollectionsCase:
    """An smdebug trial (the golden fixture) with a second worker's collections file, which is
    damaged beside the first."""

    def __init__(self, work: Path, fixture: Path) -> None:
        self.root = work / "smdebug"
        shutil.copytree(fixture, self.root)
        first = next(self.root.glob("collections/*/*_collections.json"))
        self.path = first.with_name("worker_1_collections.json")
        self.key = f"collections/{first.parent.name}/{self.path.name}"
        self.original = json.dumps(_SECOND_COLLECTIONS).encode()
        self.path.write_bytes(self.original)
        good = _collections_of(json.loads(first.read_bytes()))
        assert good is not None
        self.good = good

    def run(self, raw: bytes) -> tuple[str, str]:
        from tensortap.smdebug._reader import SmdebugReader
        from tensortap.storage._local import LocalStore

        self.path.write_bytes(raw)
        reader = SmdebugReader(LocalStore(str(self.root)))
        got = reader.collections()
        mine = [p for p in reader.problems if self.key in p]
        doc = _collections_of(_loose(raw))
        if doc is None:
            if got != _merge(self.good):
                return "lost", "the good file's collections are not served as they were"
            return ("listed", "") if mine else ("lost", "an unreadable file left out unsaid")
        want = _merge(self.good, doc)
        if got != want:
            diff = sorted(n for n in {*got, *want} if got.get(n) != want.get(n))
            return "lost", f"collections {diff!r:.80}: served {got.get(diff[0])!r:.100}, held " + (
                f"{want.get(diff[0])!r:.100}"
            )
        data = (_loose(raw) or {})["collections"]
        for name in data:
            if name not in doc and not any(repr(name[:200]) in p for p in mine):
                return "lost", f"collection {name!r:.60} left out unsaid"
        return ("listed", "") if mine else ("read", "")

    def restore(self) -> None:
        self.path.write_bytes(self.original)


# -- the fuzz loop --


def fuzz_documents(
    work: Path,
    cases: int,
    seed: int = 0,
    kinds: tuple[str, ...] = KINDS,
    deadline: float = 20.0,
    smdebug_fixture: Path | None = None,
) -> JobFuzzSummary:
    """``cases`` mutated documents of each of ``kinds`` (see the module docstring);
    ``smdebug_fixture``: the smdebug trial whose collections are fuzzed (needed for that
    kind)."""
    rng = random.Random(seed)
    summary = JobFuzzSummary()
    for kind in kinds:
        place = work / kind
        place.mkdir(parents=True)
        case_of: Any
        if kind == "session":
            case_of = _SessionCase(place)
        elif kind == "rule_status":
            case_of = _RuleStatusCase(place)
        else:
            if smdebug_fixture is None:
                raise ValueError("fuzzing smdebug collections needs the smdebug fixture")
            case_of = _CollectionsCase(place, smdebug_fixture)
        for case in range(cases):
            raw, mutation = mutate_document(case_of.original, rng, kind)
            started = time.perf_counter()
            try:
                result, why = case_of.run(raw)
            except Exception as exc:  # an untyped error is what the fuzzer looks for
                result = "untyped"
                why = "".join(traceback.format_exception_only(exc)).strip()
            seconds = time.perf_counter() - started
            summary.slowest = max(summary.slowest, seconds)
            if seconds > deadline:
                result, why = "slow", f"{seconds:.1f} s (deadline {deadline} s)"
            summary.cases += 1
            summary.results[result] += 1
            summary.by_kind.setdefault(kind, Counter())[result] += 1
            summary.by_mutation.setdefault(f"{kind}/{mutation}", Counter())[result] += 1
            if result in ("lost", "wrong", "unchecked", "untyped", "slow"):
                summary.failures.append(f"{kind} case {case} ({mutation}): {result}: {why}")
        case_of.restore()
    return summary


def bench_main(cases: int, seed: int, deadline: float, as_json: bool, smdebug_fixture: Path) -> int:
    """``bench/bench_fuzz.py --format documents``: ``cases`` per document kind; exit 1 on a
    failure."""
    import tempfile

    from tensortap.testing._job_fuzz import _quiet, report

    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp, _quiet():
        found = fuzz_documents(
            Path(tmp), cases, seed, deadline=deadline, smdebug_fixture=smdebug_fixture
        )
    seconds = time.perf_counter() - started
    return report(found, "documents", "documents", seconds, as_json, width=20)


__all__ = ["KINDS", "fuzz_documents"]
