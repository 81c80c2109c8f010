"""The Rule base class: a rule looks at trials at one step and answers whether its condition holds.

A rule answers; it does not act (see :mod:`tensortap.rules._invoker` for the loop that walks the
steps, and the job runner for actions). Subclasses implement ``invoke_at_step(step) -> bool``
and may describe why with :meth:`Rule.explain`; their keyword parameters are read from strings
or Python values by the annotations of ``__init__`` (see :mod:`tensortap.rules._params`), and
their values are checked by :meth:`Rule.check_values`, a class method: a configuration is
checked without a trial (:meth:`Rule.check_parameters`). A rule defined in a public module of
:mod:`tensortap.rules.builtin` registers itself (see :mod:`tensortap.rules._registry`).
"""

from __future__ import annotations

import contextlib
import logging
import traceback
import warnings
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from tensortap.core._modes import ModeKeys
from tensortap.exceptions import (
    InvalidConfigError,
    MissingCollectionFiles,
    NoMoreData,
    RuleError,
    RuleEvaluationConditionMet,
    StepUnavailable,
    TensorUnavailable,
    TensorUnavailableForStep,
)
from tensortap.rules._finding import Finding, Outcome, Said, Severity
from tensortap.rules._params import ParamSpec, check
from tensortap.rules._registry import is_builtin_module, register_rule
from tensortap.rules._required_tensors import RequiredTensors
from tensortap.rules._signature import check_parameters, parse_init

if TYPE_CHECKING:
    from tensortap.rules._numbers import Numbers
    from tensortap.trials._trial import Trial

N = TypeVar("N", bound="Numbers[Any]")

# What a rule meets when the data it needs was not saved at a step: skipped, never a crash.
MISSING_DATA = (
    TensorUnavailableForStep,
    StepUnavailable,
    TensorUnavailable,
    NoMoreData,
    MissingCollectionFiles,
)


class StepSkipped(Exception):
    """Raised by a rule when the step holds nothing it can judge (counted as skipped)."""


class _Explanation:
    __slots__ = ("_message", "details", "judged", "severity", "tensors", "threshold", "value")

    def __init__(
        self,
        message: str | Callable[[], str],
        tensors: Sequence[str],
        value: float | None,
        threshold: Any,
        severity: Severity | None,
        details: dict[str, Any],
        judged: bool | None = None,
    ) -> None:
        self._message, self.tensors, self.value = message, tuple(tensors), value
        self.threshold, self.severity, self.details = threshold, severity, details
        self.judged = judged

    @property
    def message(self) -> str:
        """What the rule said (a message given as a function is formatted once, when read)."""
        message = self._message
        if not isinstance(message, str):
            message = self._message = message()
        return message

    @message.setter
    def message(self, message: str) -> None:
        self._message = message


class _Attempt:
    """What came of asking a rule for an answer at a step (see ``Rule._attempt``)."""

    __slots__ = ("answer", "failed", "judged", "skipped")

    def __init__(self) -> None:
        self.answer: bool | None = None
        self.skipped: str | None = None  # why the step held nothing to judge
        self.failed: Finding | None = None  # the rule's own code failed: its ERROR finding
        self.judged = True  # whether the answer judged saved data (see Rule.answer)


class Rule:
    """Base of every rule. ``base_trial`` is the job the rule watches; ``other_trials`` are
    further jobs it may compare with. Subclasses implement :meth:`invoke_at_step`.

    Class attributes a rule may set: ``collections_needed`` (collections the hook must save
    for the rule to work: a job saves them, and a rule that found none of them says so),
    ``severity`` (how grave its findings are unless :meth:`explain` says otherwise).
    """

    collections_needed: ClassVar[tuple[str, ...]] = ()
    severity: ClassVar[Severity] = Severity.PROBLEM
    #: False for a rule that judges something else than saved values (time, for
    #: StalledTrainingRule): each answer then counts as judged.
    reads_data: ClassVar[bool] = True
    #: True when the answer of :meth:`judge` (or :meth:`invoke_at_step`) at a step depends on
    #: the step's declared numbers alone (hashable ones), and a quiet answer changes nothing in
    #: the rule: judging in bulk, each distinct set of numbers is judged once (until it fires).
    judges_numbers_alone: ClassVar[bool] = False
    #: Save settings a rule asks of its collections (``{"outputs": {"reductions": "max"}}``).
    collection_parameters: ClassVar[dict[str, dict[str, str]]] = {}
    #: Parameters, as found on ``__init__``; filled in for every subclass.
    _param_specs: ClassVar[tuple[ParamSpec, ...]] = ()
    #: The name of the rule's ``rule_configs`` helper, when its class name in snake case is
    #: not it (``NaNInfRootCause``: ``nan_inf_root_cause``); read from the class itself only.
    config_name: ClassVar[str]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "judge_steps" in cls.__dict__:  # the hook of a second judgement path, gone
            warnings.warn(
                f"{cls.__name__}.judge_steps is never called: a rule is judged in bulk by the "
                "engine from the numbers it declares (Rule.reads, Rule.not_judged); see "
                "docs/rules.md, 'Judging many steps at once'",
                DeprecationWarning,
                stacklevel=2,
            )
        parse_init(cls, Rule)
        if is_builtin_module(cls.__module__) and not cls.__name__.startswith("_"):
            register_rule(cls)  # a built-in rule: defined in tensortap.rules.builtin

    def __init__(self, base_trial: Trial, other_trials: Iterable[Trial] | None = None) -> None:
        if base_trial is None or not hasattr(base_trial, "tensor_names"):
            raise InvalidConfigError(
                f"rule {type(self).__name__} needs a trial as base_trial, got {base_trial!r}; "
                "open one with tensortap.create_trial(path)"
            )
        if other_trials is not None and hasattr(other_trials, "tensor_names"):
            other_trials = [other_trials]  # type: ignore[list-item]
        self.base_trial = base_trial
        self.other_trials: list[Trial] = list(other_trials or [])
        self.trials = [base_trial, *self.other_trials]
        self.req_tensors = RequiredTensors(base_trial, self.other_trials)
        self.rule_name = type(self).__name__
        self.logger = logging.getLogger(f"tensortap.rules.{self.rule_name}")
        self._explanation: _Explanation | None = None
        self._asked: set[str] = set()  # collections this rule asked the base trial for
        # why evaluations that read data judged nothing (explain(..., judged=False))
        self._unjudged: Counter[str] = Counter()
        self._numbers: tuple[Numbers[Any], ...] = ()  # what it declared it reads (reads())

    # -- what subclasses implement --
    def set_required_tensors(self, step: int) -> None:
        """Optionally ``self.req_tensors.add(...)`` what ``invoke_at_step(step)`` will read."""

    def invoke_at_step(self, step: int) -> bool:
        """True if the rule's condition holds at global ``step``. Default: :meth:`judge` over
        the numbers the rule declared (:meth:`reads`), read first."""
        numbers = self._numbers
        if not numbers or type(self).judge is Rule.judge:
            raise NotImplementedError(f"rule {self.rule_name} does not implement invoke_at_step")
        if len(numbers) == 1:
            return self.judge(step, numbers[0].at(step))
        return self.judge(step, *(each.at(step) for each in numbers))

    def judge(self, step: int, *numbers: Any) -> bool:
        """True if the rule's condition holds at global ``step``, judged from ``numbers``:
        the step's numbers the rule declared (:meth:`reads`), in the order declared. A rule
        that implements this and not :meth:`invoke_at_step` reads its numbers first: a step
        where they were not saved is skipped without calling it."""
        raise NotImplementedError(f"rule {self.rule_name} does not implement judge")

    def not_judged(self, step: int) -> Said | None:
        """What the rule says of global ``step`` when it does not judge it (a step of another
        mode, one after the first few, or any after the rule has said all it had to say),
        from the step's mode and number and the rule's state, without reading saved values:
        OK with a message or skipped (:class:`Said`); None (the default) for a step it
        judges. Asked before :meth:`invoke_at_step`, live and in bulk."""
        return None

    def begin_step(self, step: int) -> None:
        """Called before the rule judges ``step`` (live or in bulk; not at steps said by
        :meth:`not_judged`, or skipped for want of the numbers a rule reads first)."""

    def reads(self, numbers: N) -> N:
        """Declare ``numbers`` (a :class:`~tensortap.rules._numbers.Numbers`) as read by this
        rule at each step, and return them: the judgement asks ``numbers.at(step)`` (or gets
        them as :meth:`judge`'s arguments), and the engine fills them from the saved columns
        when it judges many steps at once."""
        numbers.bind(self)
        self._numbers = (*self._numbers, numbers)
        return numbers

    @property
    def declared_numbers(self) -> tuple[Numbers[Any], ...]:
        """What the rule declared it reads at each step (:meth:`reads`)."""
        return self._numbers

    def invoke_while_waiting(self, last_step: int | None) -> bool:
        """Called while the invoker waits for training to publish a new step (a rule about
        time, such as StalledTrainingRule, answers here); True if the condition holds."""
        return False

    def invoke_at_end(self, last_step: int) -> bool | None:
        """Called once when training has ended and every saved step was evaluated: judge what
        was gathered and left unjudged because the run's end was not yet known when its last
        step was read (an evaluation pass that ended the run, read live). True or False as
        :meth:`invoke_at_step`; None (the default): nothing is left to judge."""
        return None

    # -- helpers for subclasses --
    def explain(
        self,
        message: str | Callable[[], str],
        tensors: Sequence[str] | str = (),
        value: float | None = None,
        threshold: Any = None,
        severity: Severity | None = None,
        *,
        judged: bool | None = None,
        **details: Any,
    ) -> None:
        """Say why the current evaluation answered as it did (kept in its :class:`Finding`);
        ``severity`` overrides the rule's own for this finding. ``judged=False`` says that the
        evaluation judged nothing although it read saved values (it only collected a baseline,
        or had nothing to compare a single value with): ``message`` is then why, and a rule
        whose evaluations all judged nothing ends NoData saying so; ``judged=True`` says it
        judged what was saved without reading a value (which tensors exist). ``message`` may
        be a function that formats it: called only when the message is read (a quiet step
        judged in bulk keeps no message)."""
        if isinstance(tensors, str):
            tensors = (tensors,)
        self._explanation = _Explanation(
            message, tensors, value, threshold, severity, details, judged
        )

    def skip(self, reason: str) -> StepSkipped:
        """``raise self.skip("no gradients at this step")`` when a step holds nothing to judge."""
        return StepSkipped(reason)

    @classmethod
    def check_param(cls, name: str, value: Any, ok: bool, expected: str) -> None:
        """Fail, naming the rule and parameter, unless ``ok`` (in :meth:`check_values`)."""
        check(cls.__name__, name, value, ok, expected)

    @classmethod
    def parameters(cls) -> tuple[ParamSpec, ...]:
        """The rule's parameters (name, type, default)."""
        return cls._param_specs

    @classmethod
    def check_values(cls, params: Mapping[str, Any]) -> None:
        """Check the values of the rule's parameters (every one of :meth:`parameters`, by
        name, read and with the defaults filled in) with :meth:`check_param`. Runs before
        ``__init__`` when the rule is built, and without a trial when a configuration names
        it (:meth:`check_parameters`). A subclass that changes the parameters of the rule it
        extends overrides it (calling ``super().check_values(params)`` for those it keeps)."""

    @classmethod
    def check_parameters(cls, **params: Any) -> dict[str, Any]:
        """The rule's parameters read from ``params`` (strings or values) over its defaults,
        checked without a trial: an unknown, missing, unreadable or out-of-range value raises
        InvalidConfigError now rather than when the rule starts."""
        return check_parameters(cls, params)

    @classmethod
    def required_collections(cls, **params: Any) -> tuple[str, ...]:
        """Collections the hook must save for this rule (given its parameters)."""
        return cls.collections_needed

    def no_data_reason(self) -> str:
        """What the rule looked for and did not find, for a rule that judged nothing: the
        collections it needs that hold no tensor in the trial, and how to save them."""
        needed = list(dict.fromkeys([*type(self).collections_needed, *sorted(self._asked)]))
        empty = []
        for collection in needed:
            try:
                if not self.base_trial.tensor_names(collection=collection):
                    empty.append(collection)
            except MissingCollectionFiles:  # no such collection recorded at all
                empty.append(collection)
        # what it said of the steps it read and did not judge comes first: the real reason
        reasons = [reason for reason, _ in self._unjudged.most_common(2)]
        if empty:
            reasons.append(
                f"the trial has no tensor in {', '.join(empty)}; save "
                f"{'them' if len(empty) > 1 else 'it'} with include_collections="
                f"{empty!r}, or declare collections_needed = {tuple(empty)!r} on the rule "
                "class (a job saves what its rules declare)"
            )
        if not reasons:
            return "it read no saved value at any step" + (
                f" (it reads {', '.join(needed)})" if needed else ""
            )
        return "; ".join(reasons)

    # -- evaluation --
    def evaluate(self, step: int) -> Finding:
        """Run the rule at ``step`` and say what came of it; never raises for the rule's errors
        or for missing data (those become SKIPPED and ERROR findings)."""
        self.begin_step(step)
        return self.finding_of(step, self.answer(step))

    def answer(self, step: int, *, held: bool = False, judged: bool = False) -> _Attempt:
        """The rule's answer at ``step`` (its explanation kept for :meth:`finding_of`), and
        whether it judged saved data; ``held``: the base trial's ``no_refresh`` holds
        already; ``judged``: :meth:`not_judged` said already that the rule judges the step."""
        reads = self._values_read()
        tried = self._attempt(step, self._judged_step if judged else self._invoked, held)
        if tried.failed is None and tried.skipped is None:
            tried.judged = self._judged_data(bool(tried.answer), self._values_read() > reads)
        return tried

    def _invoked(self, step: int) -> bool | None:
        """What the rule says at ``step``: :meth:`not_judged`, else :meth:`invoke_at_step`."""
        cls = type(self)
        if cls.not_judged is not Rule.not_judged:
            said = self.not_judged(step)
            if said is not None:
                if said.outcome is Outcome.SKIPPED:
                    raise StepSkipped(said.message)
                self.explain(said.message, judged=said.judged)
                return False
        return self._judged_step(step)

    def _judged_step(self, step: int) -> bool | None:
        """:meth:`invoke_at_step`, with the tensors it declared it reads fetched first."""
        if type(self).set_required_tensors is not Rule.set_required_tensors:
            self.req_tensors.clear()
            self.set_required_tensors(step)
            self.req_tensors.fetch()
        return self.invoke_at_step(step)

    def answer_over(self, step: int, found: tuple[Any, ...]) -> _Attempt:
        """:meth:`answer` at ``step`` of a rule that reads its declared numbers first
        (:attr:`reads_first`), given them (``found``, gathered by the engine), the base trial's
        view held already: :meth:`judge` called with them, as :meth:`invoke_at_step` calls it
        (they count as read, and their collections as asked)."""
        self._explanation = None
        base = self.base_trial
        asked_before = base.collections_asked
        asked: set[str] = set()
        base.collections_asked = asked
        read = base.values_read
        tried = _Attempt()
        try:
            for numbers, given in zip(self._numbers, found, strict=True):
                numbers.counted(given)
            tried.answer = self.judge(step, *found)
        except (Exception, SystemExit) as exc:
            self._no_answer(tried, step, exc)
        finally:
            if asked:
                self._asked |= asked
                base.collections_asked = asked_before | asked
            else:
                base.collections_asked = asked_before
        if tried.failed is None and tried.skipped is None:
            tried.judged = self._judged_data(bool(tried.answer), base.values_read > read)
        return tried

    def _judged_data(self, answer: bool, read: bool, count: int = 1) -> bool:
        """Whether an answer judged saved data: it fired, the rule reads none, or it read some,
        unless its explanation says otherwise (``judged=False``: counted, ``count`` times, in
        what the rule says when it ends NoData)."""
        judged = answer or not self.reads_data or read
        said = self._explained()
        if not answer and said is not None and said.judged is False:
            judged = False
            self._unjudged[said.message[:200]] += count
        elif said is not None and said.judged:  # judged what was saved, not values (names)
            judged = True
        return judged

    def said_judged(self, said: Said, count: int) -> bool:
        """Whether ``count`` steps said OK by :meth:`not_judged` as ``said`` judged saved data
        (counted as evaluating each would count it)."""
        self.explain(said.message, judged=said.judged)
        try:
            return self._judged_data(False, False, count)
        finally:
            self._explanation = None

    def finding_of(self, step: int, tried: _Attempt) -> Finding:
        """The Finding of the answer ``tried`` at ``step``."""
        if tried.failed is not None:
            return tried.failed
        mode, mode_step = _mode_of(self.base_trial, step)
        if tried.skipped is not None:
            return self._finding(step, mode, mode_step, Outcome.SKIPPED, tried.skipped)
        answer = tried.answer
        outcome = Outcome.TRIGGERED if answer else Outcome.OK
        default = "condition met" if answer else "condition not met"
        return self._finding(step, mode, mode_step, outcome, default, judged=tried.judged)

    def quiet_or_finding(self, step: int, tried: _Attempt) -> Finding | tuple[Outcome, str, bool]:
        """(outcome, message, judged) of the quiet answer ``tried`` at ``step`` (OK, skipped),
        or the Finding of one that fired or failed."""
        if tried.failed is not None or (tried.skipped is None and tried.answer):
            return self.finding_of(step, tried)
        said, self._explanation = self._explanation, None
        if tried.skipped is not None:
            return (Outcome.SKIPPED, tried.skipped, False)
        return (Outcome.OK, "" if tried.judged or said is None else said.message, tried.judged)

    def _attempt(
        self, step: int, invoke: Callable[[int], bool | None], held: bool = False
    ) -> _Attempt:
        """Call ``invoke(step)`` (the rule's answer at global ``step``) with one consistent
        view of the trials (``held``: the base trial's view holds already), noting the
        collections it asks for (see :meth:`no_data_reason`): its answer, or why it gave none
        (the step held nothing to judge, or the rule's own code failed: an ERROR finding)."""
        self._explanation = None
        base = self.base_trial
        asked_before = getattr(base, "collections_asked", None)
        if asked_before is not None:
            base.collections_asked = set()
        tried = _Attempt()
        try:
            if held and len(self.trials) == 1:
                tried.answer = invoke(step)
            else:
                with _holding(self.trials):  # one consistent view per evaluation
                    tried.answer = invoke(step)
        except (Exception, SystemExit) as exc:
            self._no_answer(tried, step, exc)
        finally:
            if asked_before is not None:
                self._asked |= base.collections_asked
                base.collections_asked = asked_before | base.collections_asked
        return tried

    def _no_answer(self, tried: _Attempt, step: int, exc: BaseException) -> None:
        """Why an attempt at ``step`` gave no answer: the step held nothing to judge (skipped,
        with the reason), or the rule's own code failed or exited (an ERROR finding)."""
        if isinstance(exc, (StepSkipped, *MISSING_DATA)):
            tried.skipped = str(exc)
        else:
            tried.failed = self._failed(step, *_mode_of(self.base_trial, step), exc)

    def _explained(self) -> _Explanation | None:
        return self._explanation

    def _values_read(self) -> int:
        if len(self.trials) == 1:
            return int(getattr(self.base_trial, "values_read", 0))
        return sum(getattr(t, "values_read", 0) for t in self.trials)

    # -- many steps at once (the engine: rules/_engine.py) --
    @property
    def judges_in_bulk(self) -> bool:
        """True if the engine judges this rule's steps in bulk: it declared the numbers it
        reads (:meth:`reads`) or the steps it does not judge (:meth:`not_judged`)."""
        return bool(self._numbers) or self.has_gate

    @property
    def has_gate(self) -> bool:
        """True if the rule says of some steps that it does not judge them (:meth:`not_judged`)."""
        return type(self).not_judged is not Rule.not_judged

    @property
    def requires_tensors(self) -> bool:
        """True if the rule names tensors to fetch before each step
        (:meth:`set_required_tensors`)."""
        return type(self).set_required_tensors is not Rule.set_required_tensors

    @property
    def reads_first(self) -> bool:
        """True if the rule reads its declared numbers before it judges (:meth:`judge`)."""
        return bool(self._numbers) and type(self).invoke_at_step is Rule.invoke_at_step

    def failure(self, step: int, exc: BaseException) -> Finding:
        """The ERROR finding of ``exc``, raised by this rule's own code at ``step``."""
        return self._failed(step, *_mode_of(self.base_trial, step), exc)

    def _failed(
        self, step: int, mode: ModeKeys | None, mode_step: int | None, exc: BaseException
    ) -> Finding:
        trace = "".join(traceback.format_exception(exc))
        return self._finding(step, mode, mode_step, Outcome.ERROR, failure_text(exc), trace)

    def note_asked(self, *collections: str) -> None:
        """Count ``collections`` as asked for by this rule (as reading their names at a step
        would): numbers gathered in bulk count what reading them live would have asked."""
        self._asked.update(collections)
        asked = getattr(self.base_trial, "collections_asked", None)
        if asked is not None:
            asked.update(collections)

    def waiting_finding(self, last_step: int | None) -> Finding | None:
        """The finding of :meth:`invoke_while_waiting`, or None when nothing is to report."""
        self._explanation = None
        step = -1 if last_step is None else last_step
        try:
            answer = self.invoke_while_waiting(last_step)
        except (Exception, SystemExit) as exc:
            return self._failed(step, None, None, exc)
        if not answer:
            return None
        return self._finding(step, None, None, Outcome.TRIGGERED, "condition met")

    def ending_finding(self, last_step: int | None) -> Finding | None:
        """The finding of :meth:`invoke_at_end` at the run's last step, or None when it has
        nothing left to judge."""
        if last_step is None:
            return None
        tried = self._attempt(last_step, self.invoke_at_end)
        if tried.failed is not None:
            return tried.failed
        if tried.skipped is not None or tried.answer is None:
            return None
        answer = tried.answer
        outcome = Outcome.TRIGGERED if answer else Outcome.OK
        default = "condition met" if answer else "condition not met"
        said = self._explained()
        judged = said is None or said.judged is not False
        mode, mode_step = _mode_of(self.base_trial, last_step)
        return self._finding(last_step, mode, mode_step, outcome, default, judged=judged)

    def invoke(self, step: int) -> None:
        """smdebug's entry point: evaluate at ``step`` and raise RuleEvaluationConditionMet if
        the condition holds (errors in the rule propagate)."""
        finding = self.evaluate(step)
        if finding.outcome is Outcome.ERROR:
            raise RuleError(self.rule_name, step, finding.message, finding.traceback or "")
        if finding.triggered:
            raise RuleEvaluationConditionMet(self.rule_name, step, message=finding.message)

    def _finding(
        self,
        step: int,
        mode: ModeKeys | None,
        mode_step: int | None,
        outcome: Outcome,
        default_message: str,
        traceback: str | None = None,
        judged: bool = True,
    ) -> Finding:
        ex = self._explanation if outcome in (Outcome.OK, Outcome.TRIGGERED) else None
        self._explanation = None
        severity = None
        if outcome is Outcome.TRIGGERED:
            severity = type(self).severity if ex is None or ex.severity is None else ex.severity
        if ex is None:
            return Finding(
                self.rule_name,
                step,
                outcome,
                default_message,
                mode,
                mode_step,
                traceback=traceback,
                severity=severity,
                judged=judged,
            )
        return Finding(
            self.rule_name,
            step,
            outcome,
            ex.message,
            mode,
            mode_step,
            ex.tensors,
            None if ex.value is None else float(ex.value),
            ex.threshold,
            ex.details,
            severity=severity,
            judged=judged,
        )

    def __repr__(self) -> str:
        params = ", ".join(f"{s.name}={getattr(self, s.name, '?')!r}" for s in self._param_specs)
        return f"{self.rule_name}({params})"


def _mode_of(trial: Trial, step: int) -> tuple[ModeKeys | None, int | None]:
    try:
        with trial.no_refresh():
            return trial.mode(step), trial.mode_step(step)
    except Exception:
        return None, None


def _holding(trials: Sequence[Trial]) -> contextlib.AbstractContextManager[Any]:
    """Every trial's ``no_refresh`` at once (one trial's alone: the usual case, and cheap)."""
    if len(trials) == 1:
        return trials[0].no_refresh()
    held = contextlib.ExitStack()
    for trial in trials:
        held.enter_context(trial.no_refresh())
    return held


def failure_text(exc: BaseException) -> str:
    """What a rule's failure says (a rule that calls sys.exit() is told what to do instead)."""
    if isinstance(exc, SystemExit):
        return (
            f"SystemExit: the rule called sys.exit({exc.code!r}); a rule reports by returning "
            "True (condition met) or False from invoke_at_step, never by exiting"
        )
    return f"{type(exc).__name__}: {exc}"
