"""Two traces of a Keras ``train_function``: one that captures, one lean.

The taps (activations, layer outputs, the model's input and output, the outcome) and the
gradient copies live inside the compiled step, each behind a ``tf.cond`` on a flag the hook sets
before a due batch. A skipped branch still costs every batch: its condition runs and the
function takes its variables in (a job's default on a ~1 ms MLP batch: about 0.6 ms of CPU a
batch, 25-30%, on the batches that saved nothing). So the hook keeps two traces of the train
function: the one Keras made, with the captures, for the batches due to capture, and one made
again and traced while :func:`tracing_lean` holds, where the captures add nothing to the graph,
for every other batch (:func:`two_traces`). Both train the same variables, and both write the
vital signs' ring.

The switch is per thread: under ``tf.distribute`` the replicas trace their step in threads of
their own, so their lean trace keeps the captures (behind their flags, as before); the run is
the same, only slower.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

_local = threading.local()


@contextmanager
def tracing_lean() -> Iterator[None]:
    """While inside, a step traced in this thread captures nothing (see the module)."""
    before = getattr(_local, "lean", False)
    _local.lean = True
    try:
        yield
    finally:
        _local.lean = before


def is_tracing_lean() -> bool:
    """Whether a step traced now should leave the captures out (the taps ask at trace time)."""
    return bool(getattr(_local, "lean", False))


def two_traces(full: Any, lean: Any, capturing: Callable[[], bool]) -> Any:
    """A train function that runs ``full`` for a batch when ``capturing()`` says it captures,
    and ``lean`` (traced lean, see :func:`tracing_lean`) for every other batch."""

    def train_function(*args: Any, **kwargs: Any) -> Any:
        if capturing():
            return full(*args, **kwargs)
        with tracing_lean():
            return lean(*args, **kwargs)

    train_function._tensortap_vitals = True  # type: ignore[attr-defined]  # wrapped already
    train_function._tensortap_lean = True  # type: ignore[attr-defined]
    return train_function
