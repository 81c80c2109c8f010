"""docs/rules.md's "Each cause's conditions" table is held to the vocabulary of causes: one row
per cause, in the vocabulary's order, with its tier and what it explains as the code has them,
so that the doc cannot fall behind a cause added, renamed or relinked."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

from tensortap.rules._causes import (
    _DIVERGENCE,
    _STALL,
    _UNITS,
    CAUSES,
    DYNAMICS_TIER,
    LOOP_TIER,
    SETUP_TIER,
    SYMPTOM_TIER,
)

DOC = Path(__file__).parents[2] / "docs" / "rules.md"
HEADING = "### Each cause's conditions"
#: The tier column's words.
TIERS = {
    "loop fact": LOOP_TIER,
    "set-up": SETUP_TIER,
    "over time": DYNAMICS_TIER,
    "symptom": SYMPTOM_TIER,
}
#: The shorthands the explains column uses, as the vocabulary defines them.
SHORTHANDS = {"stall": set(_STALL), "divergence": set(_DIVERGENCE), "units": set(_UNITS)}
COLUMNS = 6
_ID = re.compile(r"`([a-z_]+)`")


def section(text: str) -> str:
    """The section under HEADING, up to the next heading."""
    assert HEADING in text, f"docs/rules.md has no {HEADING!r} section"
    start = text.index(HEADING) + len(HEADING)
    end = text.find("\n#", start)
    return text[start:] if end < 0 else text[start:end]


def rows(text: str) -> list[list[str]]:
    """The cells of each row of the section's table (its header and rule left out)."""
    found = []
    for line in section(text).splitlines():
        if line.startswith("| `"):
            found.append([cell.strip() for cell in line.strip().strip("|").split(" | ")])
    return found


def shorthands(text: str) -> dict[str, set[str]]:
    """The shorthands the section's words define: ``*stall* is `a`, `b`;``."""
    words = " ".join(section(text).split("\n|", 1)[0].split())
    return {
        m.group(1): set(_ID.findall(m.group(2)))
        for m in re.finditer(r"\*(\w+)\* is ((?:`[a-z_]+`(?:, )?)+)", words)
    }


def explained(cell: str) -> set[str]:
    """The cause ids an explains cell names, its shorthands expanded."""
    named = set(_ID.findall(cell))
    for word in re.findall(r"\*(\w+)\*", cell):
        named |= SHORTHANDS[word]
    return named


def problems(text: str) -> list[str]:
    """What the section's table says that the vocabulary does not (empty: it agrees)."""
    said = []
    table = rows(text)
    if shorthands(text) != SHORTHANDS:
        said.append(f"the shorthands defined {shorthands(text)} are not {SHORTHANDS}")
    bad = [r for r in table if len(r) != COLUMNS or not _ID.fullmatch(r[0])]
    said += [f"a row without {COLUMNS} cells and a cause first: {r[:1]}" for r in bad]
    table = [r for r in table if r not in bad]
    ids = [_ID.fullmatch(r[0]).group(1) for r in table]  # type: ignore[union-attr]
    counts = Counter(ids)
    said += [f"no row for {c}" for c in CAUSES if c not in counts]
    said += [f"{n} rows for {c}" for c, n in counts.items() if n > 1]
    said += [f"a row for {c}, which is no cause" for c in counts if c not in CAUSES]
    if not said and ids != list(CAUSES):
        said.append(f"rows in the order {ids}, not the vocabulary's")
    for cause, row in zip(ids, table, strict=True):
        if cause not in CAUSES:
            continue
        if TIERS.get(row[1]) != CAUSES[cause].tier:
            said.append(f"{cause}: tier {row[1]!r}, the code's is {CAUSES[cause].tier}")
        named = explained(row[4])
        if named != set(CAUSES[cause].explains):
            missing = sorted(CAUSES[cause].explains - named)
            extra = sorted(named - CAUSES[cause].explains)
            said.append(f"{cause} explains: the doc lacks {missing}, adds {extra}")
    return said


def test_the_table_has_one_row_per_cause_as_the_code_has_it() -> None:
    text = DOC.read_text(encoding="utf-8")
    assert problems(text) == []
    assert len(rows(text)) == len(CAUSES)


def test_a_deleted_row_is_caught() -> None:
    text = DOC.read_text(encoding="utf-8")
    row = next(line for line in text.splitlines() if line.startswith("| `lr_too_low` |"))
    assert problems(text.replace(row + "\n", "")) == ["no row for lr_too_low"]


def test_an_unknown_or_repeated_cause_is_caught() -> None:
    text = DOC.read_text(encoding="utf-8")
    row = next(line for line in text.splitlines() if line.startswith("| `poor_init` |"))
    unknown = row.replace("`poor_init`", "`bad_weights`", 1)
    assert problems(text.replace(row, unknown)) == [
        "no row for poor_init",
        "a row for bad_weights, which is no cause",
    ]
    assert problems(text.replace(row, row + "\n" + row)) == ["2 rows for poor_init"]


def test_a_wrong_tier_or_explains_is_caught() -> None:
    text = DOC.read_text(encoding="utf-8")
    row = next(line for line in text.splitlines() if line.startswith("| `lr_too_low` |"))
    cells = row.split(" | ")
    cells[1] = "symptom"
    cells[4] = "`no_progress`, *units*"
    found = problems(text.replace(row, " | ".join(cells)))
    assert found == [
        "lr_too_low: tier 'symptom', the code's is 1",
        "lr_too_low explains: the doc lacks ['no_learnable_signal', 'not_updating', "
        "'overtraining', 'underfitting'], adds ['all_zero', 'dead_relu', 'saturated_activation', "
        "'vanishing_gradient']",
    ]
