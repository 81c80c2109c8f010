"""Regular expressions that come from data, matched in time linear in the text.

A trial may come from another team or a shared bucket: the include/exclude regexes stored in
its collections are data, and a catastrophic pattern such as ``(a+)+$`` would hang Python's
backtracking ``re`` for minutes. Patterns read from a trial are compiled with RE2
(``google-re2``, a dependency of tensortap), which never backtracks. A pattern RE2 cannot
compile (backreferences, lookaround), or any pattern when RE2 is missing, raises FormatError:
the reader then falls back to the tensor names the collection lists, which are complete.
"""

from __future__ import annotations

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
