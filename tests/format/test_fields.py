"""The typed access to stored JSON fields: an index header's rows of integers."""

from __future__ import annotations

import numpy as np
import pytest

from tensortap.exceptions import FormatError
from tensortap.format._fields import int_columns, int_rows


@pytest.mark.parametrize(
    "bad",
    [
        [1, True, 3, 0.5],  # a bool is no integer here
        [1, 2.0, 3, 0.5],
        [1, "2", 3, 0.5],
        [1, 2**63, 3, 0.5],  # beyond int64
        [-(2**63) - 1, 2, 3],
        [1, 2],  # too short
        [1, [2], 3],
        "1,2,3",
        None,
    ],
)
def test_a_bad_row_among_many_good_ones_is_named(bad: object) -> None:
    """Rows of plain int64s are checked at once; one bad row among 10,000 good ones (of four
    entries or three) is still refused, naming it, as the row-by-row check did."""
    rows: list[object] = [[s, 1, s, 1.5] for s in range(5_000)]
    rows += [[s, 1, s] for s in range(5_000)]
    rows.insert(7_777, bad)
    with pytest.raises(FormatError, match="must start with 3 integers, got"):
        int_columns(rows, 3, "index x", "steps")
    with pytest.raises(FormatError, match="must start with 3 integers, got"):
        int_rows(rows, 3, "index x", "steps")


def test_good_rows_come_back_as_int64_columns() -> None:
    rows = [[2**63 - 1, 1, -(2**63), 0.25], [0, 2, 5], [7, 3, 9, "anything after"]]
    table = int_columns(rows, 3, "index x", "steps")
    assert table.dtype == np.int64 and table.shape == (3, 3)
    assert table.tolist() == [[2**63 - 1, 1, -(2**63)], [0, 2, 5], [7, 3, 9]]
    assert int_columns([], 3, "index x", "steps").shape == (0, 3)
    assert int_rows(rows, 3, "index x", "steps") is rows


@pytest.mark.parametrize(
    ("row", "said"),
    [
        ([5, 9, 5, 1.0], "step 5 has unknown mode 9"),
        ([-1, 1, 0, 1.0], "is negative"),
        ([5, 1, -3, 1.0], "is negative"),
        ([5, 1, 5, "noon"], "wall time that is not a number"),
        ([5, 1, 5, True], "wall time that is not a number"),
    ],
)
def test_an_index_header_with_one_bad_step_among_many_is_refused(row: list, said: str) -> None:
    """The steps of an index header (one row each, 10^5 for a long run) are checked at once;
    one bad step among 10,000 is refused with the row-by-row message, packed or plain."""
    from tensortap.format._index import decode_index, encode_index
    from tensortap.format._index_rows import RECORD_DTYPE

    steps: list[list] = [[s, 1, s, 1.5 + s] for s in range(10_000)]
    steps[4_321] = row
    header = {
        "worker": "w",
        "seq": 0,
        "session": "s",
        "data_key": "d",
        "data_size": 0,
        "names": [],
        "dtypes": [],
        "steps": steps,
    }
    for version in (1, 2):
        raw = encode_index(header, np.empty(0, RECORD_DTYPE), np.empty(0, "<i8"), version)
        with pytest.raises(FormatError, match=said):
            decode_index(raw, records=False)
    steps[4_321] = [4_321, 1, 4_321, 2.0]
    empty = encode_index(header, np.empty(0, RECORD_DTYPE), np.empty(0, "<i8"))
    assert len(decode_index(empty).steps) == 10_000
