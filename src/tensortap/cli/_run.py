"""``tensortap run [options] -- python train.py ...``: a training job with rules beside it."""

from __future__ import annotations

import argparse
from typing import Any

from tensortap.cli._specs import builtin_rule, collection, custom_rule, parse_params
from tensortap.exceptions import InvalidConfigError
from tensortap.hook._config import CHECKPOINT_GUARD_ENV
from tensortap.jobs import (
    DebuggerHookConfig,
    Email,
    RollbackTraining,
    Rule,
    StopTraining,
    TensorBoardOutputConfig,
    TrainingJob,
    Webhook,
)
from tensortap.jobs._hints import shell_command as tensortap_command
from tensortap.jobs._specs import recommended_rules


def add_parser(sub: Any) -> None:
    run = sub.add_parser(
        "run",
        help="run a training command with the debugger attached and rules beside it",
        description="Everything after -- is the training command (python train.py ...). Its "
        "output is shown as it comes, between the rules' events (--quiet: events only).",
    )
    run.add_argument("--rule", action="append", default=[], metavar="NAME[:k=v,...]")
    run.add_argument(
        "--custom-rule", action="append", default=[], metavar="FILE.py:CLASS[:k=v,...]"
    )
    run.add_argument("--collection", action="append", default=[], metavar="NAME[:k=v,...]")
    run.add_argument(
        "--hook-param", action="append", default=[], metavar="k=v", help="e.g. save_interval=5"
    )
    run.add_argument(
        "--writer-option",
        action="append",
        default=[],
        metavar="k=v",
        help="the training's writer (WriterOptions), e.g. flush_secs=5 or when_full=drop",
    )
    run.add_argument(
        "-o", "--output", default="runs", help="where job directories go (default runs)"
    )
    run.add_argument("--name", help="the job's name (default: script-date-time-random)")
    run.add_argument("--tensorboard", action="store_true", help="also write TensorBoard files")
    run.add_argument(
        "--stop-on", action="append", default=[], metavar="RULE", help="stop when RULE fires"
    )
    run.add_argument(
        "--rollback-on",
        action="append",
        default=[],
        metavar="RULE",
        help="roll training back to its last good checkpoint when RULE fires (the script "
        "makes a tensortap.pytorch.Rollback)",
    )
    run.add_argument("--webhook", help="POST each rule's first finding to this URL")
    run.add_argument("--email", help="email each rule's first finding to this address")
    run.add_argument("--smtp", default="localhost:25", help="SMTP server for --email (host:port)")
    run.add_argument("--no-wait", action="store_true", help="start the job and return")
    run.add_argument(
        "-q", "--quiet", action="store_true", help="do not show the training script's output"
    )
    run.add_argument(
        "--no-rules",
        action="store_true",
        help="run no rule (without --rule or --custom-rule the recommended set runs)",
    )
    run.add_argument(
        "--fail-on-issues", action="store_true", help="exit with status 3 if any rule fired"
    )
    run.add_argument(
        "--no-checkpoint-guard",
        action="store_true",
        help="let Hugging Face and Lightning Trainers save and resume from checkpoints of "
        "non-finite weights (by default the job refuses such a save and resumes from the "
        "newest good checkpoint)",
    )
    run.add_argument(
        "--save-budget",
        metavar="SHARE|off",
        help="the share of training time the job's default tensor saves may take before their "
        "interval widens (default 0.05, or $TENSORTAP_SAVE_BUDGET; off: every 10th step "
        "whatever it costs); a save_interval of yours is never widened",
    )
    run.add_argument("training", nargs=argparse.REMAINDER, help="-- python train.py ...")


def _actions(ns: argparse.Namespace) -> list[Any]:
    actions: list[Any] = []
    if ns.webhook:
        actions.append(Webhook(url=ns.webhook))
    if ns.email:
        host, _, port = ns.smtp.partition(":")
        actions.append(Email(to=ns.email, smtp_host=host, smtp_port=int(port or 25)))
    return actions


def run(ns: argparse.Namespace) -> int:
    command = ns.training[1:] if ns.training[:1] == ["--"] else ns.training
    if not command:
        raise InvalidConfigError("no training command: add -- python train.py ... at the end")
    rules = [builtin_rule(r) for r in ns.rule] + [custom_rule(r) for r in ns.custom_rule]
    extra = _actions(ns)
    by_framework = None
    if not rules and not ns.no_rules:
        # the recommended set of the framework the script turns out to use, so the job saves
        # and judges (XGBoost's rules for boosted trees, JAX's for JAX, else deep learning's)
        by_framework = recommended_rules(extra, ns.stop_on, ns.rollback_on)
    known = {r.name for r in rules}
    for flag, names in (("--stop-on", ns.stop_on), ("--rollback-on", ns.rollback_on)):
        for name in names if by_framework is None else ():
            if name not in known:
                raise InvalidConfigError(f"{flag} {name}: no such rule in this job; rules: {known}")
    rules = [
        Rule(
            r.name,
            r.class_name,
            r.parameters,
            r.source,
            r.collections,
            (
                *r.actions,
                *extra,
                *([StopTraining()] if r.name in ns.stop_on else []),
                *([RollbackTraining()] if r.name in ns.rollback_on else []),
            ),
            r.other_trials,
        )
        for r in rules
    ]
    hook = DebuggerHookConfig(
        hook_parameters={
            **parse_params(",".join(ns.hook_param), "--hook-param"),
            **({} if ns.save_budget is None else {"save_budget": ns.save_budget}),
        },
        collection_configs=[collection(c) for c in ns.collection],
        writer_options=parse_params(",".join(ns.writer_option), "--writer-option") or None,
    )
    job = TrainingJob(
        command=command,
        output_path=ns.output,
        job_name=ns.name,
        debugger_hook_config=hook,
        rules=rules,
        rules_by_framework=by_framework,
        tensorboard_output_config=TensorBoardOutputConfig() if ns.tensorboard else None,
        environment={CHECKPOINT_GUARD_ENV: "0"} if ns.no_checkpoint_guard else None,
    )
    tt = tensortap_command()
    print(f"tensortap: job {job.job_name} in {job.job_dir}", flush=True)
    job.fit(wait=False)
    if ns.no_wait:
        print(f"follow it with: {tt} serve {job.job_dir}  (or: {tt} summary {job.job_dir})")
        return 0
    try:
        summary = job.wait(training_output=not ns.quiet)
    except KeyboardInterrupt:
        print(f"\nthe job goes on in the background; stop it with: {tt} stop {job.job_dir}")
        return 130
    if summary.get("status") == "Failed":
        return 1
    fired = any(r.get("RuleEvaluationStatus") == "IssuesFound" for r in summary.get("rules", []))
    return 3 if ns.fail_on_issues and fired else 0


__all__ = ["add_parser", "run"]
