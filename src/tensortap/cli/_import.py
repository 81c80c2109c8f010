"""``tensortap import SOURCE -o OUT``: runs of another tracker (a TensorBoard logdir, MLflow's
mlruns/, W&B run directories or a history CSV, Neptune's exporter Parquet) as tensortap
trials, each judged; ``tensortap diagnose TARGET``: one verdict per run, of a trial, a job,
or such a source directly (imported into a temporary directory first)."""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from typing import Any

_ROLES_HELP = (
    "the tag of the training loss, where none of the usual names is (loss, train/loss, "
    "Loss/train, epoch_loss, ...; see docs/visualisation.md)"
)


def add_parsers(sub: Any) -> None:
    imp = sub.add_parser(
        "import",
        help="runs of TensorBoard, MLflow, W&B or Neptune's exporter as tensortap trials "
        "(judged; shown by serve beside tensortap's runs)",
    )
    imp.add_argument("source", help="a logdir, mlruns/, a W&B run or CSV, or Parquet files")
    imp.add_argument("-o", "--output", required=True, help="where the trials go (one per run)")
    role_arguments(imp)
    diag = sub.add_parser(
        "diagnose",
        help="one verdict per run: of a trial, a job, or another tracker's runs (imported "
        "into a temporary directory)",
    )
    diag.add_argument("target", help="a trial, a job directory, or a source tensortap imports")
    role_arguments(diag)


def role_arguments(parser: argparse.ArgumentParser) -> None:
    """``--format``, ``--loss`` and ``--val-loss``: how a source of another tracker is read."""
    from tensortap.trackers import READERS

    parser.add_argument("--format", choices=sorted(READERS), help="default: from what it holds")
    parser.add_argument("--loss", metavar="TAG", help=_ROLES_HELP)
    parser.add_argument(
        "--val-loss", metavar="TAG", help="the tag of the validation loss (val_loss, eval/loss...)"
    )


def import_command(ns: argparse.Namespace) -> int:
    from tensortap.trackers import import_runs

    result = import_runs(ns.source, ns.output, ns.format, ns.loss, ns.val_loss)
    print(f"imported {len(result.runs)} {result.format} runs of {ns.source} into {ns.output}")
    _print_runs(result)
    return 1 if result.failed else 0


def _print_runs(result: Any, shown: dict[str, str] | None = None) -> None:
    """Each run's line; ``shown`` names a trial imported into a temporary directory by its
    source (the directory is gone when the command ends)."""
    for run in result.runs:
        if run.error is not None:
            print(f"  {run.name}: not imported: {run.error}")
            continue
        lineage = run.lineage or {}
        loss = lineage.get("loss") or "none"
        validation = lineage.get("validation_loss")
        print(
            f"  {run.name} -> {(shown or {}).get(run.trial, run.trial)}: "
            f"{lineage.get('values', 0)} values of "
            f"{lineage.get('tags', 0)} tags; loss {loss}"
            + (f", validation loss {validation}" if validation else "")
        )
        print(f"    {(lineage.get('diagnosis') or {}).get('headline', 'not judged')}")
        left_out = lineage.get("histograms_not_imported")
        if isinstance(left_out, dict):
            print(f"    {left_out.get('said')}")
        for problem in lineage.get("problems", [])[:10]:
            print(f"    not imported: {problem}")


def diagnose_command(ns: argparse.Namespace) -> int:
    from tensortap.cli._sources import shown_locations, source_format
    from tensortap.diagnosis import diagnose
    from tensortap.trackers import import_runs

    target = Path(ns.target)
    if ns.format is None and _is_tensortap(target):
        print(diagnose(ns.target))
        return 0
    chosen = source_format(ns.target, ns.format)
    with tempfile.TemporaryDirectory(prefix="tensortap-diagnose-") as place:
        result = import_runs(target, place, chosen, ns.loss, ns.val_loss)
        print(f"{len(result.runs)} {result.format} runs of {ns.target}:")
        _print_runs(result, shown_locations(ns.target, Path(place), result))
    return 1 if result.failed else 0


def _is_tensortap(target: Path) -> bool:
    from tensortap.format._layout import TRIAL_MARKER
    from tensortap.trials._locate import JOB_FILE

    return (
        (target / JOB_FILE).is_file() or (target / TRIAL_MARKER).is_file() or not (target.exists())
    )
