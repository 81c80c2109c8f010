"""Runs of a TensorBoard logdir: every directory holding event files (``*tfevents*``) is a
run, named by its path under the logdir (the logdir's own name for itself), as TensorBoard's own
runs selector names them. Keras' TensorBoard callback writes one run as two directories,
``train/`` and ``validation/``: they are read as one run, named by their parent, the second
at EVAL steps.

Scalars: a value written by ``add_scalar`` (``simple_value``) or by the ``tensorboard``
package's summary writer (a 0-d tensor of the ``scalars`` plugin) is kept; images and text are
not (said once per file); histograms (``add_histogram``: a ``histo`` value, or a tensor of the
``histograms`` plugin) are not either, and are counted per tag for the import's summary
(:meth:`~tensortap.trackers._scalars.ScalarRun.histograms_left_out`).

Hyperparameters: the HParams plugin's summaries (``SummaryWriter.add_hparams``,
``tensorboard.plugins.hparams.api.hparams``) become the run's parameters (its
``session_start_info``: strings, numbers and booleans as written; a whole number written as a
double, as every number there is, is kept as an integer, as TensorBoard shows it), and the
metrics its ``experiment`` names become ``hparam_metrics`` (each one's last value).
``add_hparams`` writes them in a directory of their own below the run's (``<run>/<time>/``):
such a directory, holding an experiment and a session with at most one value per tag, is read
as a part of the run above it (its values as the run's ``hparam_metrics``, not as series), so
the run stays one run. A directory of a session alone (TensorFlow's ``hp.hparams`` in each
run of a tuning) stays a run of its own. Records are framed and checked with the project's
TFRecord reader (both CRCs; a file cut short or corrupt keeps what came before and says
where it stopped) and decoded with TensorBoard's own protocol buffers
(``tensorboard.compat.proto.event_pb2``, ``tensor_util.make_ndarray``). TensorBoard's
``EventFileLoader`` is not used for the framing: where TensorFlow is installed it imports it
(9 CPU seconds) to read the records.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tensortap.core._modes import ModeKeys
from tensortap.exceptions import FormatError, InvalidConfigError, StorageError
from tensortap.smdebug._wire import record_payload
from tensortap.storage._descriptors import read_regular
from tensortap.trackers._scalars import (
    MAX_FILE_BYTES,
    MAX_PARAMS,
    MAX_RUNS,
    Collector,
    ScalarRun,
    add_param,
)

#: A Keras run's two directories: the one of training, and the one of evaluation.
_KERAS_DIRS = {"train": None, "validation": ModeKeys.EVAL}
_SCALARS_PLUGIN = "scalars"
_HPARAMS_PLUGIN = "hparams"
_HISTOGRAMS_PLUGIN = "histograms"


@dataclass
class _HParams:
    """What a run directory's HParams summaries said."""

    experiment: bool = False  # an experiment summary (its metrics named in ``metrics``)
    session: bool = False  # a session's start: the hyperparameters (in the run's params)
    metrics: list[str] = field(default_factory=list)
    left_out: int = 0  # hyperparameters not kept (see tensortap.trackers._scalars.add_param)
    unreadable: str | None = None  # why the first damaged summary could not be read
    unreadable_count: int = 0


_DT_FLOAT, _DT_DOUBLE = 1, 2  # TensorFlow's DataType numbers (types.proto)


def is_event_file(name: str) -> bool:
    return "tfevents" in name and not name.startswith(".")


def is_logdir(path: Path) -> bool:
    """Whether ``path`` is a directory with an event file in it or below it."""
    if not path.is_dir():
        return False
    for count, (_, _, files) in enumerate(os.walk(path)):
        if any(is_event_file(f) for f in files):
            return True
        if count > MAX_RUNS:
            return False
    return False


def read_logdir(logdir: str | os.PathLike[str]) -> list[ScalarRun]:
    """The runs of a TensorBoard logdir, each with its scalars (see the module docstring)."""
    root = Path(logdir)
    if not root.is_dir():
        raise InvalidConfigError(f"{logdir} is not a directory; give a TensorBoard logdir")
    runs: dict[str, tuple[ScalarRun, Collector, _HParams]] = {}
    for count, (dirpath, dirnames, files) in enumerate(os.walk(root)):
        dirnames.sort()
        if count > MAX_RUNS:
            raise InvalidConfigError(
                f"{logdir} holds more than {MAX_RUNS} directories; give the logdir of fewer runs"
            )
        events = sorted(f for f in files if is_event_file(f))
        if not events:
            continue
        here = Path(dirpath)
        relative = here.relative_to(root).as_posix()
        mode: ModeKeys | None = None
        if here.name in _KERAS_DIRS and here != root:
            mode = _KERAS_DIRS[here.name]
            relative = here.parent.relative_to(root).as_posix()
        if relative not in runs:
            name = relative if relative != "." else (root.resolve().name or "run")
            run = ScalarRun(name, str(root / relative), "tensorboard")
            runs[relative] = (run, Collector(run), _HParams())
        run, collector, hparams = runs[relative]
        for name in events:
            _read_file(here / name, root, collector, mode, hparams)
    finished = {key: (collector.finish(), hp) for key, (_, collector, hp) in runs.items()}
    for key in list(finished):
        run, hp = finished[key]
        parent = Path(key).parent.as_posix()
        if key != "." and parent in finished and _is_add_hparams(run, hp):
            _merge(finished[parent][0], run, hp)
            del finished[key]
    for run, hp in finished.values():
        _hparam_metrics(run, hp)
    return [run for run, _ in finished.values()]


def _is_add_hparams(run: ScalarRun, hp: _HParams) -> bool:
    """Whether a run directory is what ``SummaryWriter.add_hparams`` wrote below a run: an
    experiment and a session, and one value (the metric) per tag at most."""
    return hp.experiment and hp.session and all(len(s.values) <= 1 for s in run.series)


def _merge(parent: ScalarRun, child: ScalarRun, hp: _HParams) -> None:
    """The hyperparameters and metrics ``add_hparams`` wrote below ``parent``, as its own."""
    for key, value in child.params.items():
        if not add_param(parent, key, value):
            hp.left_out += 1
    hp.metrics = [s.tag for s in child.series]
    _hparam_metrics(child, hp)
    parent.hparam_metrics.update(child.hparam_metrics)
    parent.problems += child.problems


def _hparam_metrics(run: ScalarRun, hp: _HParams) -> None:
    """The last value of each metric the experiment names, and what was left out, said."""
    named = set(hp.metrics)
    for series in run.series:
        if series.tag in named and len(series.values) and len(run.hparam_metrics) < MAX_PARAMS:
            run.hparam_metrics[series.tag] = float(series.values[-1])
    if hp.left_out:
        run.problems.append(
            f"{run.name}: {hp.left_out} hyperparameters left out (more than {MAX_PARAMS}, a "
            "name empty, unprintable or longer than 1000 characters, or a value that is no "
            "string, number or boolean)"
        )
        hp.left_out = 0
    if hp.unreadable_count:
        run.problems.append(
            f"{run.name}: {hp.unreadable_count} HParams summaries could not be read (the first: "
            f"{hp.unreadable})"
        )
        hp.unreadable, hp.unreadable_count = None, 0


def _read_file(
    path: Path, root: Path, collector: Collector, mode: ModeKeys | None, hparams: _HParams
) -> None:
    from tensorboard.compat.proto import event_pb2

    run = collector.run
    try:
        data = read_regular(path, path.parent, MAX_FILE_BYTES + 1)
    except (StorageError, OSError) as exc:
        run.problems.append(f"{path}: not read ({exc})")
        return
    if len(data) > MAX_FILE_BYTES:
        run.problems.append(
            f"{path}: larger than {MAX_FILE_BYTES} bytes; not read (an event file of scalars "
            "is smaller: write histograms and images elsewhere, or split the run)"
        )
        return
    plugins: dict[str, str] = {}  # a tag's plugin, written with its first value only
    skipped: set[str] = set()
    pos = 0
    while pos < len(data):
        if len(data) - pos < 16:
            run.problems.append(f"{path}: cut short after byte {pos} (kept what came before)")
            return
        (length,) = struct.unpack_from("<Q", data, pos)
        end = pos + 12 + length + 4
        try:
            if end > len(data):
                raise FormatError(f"a record of {length} bytes runs past the end of {path}")
            event = event_pb2.Event.FromString(record_payload(data[pos:end], str(path)))
        except Exception as exc:  # a damaged record: the rest of the file cannot be framed
            run.problems.append(
                f"{path}: unreadable from byte {pos} ({exc}); kept the values before it"
            )
            return
        pos = end
        if event.HasField("summary"):
            _values(event, plugins, collector, mode, skipped, hparams)
    if skipped:
        run.problems.append(
            f"{path}: {len(skipped)} tags are not scalars and were not imported "
            f"(images, text or another plugin's: {', '.join(sorted(skipped)[:5])})"
        )


def _values(
    event: Any,
    plugins: dict[str, str],
    collector: Collector,
    mode: ModeKeys | None,
    skipped: set[str],
    hparams: _HParams,
) -> None:
    from tensorboard.util import tensor_util

    for value in event.summary.value:
        tag = value.tag
        if value.HasField("metadata") and value.metadata.plugin_data.plugin_name:
            plugins.setdefault(tag, value.metadata.plugin_data.plugin_name)
            if value.metadata.plugin_data.plugin_name == _HPARAMS_PLUGIN:
                _hparams(value.metadata.plugin_data.content, collector.run, hparams)
                continue
        if plugins.get(tag) == _HPARAMS_PLUGIN:
            continue
        kind = value.WhichOneof("value")
        if kind == "simple_value":
            collector.add(tag, event.step, value.simple_value, event.wall_time, mode)
        elif kind == "tensor" and plugins.get(tag) == _SCALARS_PLUGIN:
            tensor = value.tensor
            # a 0-d float or double as the summary writer writes it: read without building an
            # array (make_ndarray took 40% of a read); anything else through TensorBoard's own
            if tensor.dtype == _DT_FLOAT and len(tensor.float_val) == 1:
                number: Any = tensor.float_val[0]
            elif tensor.dtype == _DT_DOUBLE and len(tensor.double_val) == 1:
                number = tensor.double_val[0]
            else:
                try:
                    array = tensor_util.make_ndarray(tensor)
                except Exception:  # a damaged tensor: said as a value that is not a number
                    array = None
                number = array.reshape(-1)[0] if array is not None and array.size == 1 else None
            collector.add(tag, event.step, number, event.wall_time, mode)
        elif kind == "histo" or plugins.get(tag) == _HISTOGRAMS_PLUGIN:
            counted = collector.run.histograms
            if tag in counted or len(counted) < 1000:
                counted[tag] = counted.get(tag, 0) + 1
        elif len(skipped) < 1000:
            skipped.add(tag)


def _hparams(content: bytes, run: ScalarRun, hparams: _HParams) -> None:
    """One HParams summary: an experiment (the metrics' names) or a session's start (the
    hyperparameters, kept as the run's parameters); anything else of the plugin is left."""
    from tensorboard.plugins.hparams import plugin_data_pb2

    try:
        data = plugin_data_pb2.HParamsPluginData.FromString(content)
    except Exception as exc:  # a damaged summary: said once a run, the rest of the file is read
        hparams.unreadable = hparams.unreadable or str(exc)[:300]
        hparams.unreadable_count += 1
        return
    kind = data.WhichOneof("data")
    if kind == "experiment":
        hparams.experiment = True
        room = MAX_PARAMS - len(hparams.metrics)  # over every experiment summary of the run
        hparams.metrics += [info.name.tag for info in data.experiment.metric_infos[:room]]
    elif kind == "session_start_info":
        hparams.session = True
        # in name order: which are kept past the bound does not hang on the map's order
        for key, given in sorted(data.session_start_info.hparams.items()):
            if not add_param(run, key, _hparam_value(given)):
                hparams.left_out += 1


def _hparam_value(given: Any) -> Any:
    """A ``google.protobuf.Value`` as a string, number or boolean (None: another kind)."""
    kind = given.WhichOneof("kind")
    if kind == "number_value":
        number = given.number_value
        whole = number == number and abs(number) < 2**53 and number == int(number)
        return int(number) if whole else number
    if kind == "string_value":
        return given.string_value
    if kind == "bool_value":
        return given.bool_value
    return None
