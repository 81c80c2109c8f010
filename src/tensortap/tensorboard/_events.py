"""One TensorBoard event file, written with TensorBoard's own record writer and protos.

TensorBoard's ``EventFileWriter`` goes through ``tf.io.gfile``, which imports TensorFlow when it
is installed; a training process must not pay that, so the records go to a plain file here.
"""

from __future__ import annotations

import os
import socket
import time
import uuid
from pathlib import Path

import numpy as np

from tensortap.exceptions import InvalidConfigError

try:
    from tensorboard.compat.proto import event_pb2, summary_pb2
    from tensorboard.summary.writer.record_writer import RecordWriter
except ImportError as exc:  # pragma: no cover - tensorboard comes with tensortap[viz]
    raise InvalidConfigError(
        "TensorBoard output needs the tensorboard package: pip install 'tensortap[viz]'"
    ) from exc


def safe_tag(tag: str) -> str:
    """A tag TensorBoard can store (valid UTF-8): a tensor name is data and may hold a lone
    surrogate, which is written as its escape (``\\udcff``) instead."""
    try:
        tag.encode("utf-8")
    except UnicodeEncodeError:
        return tag.encode("utf-8", "backslashreplace").decode("utf-8")
    return tag


class EventFile:
    """The event file of one TensorBoard run (a directory)."""

    def __init__(self, run_dir: str | os.PathLike[str]) -> None:
        self.dir = Path(run_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        name = (
            f"events.out.tfevents.{int(time.time())}.{socket.gethostname()}"
            f".{os.getpid()}.{uuid.uuid4().hex[:8]}"
        )
        self.path = self.dir / name
        self._records = RecordWriter(open(self.path, "wb"))  # noqa: SIM115 - closed by close()
        self._write(event_pb2.Event(wall_time=time.time(), file_version="brain.Event:2"))

    def _write(self, event: event_pb2.Event) -> None:
        self._records.write(event.SerializeToString())

    def scalar(self, tag: str, value: float, step: int, wall_time: float) -> None:
        summary = summary_pb2.Summary(
            value=[summary_pb2.Summary.Value(tag=safe_tag(tag), simple_value=value)]
        )
        self._write(event_pb2.Event(wall_time=wall_time, step=step, summary=summary))

    def histogram(
        self, tag: str, values: np.ndarray, step: int, wall_time: float, bins: int
    ) -> bool:
        """Write the histogram of the finite ``values``; False (nothing written) if none is."""
        flat = np.asarray(values, dtype=np.float64).reshape(-1)
        flat = flat[np.isfinite(flat)]
        if not flat.size:
            return False
        counts, edges = np.histogram(flat, bins=bins)
        histo = summary_pb2.HistogramProto(
            min=float(flat.min()),
            max=float(flat.max()),
            num=float(flat.size),
            sum=float(flat.sum()),
            sum_squares=float(np.dot(flat, flat)),
            bucket_limit=edges[1:].tolist(),
            bucket=counts.astype(np.float64).tolist(),
        )
        summary = summary_pb2.Summary(
            value=[summary_pb2.Summary.Value(tag=safe_tag(tag), histo=histo)]
        )
        self._write(event_pb2.Event(wall_time=wall_time, step=step, summary=summary))
        return True

    def flush(self) -> None:
        self._records.flush()

    def close(self) -> None:
        if not self._records.closed:
            self._records.flush()
            self._records.close()
