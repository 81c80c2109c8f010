"""Run a training script with tensortap attached, without changing the script.

::

    python -m tensortap.attach --config hook.json train.py --epochs 3

The configuration (see :mod:`tensortap.hook_config`) is validated before the script starts and
its path is exported as ``$TENSORTAP_CONFIG``, so ``get_hook()`` inside the script returns the
same hook. Without ``--config``, ``$TENSORTAP_CONFIG`` is used. The script runs as ``__main__``
with ``sys.argv`` set as if it had been started directly; its exit status is this command's.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import runpy
import sys

from tensortap.exceptions import InvalidConfigError
from tensortap.hook_config import CONFIG_ENV, HookConfig


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m tensortap.attach",
        description="Run a training script with the tensortap hook attached (no code change).",
    )
    parser.add_argument(
        "--config",
        default=os.environ.get(CONFIG_ENV),
        help=f"hook configuration JSON (default: ${CONFIG_ENV})",
    )
    parser.add_argument("script", help="the training script")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="arguments of the script")
    return parser


def enable_frameworks(config: HookConfig) -> list[str]:
    """Attach to every installed framework tensortap supports; returns their names."""
    enabled = []
    if importlib.util.find_spec("keras") is not None:
        from tensortap.keras.zcc import enable as enable_keras  # imports Keras only when used

        enable_keras(config)
        enabled.append("keras")
    if importlib.util.find_spec("xgboost") is not None:
        from tensortap.xgboost.zcc import enable as enable_xgboost  # imports XGBoost only when used

        enable_xgboost(config)
        enabled.append("xgboost")
    if importlib.util.find_spec("torch") is not None:
        from tensortap.pytorch.zcc import enable

        enable(config)
        enabled.append("pytorch")
        if importlib.util.find_spec("transformers") is not None:
            from tensortap.huggingface.zcc import enable as enable_transformers

            enable_transformers()  # a Trainer gets the callback: steps, metrics, evaluations
            enabled.append("transformers")
        if importlib.util.find_spec("lightning") or importlib.util.find_spec("pytorch_lightning"):
            from tensortap.lightning.zcc import enable as enable_lightning

            enable_lightning()
            enabled.append("lightning")
    return enabled


def main(argv: list[str] | None = None) -> None:
    parser = _parser()
    ns = parser.parse_args(argv)
    if not ns.config:
        parser.error(f"no configuration: pass --config hook.json or set {CONFIG_ENV}")
    try:
        config = HookConfig.from_json_file(ns.config)
    except InvalidConfigError as exc:
        parser.error(str(exc))
    if not os.path.isfile(ns.script):
        parser.error(f"no such script: {ns.script}")
    os.environ[CONFIG_ENV] = os.path.abspath(ns.config)
    if not enable_frameworks(config):
        print("tensortap: no supported framework is installed; running unhooked", file=sys.stderr)
    sys.argv = [ns.script, *ns.args]
    sys.path.insert(0, os.path.dirname(os.path.abspath(ns.script)))
    runpy.run_path(ns.script, run_name="__main__")


if __name__ == "__main__":
    main()
