"""Leave listed batches out of a stream of batches, and resume the stream where a checkpoint
took it: the data side of a rollback (:mod:`tensortap.healing._rollback`)."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Hashable, Iterable, Iterator
from typing import Any, Generic, TypeVar

from tensortap.exceptions import InvalidConfigError

T = TypeVar("T")
#: Batches a consumer may read ahead of the one it trains (older ones are forgotten).
_MAX_IN_FLIGHT = 64


class SkipBatches(Generic[T]):
    """An iterable over ``batches`` (a ``DataLoader``, a batch sampler, any re-iterable) that
    leaves out the batches whose id is in :attr:`skip`.

    A batch's id is its position in the stream, counted from 0 over every pass (epoch), skipped
    batches included, unless ``batch_id(position, batch)`` says otherwise (the ids of the
    samples it holds, say). :attr:`last_id` is the id of the batch yielded last. Iterating again
    starts the next pass. :meth:`state_dict` and :meth:`load_state_dict` save and restore where
    the stream is (a restored stream passes over the batches it had consumed in its pass, so the
    order of a pass must be the same each time it is read: a seeded sampler, ``set_epoch``);
    the skip list is not restored with it, so batches found bad later stay skipped. Wrap the
    ``DataLoader`` itself (not its batch sampler) for :attr:`last_id` to name the batch the
    loop has, as a loader with workers reads its sampler ahead.

    A consumer that reads ahead (Lightning's and Hugging Face's loops fetch the next batch
    before training this one) calls :meth:`take` when a batch is trained: from then on
    :meth:`state_dict` is where the *trained* batches end, not the batches read.
    """

    def __init__(
        self,
        batches: Iterable[T],
        skip: Iterable[Hashable] = (),
        *,
        batch_id: Callable[[int, T], Hashable] | None = None,
    ) -> None:
        if not isinstance(batches, Iterable) or isinstance(batches, Iterator):
            raise InvalidConfigError(
                "SkipBatches needs batches that can be read again each pass (a DataLoader, a "
                f"batch sampler, a list), got {type(batches).__name__}: wrap what makes the "
                "iterator, not the iterator"
            )
        self.batches = batches
        self.skip: set[Hashable] = set(skip)
        self._batch_id = batch_id
        self.position = 0  # batches of the stream consumed, over all passes
        self._pass_start = 0  # the position where the current pass began
        self._resume_offset = 0  # batches the next pass passes over (restored mid-pass)
        #: The id of the batch yielded last (None before the first).
        self.last_id: Hashable | None = None
        #: How many batches were left out.
        self.skipped = 0
        # yielded and not yet taken: (id, position after it, its pass's start)
        self._in_flight: deque[tuple[Hashable, int, int]] = deque(maxlen=_MAX_IN_FLIGHT)
        self._taken: tuple[int, int] | None = None  # (position after, pass start) of the last

    def take(self) -> Hashable:
        """The id of the batch being trained now: the oldest yielded and not yet taken (the
        last yielded when none is left)."""
        if not self._in_flight:
            return self.last_id
        batch_id, after, start = self._in_flight.popleft()
        self._taken = (after, start)
        return batch_id

    def id_of(self, position: int, batch: T) -> Hashable:
        """The id of the batch at ``position`` of the stream."""
        return position if self._batch_id is None else self._batch_id(position, batch)

    def __iter__(self) -> Iterator[T]:
        offset, self._resume_offset = self._resume_offset, 0
        start = self._pass_start = self.position - offset
        for k, batch in enumerate(self.batches):
            if k < offset:  # consumed before the checkpoint this stream was restored to
                continue
            self.position = start + k + 1
            batch_id = self.id_of(start + k, batch)
            if batch_id in self.skip:
                self.skipped += 1
                continue
            self.last_id = batch_id
            self._in_flight.append((batch_id, self.position, start))
            yield batch
        self._pass_start = self.position

    def state_dict(self) -> dict[str, Any]:
        """Where the stream is (after the last batch taken, once :meth:`take` is used): its
        position and the position within its pass."""
        position, start = self._taken or (self.position, self._pass_start)
        return {"position": position, "offset": position - start}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Go back (or forward) to where :meth:`state_dict` was taken; the next iteration
        starts there."""
        try:
            position, offset = int(state["position"]), int(state["offset"])
        except (KeyError, TypeError, ValueError) as exc:
            raise InvalidConfigError(
                "SkipBatches.load_state_dict needs what state_dict returned "
                f"({{'position': int, 'offset': int}}), got {state!r}"
            ) from exc
        if position < 0 or not 0 <= offset <= position:
            raise InvalidConfigError(
                f"SkipBatches.load_state_dict: position {position} and offset {offset} must "
                "satisfy 0 <= offset <= position"
            )
        self.position, self._resume_offset = position, offset
        self._pass_start = position - offset
        self._in_flight.clear()
        self._taken = None
