"""The step a Lightning checkpoint's file name says (``epoch=1-step=40.ckpt``, the
``ModelCheckpoint`` default ``epoch={epoch}-step={step}``): what the rollback's catalogue and
the checkpoint guard both read."""

from __future__ import annotations

import re

#: ``step=<n>`` at the start of a name or after ``-`` or ``_``.
STEP_IN_NAME = re.compile(r"(?:^|[-_])step=(\d+)")


def step_of(name: str) -> int | None:
    """The ``step=<n>`` in a checkpoint's file name, or None."""
    match = STEP_IN_NAME.search(name)
    return None if match is None else int(match.group(1))
