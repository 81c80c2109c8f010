"""A run's configuration, as a hook gathers and records it (``trial.config()`` reads it back).

:class:`RunConfig` holds one session's configuration and writes all of it again (one small
document, replaced atomically: :mod:`tensortap.format._run_config`) whenever it grows. Two ways
in: :meth:`RunConfig.log`, what a script gives to ``hook.log_config`` (checked: JSON values
only, within the budget, a clear error otherwise), and :meth:`RunConfig.gather`, what the hooks
find without code (converted leniently, never raising: a hook never stops training for it).

The groups a trial's configuration holds (each optional; see docs/format.md):

``command``    the script's command line (``sys.argv``; the values of secret flags redacted)
``git``        ``{"commit", "dirty"}`` of the script's directory, when it is in a git repository
``packages``   versions of the framework packages the process imported, and ``python``
``optimizer``  ``{"class", "param_groups": [{"lr", "weight_decay", "betas", ...}]}``
               (a list of these when a run steps several)
``schedulers`` ``[{"class", ...their settings}]``
``batch_size`` the first training batch's size
``model``      ``{"class", "parameters"}`` (parameters: how many numbers the model trains)
``trainer``    the trainer's own arguments (HF ``TrainingArguments``, Lightning flags, Keras
               ``compile``/``fit``, XGBoost parameters)
``hparams``    a Lightning module's ``hparams``
``seeds``      the seeds seen (``{"torch": torch.initial_seed()}``, the Trainer's ``seed``)

What a script gives to ``hook.log_config`` is merged at the top level as given: its own keys
beside these groups, and values it gives for a group replace what a hook found there.
"""

from __future__ import annotations

import functools
import importlib.metadata
import logging
import os
import platform
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping
from typing import Any

from tensortap.exceptions import InvalidConfigError
from tensortap.format._run_config import (
    MAX_CONFIG_BYTES,
    REDACTED,
    as_json,
    check_config,
    encode_config,
    is_secret_key,
    merge,
    redact,
)

logger = logging.getLogger(__name__)

#: The packages whose versions a run's configuration holds (when the process imported them),
#: by module, with their distribution's name.
PACKAGES = {
    "numpy": "numpy",
    "torch": "torch",
    "transformers": "transformers",
    "accelerate": "accelerate",
    "lightning": "lightning",
    "pytorch_lightning": "pytorch-lightning",
    "keras": "keras",
    "tensorflow": "tensorflow",
    "jax": "jax",
    "jaxlib": "jaxlib",
    "flax": "flax",
    "optax": "optax",
    "haiku": "dm-haiku",
    "xgboost": "xgboost",
    "sklearn": "scikit-learn",
    "tensortap": "tensortap",
}
GIT_TIMEOUT_S = 3.0


class RunConfig:
    """One session's configuration; ``write`` records all of it (errors are its own)."""

    def __init__(self, write: Callable[[dict[str, Any]], object]) -> None:
        self._write = write
        self._config: dict[str, Any] = {}
        self._lock = threading.Lock()
        self._warned_budget = False

    def snapshot(self) -> dict[str, Any]:
        """A copy of what this session recorded."""
        with self._lock:
            return merge({}, self._config)

    def log(self, values: Mapping[str, Any], what: str = "log_config") -> None:
        """Merge what a script gives (JSON values only; raises InvalidConfigError)."""
        if not isinstance(values, Mapping):
            raise InvalidConfigError(
                f"{what} takes a mapping of names to values ({{'lr': 1e-3}}), got "
                f"{type(values).__name__}"
            )
        plain = dict(values)
        check_config(plain, what)
        self._merge(redact(plain), strict=True, what=what)

    def gather(self, values: Mapping[str, Any]) -> None:
        """Merge what a hook found (converted leniently; dropped, with a warning, when the
        whole would be over budget). Never raises."""
        try:
            found = redact(as_json(dict(values)))
            check_config(found, "the gathered configuration")
            self._merge(found, strict=False, what="the gathered configuration")
        except Exception as exc:  # a hook never stops training for its configuration
            logger.warning("tensortap: part of the run's configuration is not recorded: %s", exc)

    def _merge(self, values: dict[str, Any], strict: bool, what: str) -> None:
        with self._lock:
            merged = merge(merge({}, self._config), values)
            size = len(encode_config("w", "s", 0, merged))
            if size > MAX_CONFIG_BYTES:
                message = (
                    f"{what} would make the run's configuration {size} bytes as JSON; it holds "
                    f"at most {MAX_CONFIG_BYTES}: log the settings, not data"
                )
                if strict:
                    raise InvalidConfigError(message)
                if not self._warned_budget:
                    self._warned_budget = True
                    logger.warning("tensortap: %s (left out)", message)
                return
            self._config = merged
            self._write(merge({}, merged))


def run_facts() -> dict[str, Any]:
    """What every run's configuration holds: the command line, the git state of the script's
    directory, the versions of the packages the process imported."""
    facts: dict[str, Any] = {"command": command_line(), "packages": package_versions()}
    script = sys.argv[0] if sys.argv else ""
    if script and os.path.isfile(script):
        git = git_state(os.path.dirname(os.path.abspath(script)))
        if git is not None:
            facts["git"] = git
    return facts


def command_line(argv: list[str] | None = None) -> list[str]:
    """``argv`` (default ``sys.argv``) with the values of flags that name secrets redacted
    (``--hub_token X``, ``--api-key=X``)."""
    args = list(sys.argv if argv is None else argv)
    out: list[str] = []
    secret_next = False
    for arg in args:
        arg = str(arg)[:1024]
        if secret_next:
            out.append(REDACTED)
            secret_next = False
            continue
        if arg.startswith("-"):
            flag, eq, _ = arg.partition("=")
            if is_secret_key(flag.lstrip("-").replace("-", "_")):
                if eq:
                    out.append(f"{flag}={REDACTED}")
                    continue
                secret_next = True
        out.append(arg)
    return out[:256]


def package_versions() -> dict[str, str]:
    """The versions of the packages of :data:`PACKAGES` the process imported, and Python's."""
    found = {"python": platform.python_version()}
    for module, dist in PACKAGES.items():
        if module in sys.modules:
            version = _version(module, dist)
            if version is not None:
                found[dist] = version
    return found


@functools.lru_cache(maxsize=64)
def _version(module: str, dist: str) -> str | None:
    """A package's version (looked up once per process: every hook records it)."""
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        version = getattr(sys.modules.get(module), "__version__", None)
        return version if isinstance(version, str) else None


@functools.lru_cache(maxsize=8)
def git_state(directory: str) -> dict[str, Any] | None:
    """``{"commit", "dirty"}`` of the git repository holding ``directory``; None when it is in
    none, git is missing, or git did not answer within :data:`GIT_TIMEOUT_S` (never raises)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}

    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(
                ["git", "-C", directory, *args],
                capture_output=True,
                text=True,
                timeout=GIT_TIMEOUT_S,
                env=env,
                check=False,
            )
        except (OSError, subprocess.SubprocessError, ValueError):
            return None
        return done.stdout if done.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    if commit is None or not commit.strip():
        return None
    status = git("status", "--porcelain", "--untracked-files=no")
    return {"commit": commit.strip(), "dirty": None if status is None else bool(status.strip())}
