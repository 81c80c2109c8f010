"""The ``tensortap`` command: run a training job with rules, list jobs, show a job's summary.

::

    tensortap run --rule vanishing_gradient --rule loss_not_decreasing:num_steps=20 \\
        --custom-rule my_rule.py:CustomGradientRule:threshold=0.5 \\
        --collection all:include_regex=.*,save_steps=1,2,3 --output runs/ \\
        -- python train.py --num_epochs 3
    tensortap jobs [--output runs/]
    tensortap summary JOB
    tensortap stop JOB
    tensortap report TRIAL_OR_JOB [--job JOB] -o report.html
    tensortap tensorboard TRIAL_OR_JOB OUT_DIR
    tensortap tensorplot TRIAL_OR_JOB --regex '.*relu_output' -o tensorplot.html
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from tensortap.exceptions import InvalidConfigError, TensortapError
from tensortap.jobs import (
    CollectionConfig,
    DebuggerHookConfig,
    Email,
    Rule,
    StopTraining,
    TensorBoardOutputConfig,
    TrainingJob,
    Webhook,
)
from tensortap.jobs.job import job_summary
from tensortap.jobs.live import render_summary, status_text
from tensortap.jobs.record import JobRecord
from tensortap.rules import rule_configs
from tensortap.rules.builtin import BUILTIN_RULES


def parse_params(text: str, what: str) -> dict[str, str]:
    """``k=v,k2=v2``; a piece without ``=`` continues the previous value (``save_steps=1,2,3``)."""
    params: dict[str, str] = {}
    last: str | None = None
    for piece in text.split(","):
        if "=" in piece:
            key, _, value = piece.partition("=")
            key = key.strip()
            if not key:
                raise InvalidConfigError(f"{what}: empty parameter name in {text!r}")
            params[key] = value
            last = key
        elif last is not None:
            params[last] += "," + piece
        elif piece.strip():
            raise InvalidConfigError(f"{what}: expected name=value pairs, got {text!r}")
    return params


_NOT_RULES = ("config_for", "recommended")


def builtin_rule(text: str) -> Rule:
    """``vanishing_gradient`` or ``VanishingGradient``, optionally ``:k=v,...``."""
    name, _, params = text.partition(":")
    function = getattr(rule_configs, name, None)
    if function is not None and name in rule_configs.__all__ and name not in _NOT_RULES:
        config = function()
    elif name in BUILTIN_RULES:
        config = rule_configs.config_for(name)
    else:
        names = ", ".join(n for n in rule_configs.__all__ if n[0].islower() and n not in _NOT_RULES)
        raise InvalidConfigError(f"--rule: no built-in rule {name!r}; built-in rules: {names}")
    return Rule.builtin(config, rule_parameters=parse_params(params, f"--rule {name}"))


def custom_rule(text: str) -> Rule:
    """``path.py:ClassName[:k=v,...]``."""
    parts = text.split(":", 2)
    if len(parts) < 2 or not parts[0].endswith(".py"):
        raise InvalidConfigError(
            f"--custom-rule takes path.py:ClassName[:name=value,...], got {text!r}"
        )
    params = parse_params(parts[2], f"--custom-rule {parts[1]}") if len(parts) == 3 else {}
    return Rule.custom(parts[1], parts[0], rule_parameters=params)


def collection(text: str) -> CollectionConfig:
    name, _, params = text.partition(":")
    return CollectionConfig(name, parse_params(params, f"--collection {name}"))


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tensortap", description="Debug machine-learning training while it runs."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser(
        "run",
        help="run a training command with the debugger attached and rules beside it",
        description="Everything after -- is the training command (python train.py ...).",
    )
    run.add_argument("--rule", action="append", default=[], metavar="NAME[:k=v,...]")
    run.add_argument(
        "--custom-rule", action="append", default=[], metavar="FILE.py:CLASS[:k=v,...]"
    )
    run.add_argument("--collection", action="append", default=[], metavar="NAME[:k=v,...]")
    run.add_argument(
        "--hook-param", action="append", default=[], metavar="k=v", help="e.g. save_interval=5"
    )
    run.add_argument("--output", default="runs", help="where job directories go (default runs)")
    run.add_argument("--name", help="the job's name (default: script-date-time-random)")
    run.add_argument("--tensorboard", action="store_true", help="also write TensorBoard files")
    run.add_argument(
        "--stop-on",
        action="append",
        default=[],
        metavar="RULE",
        help="stop training when RULE fires",
    )
    run.add_argument("--webhook", help="POST each rule's first finding to this URL")
    run.add_argument("--email", help="email each rule's first finding to this address")
    run.add_argument("--smtp", default="localhost:25", help="SMTP server for --email (host:port)")
    run.add_argument("--no-wait", action="store_true", help="start the job and return")
    run.add_argument(
        "--no-rules",
        action="store_true",
        help="run no rule (without --rule or --custom-rule the recommended set runs)",
    )
    run.add_argument(
        "--fail-on-issues", action="store_true", help="exit with status 3 if any rule fired"
    )
    run.add_argument("training", nargs=argparse.REMAINDER, help="-- python train.py ...")
    jobs = sub.add_parser("jobs", help="list jobs and their rule outcomes")
    jobs.add_argument("--output", default="runs")
    summary = sub.add_parser("summary", help="a job's rule summary and where to look next")
    summary.add_argument("job", help="a job directory (or a job name under --output)")
    summary.add_argument("--output", default="runs")
    report = sub.add_parser(
        "report",
        help="an HTML report of a trial: rules, curves, layer health, TensorPlot (opens offline)",
    )
    report.add_argument("trial", help="a trial (directory or URL), or a job directory")
    report.add_argument("--job", help="the job that wrote the trial (a directory or a name)")
    report.add_argument("--output", default="runs", help="where --job names are looked up")
    report.add_argument("-o", "--out", default="report.html", help="the HTML file to write")
    board = sub.add_parser(
        "tensorboard", help="write a trial's scalars and histograms as TensorBoard event files"
    )
    board.add_argument("trial", help="a trial (directory or URL), or a job directory")
    board.add_argument("out_dir", help="where the event files go (one run per mode)")
    board.add_argument("--no-histograms", action="store_true", help="scalars only")
    board.add_argument("--bins", type=int, default=30, help="histogram bins (default 30)")
    plot = sub.add_parser(
        "tensorplot", help="an interactive 3-D page of saved activations (TensorPlot, seed 002)"
    )
    plot.add_argument("trial", help="a trial (directory or URL), or a job directory")
    plot.add_argument("--regex", default=r".*relu_output", help="the layers to draw")
    plot.add_argument(
        "--steps", default="10", help="a count of saved steps (default 10) or steps: 1,2,3"
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
    plot.add_argument("-o", "--out", default="tensorplot.html", help="the HTML file to write")
    stop = sub.add_parser("stop", help="stop a job's training at its next step")
    stop.add_argument("job")
    stop.add_argument("--output", default="runs")
    return parser


def _actions(ns: argparse.Namespace) -> list[Any]:
    actions: list[Any] = []
    if ns.webhook:
        actions.append(Webhook(url=ns.webhook))
    if ns.email:
        host, _, port = ns.smtp.partition(":")
        actions.append(Email(to=ns.email, smtp_host=host, smtp_port=int(port or 25)))
    return actions


def _run(ns: argparse.Namespace) -> int:
    command = ns.training[1:] if ns.training[:1] == ["--"] else ns.training
    if not command:
        raise InvalidConfigError("no training command: add -- python train.py ... at the end")
    rules = [builtin_rule(r) for r in ns.rule] + [custom_rule(r) for r in ns.custom_rule]
    if not rules and not ns.no_rules:  # the recommended set, so the job saves and judges
        rules = [Rule.builtin(config) for config in rule_configs.recommended()]
    extra = _actions(ns)
    known = {r.name for r in rules}
    for name in ns.stop_on:
        if name not in known:
            raise InvalidConfigError(f"--stop-on {name}: no such rule in this job; rules: {known}")
    rules = [
        Rule(
            r.name,
            r.class_name,
            r.parameters,
            r.source,
            r.collections,
            (*r.actions, *extra, *([StopTraining()] if r.name in ns.stop_on else [])),
            r.other_trials,
        )
        for r in rules
    ]
    hook = DebuggerHookConfig(
        hook_parameters=parse_params(",".join(ns.hook_param), "--hook-param"),
        collection_configs=[collection(c) for c in ns.collection],
    )
    job = TrainingJob(
        command=command,
        output_path=ns.output,
        job_name=ns.name,
        debugger_hook_config=hook,
        rules=rules,
        tensorboard_output_config=TensorBoardOutputConfig() if ns.tensorboard else None,
    )
    print(f"tensortap: job {job.job_name} in {job.job_dir}", flush=True)
    job.fit(wait=False)
    if ns.no_wait:
        print(f"follow it with: tensortap summary {job.job_dir}")
        return 0
    try:
        summary = job.wait()
    except KeyboardInterrupt:
        print(f"\nthe job goes on in the background; stop it with: tensortap stop {job.job_dir}")
        return 130
    if summary.get("status") == "Failed":
        return 1
    fired = any(r.get("RuleEvaluationStatus") == "IssuesFound" for r in summary.get("rules", []))
    return 3 if ns.fail_on_issues and fired else 0


def _job_dir(job: str, output: str) -> JobRecord:
    """A job directory, or the job of that name under ``output``."""
    path = Path(job)
    if not path.is_dir() and (Path(output) / job).is_dir():
        path = Path(output) / job
    record = JobRecord(path)
    record.job()  # a clear error if it is not a job
    return record


def _jobs(ns: argparse.Namespace) -> int:
    root = Path(ns.output)
    records = (
        sorted(
            (JobRecord(p) for p in root.iterdir() if (p / "job.json").is_file()),
            key=lambda r: r.job_file.stat().st_mtime,
        )
        if root.is_dir()
        else []
    )
    if not records:
        print(f"no jobs in {root}")
        return 0
    for record in records:
        summary = record.summary() or {"status": "Starting", "rules": []}
        outcomes = []
        for rule in summary.get("rules", []):
            text = f"{rule.get('RuleConfigurationName')}: {status_text(rule)}"
            if rule.get("first_fired_step") is not None:
                text += f" at step {rule['first_fired_step']}"
            outcomes.append(text)
        print(f"{record.name}  {summary.get('status')}  " + "; ".join(outcomes))
    return 0


def _trial(given: str) -> Any:
    """The trial at ``given``: a trial location, or a job directory (its trial)."""
    from tensortap.trials.trial import create_trial

    location = given
    if (Path(location) / "job.json").is_file():
        location = JobRecord(location).trial_location
    trial = create_trial(location)
    if not trial.workers():
        raise InvalidConfigError(f"{given} is neither a trial nor a job directory")
    return trial


def _report(ns: argparse.Namespace) -> int:
    from tensortap.report import write_report

    job = None
    if ns.job:
        job = _job_dir(ns.job, ns.output)
    elif (Path(ns.trial) / "job.json").is_file():
        job = JobRecord(ns.trial)
    out = write_report(_trial(ns.trial), ns.out, job)
    print(f"wrote {out}")
    return 0


def _tensorboard(ns: argparse.Namespace) -> int:
    from tensortap.tensorboard import export_trial

    done = export_trial(_trial(ns.trial), ns.out_dir, not ns.no_histograms, ns.bins)
    print(
        f"wrote {done['steps']} steps ({done['scalars']} scalars, {done['histograms']} "
        f"histograms) to {done['out_dir']}: tensorboard --logdir {done['out_dir']}"
    )
    return 0


def _tensorplot(ns: argparse.Namespace) -> int:
    from tensortap.core.modes import ModeKeys
    from tensortap.viz.tensor_plot import TensorPlot

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
        _trial(ns.trial),
        steps=steps,
        batch_sample_id=sample,
        color_channel=ns.color_channel,
        title=ns.title,
        label=ns.label,
        prediction=ns.prediction,
        mode=ModeKeys[ns.mode] if ns.mode else None,
    )
    out = plot.write_html(ns.out)
    print(f"wrote {out}: {len(plot.layers)} layers at steps {plot.steps}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    ns = parser.parse_args(argv)
    try:
        if ns.command == "run":
            return _run(ns)
        if ns.command == "jobs":
            return _jobs(ns)
        if ns.command == "report":
            return _report(ns)
        if ns.command == "tensorboard":
            return _tensorboard(ns)
        if ns.command == "tensorplot":
            return _tensorplot(ns)
        record = _job_dir(ns.job, ns.output)
        if ns.command == "stop":
            TrainingJob.attach(record.dir).stop()
            print(f"asked {record.name} to stop")
            return 0
        print(render_summary(record, job_summary(record)))
        return 0
    except TensortapError as exc:  # a mistake or a damaged trial: one line, not a traceback
        print(f"tensortap: {exc}", file=sys.stderr)
        return 2
    except ImportError as exc:
        extra = _EXTRA_OF.get((exc.name or "").split(".")[0])
        if extra is None:
            raise
        print(
            f"tensortap: {ns.command} needs {exc.name}, which is not installed: "
            f"pip install 'tensortap[{extra}]'",
            file=sys.stderr,
        )
        return 2


# Packages that an optional feature needs, and the extra that brings them.
_EXTRA_OF = {
    "matplotlib": "viz",
    "plotly": "viz",
    "tensorboard": "viz",
    "sklearn": "viz",
    "boto3": "s3",
    "botocore": "s3",
}


if __name__ == "__main__":
    sys.exit(main())
