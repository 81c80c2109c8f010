"""Regenerate the golden files (only when the format version changes on purpose: the
files of an older version stay as they are, so that what was written then still reads).

.venv/bin/python tests/golden/make_golden.py
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE.parents[1]))  # the repository root: tests.helpers

from tests.helpers.golden_inputs import build_index, write_trial  # noqa: E402


def main() -> None:
    (HERE / "index_v1.ttidx").write_bytes(build_index(1))
    (HERE / "index_v2.ttidx").write_bytes(build_index(2))
    (HERE / "index_v3.ttidx").write_bytes(build_index(3))
    target = HERE / "trial_v1"
    shutil.rmtree(target, ignore_errors=True)
    write_trial(target)


if __name__ == "__main__":
    main()
