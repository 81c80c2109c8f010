"""Run a training script with tensortap attached, without changing the script.

::

    python -m tensortap.attach --config hook.json train.py --epochs 3

The configuration (see :mod:`tensortap.hook._config`) is validated before the script starts and
its path is exported as ``$TENSORTAP_CONFIG``, so ``get_hook()`` inside the script returns the
same hook. Without ``--config``, ``$TENSORTAP_CONFIG`` is used. The script runs as ``__main__``
with ``sys.argv`` set as if it had been started directly; its exit status is this command's.

Each framework's attachment is one module of this package (``tensortap.attach._pytorch``,
``.keras``, ``.xgboost``, ``.jax``, ``.huggingface``, ``.lightning``), with an
``enable(config)``, registered once in :data:`FRAMEWORKS`: what enables them and what explains
an unwatched run are derived from that list.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import runpy
import sys
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from tensortap.exceptions import InvalidConfigError
from tensortap.hook._config import CONFIG_ENV, JOB_ENV, HookConfig, read_config


@dataclass(frozen=True)
class Framework:
    """A framework tensortap attaches to without a code change.

    ``needs``: the packages that must be installed (a tuple inside: any one of them);
    ``watches``: the package (or packages) a script that uses the framework imports, and
    ``unwatched``: why nothing was saved when such a script made no hook (None: another
    framework's reason covers it; ``{seen}`` in it: the watched packages the script used)."""

    name: str
    needs: tuple[str | tuple[str, ...], ...]
    watches: str | tuple[str, ...] | None = None
    unwatched: str | None = None

    def seen(self, used: set[str]) -> list[str]:
        """The packages this framework watches that are in ``used``, in its order."""
        watched = (self.watches,) if isinstance(self.watches, str) else self.watches or ()
        return [name for name in watched if name in used]

    @property
    def module(self) -> str:
        """The module of this package whose ``enable(config)`` attaches to the framework."""
        return f"{__name__}._{self.name}"

    def installed(self) -> bool:
        return all(
            any(importlib.util.find_spec(p) is not None for p in alternatives)
            for alternatives in ((n,) if isinstance(n, str) else n for n in self.needs)
        )


#: Every framework zero code change attaches to, in the order they are enabled and named.
FRAMEWORKS = (
    Framework(
        "jax",
        ("jax", "optax"),
        "jax",
        "the script uses JAX, and no Optax optimizer's update ran where tensortap watches it: "
        "tensortap watches JAX training through an Optax optimizer (its update and "
        "optax.apply_updates, not under vmap or pmap), and hand-written updates (p - lr * g) "
        "show it no training step. Make a hook in the script: hook = "
        "tensortap.jax.Hook.create_from_json_file(); hook.save_scalar('loss', loss, 'losses'); "
        "hook.save_pytree(params, 'params'); hook.next_step() at each step (docs/jax.md)",
    ),
    Framework(
        "xgboost",
        ("xgboost",),
        "xgboost",
        "xgboost.train (or an XGBoost estimator's fit) never ran",
    ),
    Framework(
        "keras",
        ("keras",),
        # tf.keras is Keras 3 (keras._tf_keras) since TensorFlow 2.16: a script may name only
        # tensorflow
        ("tensorflow", "keras"),
        "the script imported {seen}, and no Keras Model.fit, evaluate or predict ran: "
        "tensortap watches Keras through them. A custom tf.GradientTape loop needs a hook in "
        "the script: hook = tensortap.keras.KerasHook.create_from_json_file(), then "
        "hook.wrap_tape(tape) (docs/keras.md)",
    ),
    Framework("pytorch", ("torch",), "torch", "no torch.nn.Module with parameters was called"),
    # a Trainer gets the callback: steps, metrics, evaluations
    Framework("huggingface", ("torch", "transformers")),
    Framework("lightning", ("torch", ("lightning", "pytorch_lightning"))),
)
#: How :func:`enable_frameworks` names the frameworks it enabled (Hugging Face: its package).
_REPORTED = {"huggingface": "transformers"}


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
    """Attach to every installed framework tensortap supports; returns their names. A
    framework's modules are imported only when it is installed; most wait for the script to
    import the framework before they patch it."""
    enabled = []
    for framework in FRAMEWORKS:
        if framework.installed():
            importlib.import_module(framework.module).enable(config)
            enabled.append(_REPORTED.get(framework.name, framework.name))
    return enabled


def main(argv: list[str] | None = None) -> None:
    parser = _parser()
    ns = parser.parse_args(argv)
    if not ns.config:
        parser.error(f"no configuration: pass --config hook.json or set {CONFIG_ENV}")
    try:
        config = read_config(ns.config)  # once: hooks made later in this process share it
    except InvalidConfigError as exc:
        parser.error(str(exc))
    if not os.path.isfile(ns.script):
        parser.error(f"no such script: {ns.script}")
    os.environ[CONFIG_ENV] = os.path.abspath(ns.config)
    if not enable_frameworks(config):
        print("tensortap: no supported framework is installed; running unhooked", file=sys.stderr)
    sys.argv = [ns.script, *ns.args]
    sys.path.insert(0, os.path.dirname(os.path.abspath(ns.script)))
    before = set(sys.modules)
    names: dict[str, Any] = {}
    try:
        names = runpy.run_path(ns.script, run_name="__main__")
    except SystemExit as exc:
        if exc is _stop_in_callback():  # met where JAX hands the host a step's state
            print(f"tensortap: {exc}", file=sys.stderr)
        raise
    except Exception as exc:
        stop = _stop_in_callback()
        if stop is None:
            _tell_job_failed(exc)
            raise
        # the stop was met inside a compiled step: JAX hands it on as its own runtime error
        print(f"tensortap: {stop} ({type(exc).__name__} from the compiled step)", file=sys.stderr)
        raise SystemExit(0) from None
    finally:
        named = _named(names)
        _say_if_unwatched(
            {name.partition(".")[0] for name in set(sys.modules) - before} | named, named
        )


def _tell_job_failed(exc: BaseException) -> None:
    """Tell the job (if any) the script raised: the exception and the step its hooks were at,
    so the job's verdict says "training failed at step 12: ..." (its supervisor sees only an
    exit code and a log)."""
    job = os.environ.get(JOB_ENV)
    if not job:
        return
    from tensortap.hook._open import open_hooks
    from tensortap.jobs._record import JobRecord

    steps = [s for s in (getattr(h, "step", None) for h in open_hooks()) if isinstance(s, int)]
    error = f"{type(exc).__name__}: {exc}".strip().splitlines()
    try:
        JobRecord(job).append_event(
            "training_raised",
            error=(error[0] if error else type(exc).__name__)[:500],
            step=max(steps) if steps else None,
        )
    except OSError as failed:
        print(f"tensortap: could not tell the job {job}: {failed}", file=sys.stderr)


def _named(names: dict[str, Any]) -> set[str]:
    """The top-level packages of the modules, classes and objects in the script's globals:
    what the script itself used (attaching imports PyTorch before the script runs, and the
    packages it imported import others: TensorFlow imports JAX)."""
    found = set()
    for value in names.values():
        module = getattr(value, "__name__" if isinstance(value, ModuleType) else "__module__", 0)
        if isinstance(module, str) and module:
            found.add(module.partition(".")[0])
    return found


def _stop_in_callback() -> BaseException | None:
    jax = sys.modules.get(f"{__name__}._jax")
    return None if jax is None else jax.stop_in_callback()


def unwatched_reason(imported: set[str], named: set[str] | None = None) -> tuple[str, str | None]:
    """Why no hook was made in this process, from the packages the script ``imported`` (what
    tensortap would have watched), and the framework that seems to be in use (None if none).
    ``named``: the packages the script's own globals name; when they name a framework, only
    those frameworks are said (not the ones their packages imported)."""
    if named and any(known.seen(named) for known in FRAMEWORKS if known.unwatched):
        imported = named
    reasons, framework = [], None
    for known in FRAMEWORKS:
        seen = known.seen(imported)
        if seen and known.unwatched:
            reasons.append(known.unwatched.replace("{seen}", " and ".join(seen)))
            framework = framework or known.name
    if not reasons:
        reasons.append(
            "the script imported no framework tensortap attaches to (PyTorch, Keras, XGBoost, "
            "JAX with Optax)"
        )
    return "tensortap saved nothing: " + "; ".join(reasons), framework


def _say_if_unwatched(imported: set[str], named: set[str]) -> None:
    """Say so when the script ran and no hook was made: nothing could be judged."""
    from tensortap.hook._hook import any_hook_made

    if any_hook_made():
        return
    message, framework = unwatched_reason(imported, named)
    print(message, file=sys.stderr)
    job = os.environ.get(JOB_ENV)
    if job:
        from tensortap.jobs._record import JobRecord

        try:  # the job says it too: in its live view, and in the rules' NoData
            JobRecord(job).append_event("training_unwatched", message=message, framework=framework)
        except OSError as exc:
            print(f"tensortap: could not tell the job {job}: {exc}", file=sys.stderr)
