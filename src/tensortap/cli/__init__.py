"""The ``tensortap`` command: run a training job with rules, follow it in the browser, look at
what it saved.

::

    tensortap run --rule vanishing_gradient --rule loss_not_decreasing:num_steps=20 \\
        --custom-rule my_rule.py:CustomGradientRule:threshold=0.5 \\
        --collection all:include_regex=.*,save_steps=1,2,3 --output runs/ \\
        -- python train.py --num_epochs 3
    tensortap serve runs/                      # the live dashboard
    tensortap jobs [--runs runs/] [--sort COLUMN] [--where lr=0.01] [--group-by lr] [--json]
    tensortap summary JOB
    tensortap stop JOB
    tensortap names TRIAL_OR_JOB [--regex R]
    tensortap report TRIAL_OR_JOB [--job JOB] -o report.html
    tensortap tensorboard TRIAL_OR_JOB OUT_DIR
    tensortap import LOGDIR_OR_EXPORT -o runs/  # TensorBoard, MLflow, W&B, Neptune runs as trials
    tensortap diagnose TRIAL_JOB_OR_LOGDIR [--loss TAG]
    tensortap diff RUN_A RUN_B [--json]       # which layer changed between two runs
    tensortap tensorplot TRIAL_OR_JOB --regex '.*relu_output' -o tensorplot.html
    tensortap export TRIAL... --parquet stats/  # saved statistics as Parquet, appended to
    tensortap query "SELECT ... FROM stats" --data stats/
    tensortap --version

Every command spells where it writes ``-o/--output``.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable

from tensortap import __version__
from tensortap.cli import _convert as convert
from tensortap.cli import _diff as layers
from tensortap.cli import _import as trackers
from tensortap.cli import _jobs as jobs_table
from tensortap.cli import _run as run
from tensortap.cli import _serve as serve
from tensortap.cli import _table as table
from tensortap.cli import _views as views
from tensortap.cli._specs import builtin_rule, collection, custom_rule, parse_params
from tensortap.exceptions import TensortapError

_COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "run": run.run,
    "serve": serve.serve,
    "jobs": jobs_table.jobs,
    "summary": views.summary,
    "stop": views.stop,
    "names": views.names,
    "report": views.report,
    "tensorboard": views.tensorboard,
    "tensorplot": views.tensorplot,
    "convert": convert.convert,
    "import": trackers.import_command,
    "diagnose": trackers.diagnose_command,
    "diff": layers.diff,
    "export": table.export,
    "query": table.query,
}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tensortap", description="Debug machine-learning training while it runs."
    )
    parser.add_argument("--version", action="version", version=f"tensortap {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    run.add_parser(sub)
    serve.add_parser(sub)
    views.add_parsers(sub)
    convert.add_parser(sub)
    trackers.add_parsers(sub)
    layers.add_parser(sub)
    table.add_parsers(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    ns = _parser().parse_args(argv)
    try:
        return _COMMANDS[ns.command](ns)
    except TensortapError as exc:  # a mistake or a damaged trial: one line, not a traceback
        print(f"tensortap: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # `tensortap names RUN | head`: the reader left, as with any filter
        # Python flushes stdout again at exit; point it at devnull so that flush cannot fail
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141  # as a shell reports a command that SIGPIPE stopped (128 + 13)
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
    "starlette": "serve",
    "uvicorn": "serve",
    "pyarrow": "table",
    "yaml": "import",
    "duckdb": "table",
    "ray": "ray",
}

__all__ = ["builtin_rule", "collection", "custom_rule", "main", "parse_params"]
