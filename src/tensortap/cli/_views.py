"""The commands that look at what jobs saved: ``jobs``, ``summary``, ``stop``, ``names``,
``report``, ``tensorboard``, ``tensorplot``."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from tensortap.cli import _import as trackers
from tensortap.cli import _jobs as jobs_table
from tensortap.cli import _sources as sources
from tensortap.exceptions import InvalidConfigError, TensortapError
from tensortap.jobs import TrainingJob
from tensortap.jobs._job import job_summary
from tensortap.jobs._live import render_summary
from tensortap.jobs._record import JobRecord

RUNS_HELP = "where job directories are looked up by name (default runs)"


def add_parsers(sub: Any) -> None:
    jobs = sub.add_parser(
        "jobs",
        help="the runs table: one row per job (verdict, status, steps, time, loss, best "
        "validation metric, hyperparameters, command); --sort, --filter, --where, --group-by, "
        "--json",
    )
    jobs.add_argument("--runs", "--output", dest="runs", default="runs", help=RUNS_HELP)
    jobs_table.add_arguments(jobs)
    for name, text in (
        ("summary", "a job's rule summary and where to look next"),
        ("stop", "stop a job's training at its next step"),
    ):
        one = sub.add_parser(name, help=text)
        one.add_argument("job", help="a job directory (or a job name under --runs)")
        one.add_argument("--runs", "--output", dest="runs", default="runs", help=RUNS_HELP)
    names = sub.add_parser(
        "names", help="the tensors a trial holds: collections, steps, shapes (--regex to filter)"
    )
    names.add_argument("trial", help="a trial (directory or URL), or a job directory")
    names.add_argument("--regex", help="only names this regular expression finds")
    names.add_argument("--collection", help="only the tensors of this collection")
    report = sub.add_parser(
        "report",
        help="an HTML report of a trial: rules, curves, layer health, TensorPlot (opens offline)",
    )
    report.add_argument(
        "trial",
        help="a trial (directory or URL), a job directory, or one run of another tracker "
        "(a TensorBoard logdir, mlruns/, a W&B run or CSV, Neptune's Parquet: imported into a "
        "temporary directory first)",
    )
    report.add_argument("--job", help="the job that wrote the trial (a directory or a name)")
    report.add_argument("--runs", default="runs", help=RUNS_HELP)
    report.add_argument("-o", "--output", default="report.html", help="the HTML file to write")
    trackers.role_arguments(report)
    board = sub.add_parser(
        "tensorboard", help="write a trial's scalars and histograms as TensorBoard event files"
    )
    board.add_argument("trial", help="a trial (directory or URL), or a job directory")
    board.add_argument("output", help="where the event files go (one run per mode)")
    board.add_argument("--no-histograms", action="store_true", help="scalars only")
    board.add_argument("--bins", type=int, default=30, help="histogram bins (default 30)")
    plot = sub.add_parser(
        "tensorplot", help="an interactive 3-D page of saved activations (TensorPlot, seed 002)"
    )
    plot.add_argument("trial", help="a trial (directory or URL), or a job directory")
    plot.add_argument("--regex", default=r".*relu_output", help="the layers to draw")
    plot.add_argument(
        "--steps",
        default="10",
        help="a count of steps that hold the layers (default 10) or steps: 1,2,3",
    )
    plot.add_argument(
        "--batch-sample-id",
        default="0",
        help="the sample to draw (default 0), -1 to sum over the batch, or all",
    )
    plot.add_argument("--label", help="regex of the network's input, drawn as an image")
    plot.add_argument("--prediction", help="regex of the network's output (its arg-max shows)")
    plot.add_argument("--color-channel", type=int, default=1, choices=(1, 3))
    plot.add_argument("--mode", choices=("TRAIN", "EVAL", "PREDICT"), help="steps of one mode")
    plot.add_argument("--title", default="")
    plot.add_argument("-o", "--output", default="tensorplot.html", help="the HTML file to write")


def job_record(job: str, runs: str) -> JobRecord:
    """A job directory, or the job of that name under ``runs``."""
    path = Path(job)
    if not path.is_dir() and (Path(runs) / job).is_dir():
        path = Path(runs) / job
    record = JobRecord(path)
    record.job()  # a clear error if it is not a job
    return record


def open_trial(given: str, records: bool = True) -> Any:
    """The trial at ``given``: a trial location, or a job directory (its trial); see
    :class:`~tensortap.trials._trial.Trial` for ``records``."""
    from tensortap.trials._trial import create_trial

    trial = create_trial(given, must_exist=True, records=records)
    if not trial.workers():
        raise InvalidConfigError(f"{given} is neither a trial nor a job directory")
    return trial


def summary(ns: argparse.Namespace) -> int:
    record = job_record(ns.job, ns.runs)
    print(render_summary(record, job_summary(record)))
    found = record.read_summary()
    for problem in found.problems if found is not None else ():
        print(f"  not shown: {problem}")
    line = _config_line(record)
    if line:
        print(line)
    return 0


def _config_line(record: JobRecord) -> str | None:
    """The run's configuration in one line (``trial.config()``: the learning rate, batch
    size, optimizer, model, git commit); None when the trial recorded none or cannot be read."""
    from tensortap.trials._trial import create_trial

    try:
        with create_trial(record.trial_location, must_exist=True, waiting=True) as trial:
            config = trial.config()
    except (TensortapError, OSError):
        return None
    parts = [
        f"{key} {config[key]:g}"
        for key in ("learning_rate", "batch_size")
        if _real(config.get(key))
    ]
    optimizer, model, git = config.get("optimizer"), config.get("model"), config.get("git")
    if isinstance(optimizer, dict) and isinstance(optimizer.get("class"), str):
        parts.append(f"optimizer {optimizer['class'].rsplit('.', 1)[-1]}")
    if isinstance(model, dict) and isinstance(model.get("class"), str):
        size = model.get("parameters")
        counted = f" ({size:,} parameters)" if _real(size) else ""
        parts.append(f"model {model['class'].rsplit('.', 1)[-1]}{counted}")
    if isinstance(git, dict) and isinstance(git.get("commit"), str):
        parts.append(f"git {git['commit'][:10]}{' (dirty)' if git.get('dirty') else ''}")
    return "config: " + " · ".join(parts) if parts else None


def _real(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def stop(ns: argparse.Namespace) -> int:
    record = job_record(ns.job, ns.runs)
    TrainingJob.attach(record.dir).stop()
    print(f"asked {record.name} to stop")
    return 0


def names(ns: argparse.Namespace) -> int:
    """One line per tensor: name, collections, modes, how many steps and which, last shape."""
    trial = open_trial(ns.trial)
    chosen = trial.tensor_names(regex=ns.regex, collection=ns.collection)
    member: dict[str, list[str]] = {}
    for collection in sorted(trial.collections()):
        for name in trial.tensor_names(collection=collection):
            member.setdefault(name, []).append(collection)
    rows = []
    for name in sorted(chosen):
        tensor = trial.tensor(name)
        steps = tensor.steps()
        shape = "-"
        if steps:
            try:
                shape = "x".join(map(str, tensor.shape(steps[-1]))) or "scalar"
            except TensortapError:
                pass
        span = f"{len(steps)} ({steps[0]}..{steps[-1]})" if steps else "0"
        rows.append((name, ",".join(member.get(name, [])) or "-", span, shape))
    if not rows:
        print(f"no tensor in {trial.path}" + (f" matches {ns.regex!r}" if ns.regex else ""))
        return 0
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(_NAMES_HEADER)]
    for row in (_NAMES_HEADER, *rows):
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
    return 0


_NAMES_HEADER = ("TENSOR", "COLLECTIONS", "STEPS", "SHAPE")


def report(ns: argparse.Namespace) -> int:
    from tensortap.report import write_report

    if ns.job is None and (ns.format is not None or not sources.is_tensortap(ns.trial)):
        return _report_imported(ns)
    job = None
    if ns.job:
        job = job_record(ns.job, ns.runs)
    elif (Path(ns.trial) / "job.json").is_file():
        job = JobRecord(ns.trial)
    # an outline: the page reads the index's rows only where it shows saved values
    out = write_report(open_trial(ns.trial, records=False), ns.output, job)
    print(f"wrote {out}")
    return 0


def _report_imported(ns: argparse.Namespace) -> int:
    """The report of the one run of another tracker's source, imported first."""
    from tensortap.report import write_report

    with sources.import_directory("tensortap-report-") as place:
        result = sources.import_source(ns.trial, place, ns.format, ns.loss, ns.val_loss)
        runs = [run for run in result.runs if run.error is None]
        if len(runs) != 1:
            names = ", ".join(run.name for run in result.runs) or "none"
            raise InvalidConfigError(
                f"a report shows one run; {ns.trial} holds {len(runs)} that import "
                f"({names}); point at one run's directory, or `tensortap import "
                f"{ns.trial} -o DIR` and report a trial under DIR"
            )
        shown = sources.shown_locations(ns.trial, place, result)
        trial = open_trial(runs[0].trial, records=False)
        out = write_report(trial, ns.output, None, location=shown[runs[0].trial])
    print(f"wrote {out}")
    return 0


def tensorboard(ns: argparse.Namespace) -> int:
    from tensortap.tensorboard import export_trial

    done = export_trial(open_trial(ns.trial), ns.output, not ns.no_histograms, ns.bins)
    print(
        f"wrote {done['steps']} steps ({done['scalars']} scalars, {done['histograms']} "
        f"histograms) to {done['out_dir']}: tensorboard --logdir {done['out_dir']}"
    )
    return 0


def tensorplot(ns: argparse.Namespace) -> int:
    from tensortap.core._modes import ModeKeys
    from tensortap.viz._tensor_plot import TensorPlot

    try:
        steps: int | list[int] = (
            [int(s) for s in ns.steps.split(",")] if "," in ns.steps else int(ns.steps)
        )
        sample = None if ns.batch_sample_id == "all" else int(ns.batch_sample_id)
    except ValueError:
        raise InvalidConfigError(
            f"--steps takes a count or a list like 1,2,3 (got {ns.steps!r}) and "
            f"--batch-sample-id a number, -1 or all (got {ns.batch_sample_id!r})"
        ) from None
    plot = TensorPlot(
        ns.regex,
        open_trial(ns.trial),
        steps=steps,
        batch_sample_id=sample,
        color_channel=ns.color_channel,
        title=ns.title,
        label=ns.label,
        prediction=ns.prediction,
        mode=ModeKeys[ns.mode] if ns.mode else None,
    )
    out = plot.write_html(ns.output)
    print(f"wrote {out}: {len(plot.layers)} layers at steps {plot.steps}")
    return 0


__all__ = ["add_parsers", "job_record", "open_trial"]
