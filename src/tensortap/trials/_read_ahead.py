"""Reading many consecutive steps: batches of StepBlocks whose bytes are fetched together, the
next batch while the caller works on the current one (``TrialParts.iter_step_blocks``)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np

from tensortap.trials._parts import TrialParts
from tensortap.trials._reader import plan_runs
from tensortap.trials._step_block import StepBlock


def _batches(
    trial: TrialParts, steps: Sequence[int], batch_bytes: int
) -> Iterator[list[StepBlock]]:
    """StepBlocks of ``steps``, grouped until their raw bytes reach ``batch_bytes``."""
    batch: list[StepBlock] = []
    size = 0
    for step in steps:
        block = StepBlock(trial, step)
        batch.append(block)
        _, offs, ends = block.raw_ranges()
        size += int((ends - offs).sum())
        if size >= batch_bytes:
            yield batch
            batch, size = [], 0
    if batch:
        yield batch


def _fetch(trial: TrialParts, batch: list[StepBlock]) -> list[StepBlock]:
    """Read every raw value of ``batch`` (one request per run of adjacent bytes, all at once)
    and hand each block its values."""
    ranges = [b.raw_ranges() for b in batch]
    segs, offs, ends = (np.concatenate([r[i] for r in ranges]) for i in range(3))
    plan = plan_runs(segs.tolist(), offs.tolist(), ends.tolist())
    bufs = trial.value_reader.read_runs([(seg, start, end) for seg, start, end, _ in plan])
    windows = [(seg, start, buf) for (seg, start, _, _), buf in zip(plan, bufs, strict=True)]
    for block in batch:
        block.load(windows)
    return batch


def read_ahead(trial: TrialParts, steps: Sequence[int], batch_bytes: int) -> Iterator[StepBlock]:
    """The blocks of ``steps`` in order, each batch fetched on a helper thread while the
    previous one is being used."""
    with ThreadPoolExecutor(1, "tensortap-read-ahead") as ahead:
        pending: Future[list[StepBlock]] | None = None
        for batch in _batches(trial, steps, batch_bytes):
            submitted = ahead.submit(_fetch, trial, batch)
            if pending is not None:
                yield from pending.result()
            pending = submitted
        if pending is not None:
            yield from pending.result()
