"""Regular expressions that come from data, matched in time linear in the text.

A trial may come from another team or a shared bucket: the include/exclude regexes stored in
its collections are data, and a catastrophic pattern such as ``(a+)+$`` would hang Python's
backtracking ``re`` for minutes. Patterns read from a trial are compiled with RE2
(``google-re2``, a dependency of tensortap), which never backtracks. A pattern RE2 cannot
compile (backreferences, lookaround), or any pattern when RE2 is missing, raises FormatError:
the reader then falls back to the tensor names the collection lists, which are complete.
"""

from __future__ import annotations

import re
from typing import Any, Protocol

from tensortap.exceptions import FormatError

try:  # pragma: no cover - present wherever tensortap was installed with its dependencies
    import re2 as _re2  # type: ignore[import-untyped]
except ImportError:  # pragma: no cover
    _re2 = None

#: The most memory RE2 may use for one compiled pattern.
MAX_MEM = 8 << 20
#: Longer patterns are refused outright (no collection regex needs more).
MAX_PATTERN = 4096


class Matcher(Protocol):
    @property
    def pattern(self) -> Any: ...

    def search(self, text: str) -> Any: ...


def _options() -> Any:
    options = _re2.Options()
    options.log_errors = False
    options.max_mem = MAX_MEM
    return options


#: What a reader does instead when a stored regex is refused.
LISTED_NAMES = "the collection's listed tensor names are used instead"


def compile_untrusted(pattern: object, what: str = "regex", instead: str = LISTED_NAMES) -> Matcher:
    """Compile a regex read from stored data (or a URL); FormatError if it cannot be matched
    safely, its message ending with ``instead`` (what the caller does about it)."""
    if not isinstance(pattern, str):
        raise FormatError(f"{what} must be a string, got {type(pattern).__name__}")
    if len(pattern) > MAX_PATTERN:
        raise FormatError(
            f"{what} is {len(pattern)} characters long (at most {MAX_PATTERN}); {instead}"
        )
    if _re2 is None:
        raise FormatError(
            f"{what} {pattern!r} is not matched: regexes from data need google-re2 "
            f"(pip install google-re2); {instead}"
        )
    try:
        return _re2.compile(pattern, options=_options())  # type: ignore[no-any-return]
    except (_re2.error, ValueError, TypeError) as exc:
        raise FormatError(
            f"{what} {pattern!r} cannot be matched in linear time by RE2 ({exc}); {instead}"
        ) from None


#: Lookahead patterns are matched only on texts up to this long (each text costs up to one RE2
#: match per position); a longer text does not match them.
MAX_LOOKAHEAD_TEXT = 256

_LOOKAHEAD = re.compile(r"\(\?!([A-Za-z0-9_/ .:-]*)\)")


class _NegativeLookahead:
    """``A(?!L)B`` with ``L`` a literal, matched with RE2 only: a text matches when, at some
    position ``i``, ``A`` ends at ``i`` (searched in ``text[:i]``), the text from ``i`` does not
    start with ``L`` and ``B`` matches from ``i``. This is what smdebug's default collections use
    (``^(?!gradient).*weight``), which RE2 alone refuses."""

    def __init__(self, pattern: str, head: Matcher, literal: str, tail: Matcher) -> None:
        self._pattern = pattern
        self._head, self._literal, self._tail = head, literal.replace("\\", ""), tail

    @property
    def pattern(self) -> str:
        return self._pattern

    def search(self, text: str) -> bool:
        if len(text) > MAX_LOOKAHEAD_TEXT:
            return False
        for i in range(len(text) + 1):
            rest = text[i:]
            if rest.startswith(self._literal) and self._literal:
                continue
            if self._tail.search(rest) and self._head.search(text[:i]):
                return True
        return False


def compile_untrusted_with_lookahead(pattern: object, what: str = "regex") -> Matcher:
    """:func:`compile_untrusted`, and besides what RE2 compiles, one negative lookahead of a
    literal (``A(?!literal)B``), matched in linear time per position (``_NegativeLookahead``)."""
    try:
        return compile_untrusted(pattern, what)
    except FormatError:
        if not isinstance(pattern, str) or len(pattern) > MAX_PATTERN:
            raise
        found = list(_LOOKAHEAD.finditer(pattern))
        if len(found) != 1:
            raise
        head, tail = pattern[: found[0].start()], pattern[found[0].end() :]
        try:
            return _NegativeLookahead(
                pattern,
                compile_untrusted(f"(?:{head})$", what),
                found[0].group(1),
                compile_untrusted(f"^(?:{tail})", what),
            )
        except FormatError:
            raise FormatError(
                f"{what} {pattern!r} cannot be matched in linear time; the collection's listed "
                "tensor names are used instead"
            ) from None
