"""Checks of a TrainingJob's arguments, made at construction (before anything runs)."""

from __future__ import annotations

import difflib
import logging
import os
from collections.abc import Mapping
from typing import Any

from tensortap.exceptions import InvalidConfigError
from tensortap.format._layout import is_plain_name

logger = logging.getLogger(__name__)

_CLOUD_ONLY = frozenset(
    {
        "role",
        "instance_count",
        "instance_type",
        "train_instance_count",
        "train_instance_type",
        "framework_version",
        "py_version",
        "sagemaker_session",
        "script_mode",
        "debug",
        "dependencies",
        "volume_size",
        "train_volume_size",
        "max_run",
        "train_max_run",
        "image_uri",
        "image_name",
        "distribution",
        "profiler_config",
        "disable_profiler",
        "metric_definitions",
        "input_mode",
        "subnets",
        "security_group_ids",
        "tags",
        "use_spot_instances",
        "max_wait",
        "checkpoint_s3_uri",
        "checkpoint_local_path",
        "output_kms_key",
        "volume_kms_key",
        "model_uri",
        "enable_network_isolation",
        "encrypt_inter_container_traffic",
        "code_location",
        "container_log_level",
        "enable_sagemaker_metrics",
        "debugger_rule_configs",
        "environment_variables",
        "keep_alive_period_in_seconds",
    }
)
_KEYWORDS = (
    "entry_point",
    "hyperparameters",
    "output_path",
    "debugger_hook_config",
    "rules",
    "tensorboard_output_config",
    "job_name",
    "command",
    "rules_specification",
    "environment",
    "stop_grace_secs",
    "rule_timeout_secs",
    "rule_processes",
    "python",
    "base_job_name",
    "source_dir",
)


def check_cloud_only(given: Mapping[str, Any]) -> None:
    """smdebug's estimator keywords that only mean something on the cloud are accepted and
    ignored (saying so, at INFO); any other unknown keyword is a mistake, refused naming the
    close match."""
    unknown = sorted(set(given) - _CLOUD_ONLY)
    if unknown:
        word = unknown[0]
        close = difflib.get_close_matches(word, [*_KEYWORDS, *_CLOUD_ONLY], n=1)
        hint = f"; did you mean {close[0]!r}?" if close else "."
        raise InvalidConfigError(
            f"TrainingJob got an unknown keyword {word!r}{hint} It takes "
            f"{', '.join(_KEYWORDS)} (and smdebug's cloud-only keywords, ignored locally)"
        )
    if given:
        logger.info(
            "TrainingJob ignores %s: SageMaker keywords that mean nothing for a local job",
            ", ".join(sorted(given)),
        )


def check_settings(
    environment: Mapping[str, Any] | None, rule_timeout_secs: Any, stop_grace_secs: Any
) -> None:
    if environment is not None:
        if not isinstance(environment, Mapping):
            raise InvalidConfigError(
                f"environment must be a mapping of names to strings, got {environment!r}"
            )
        for key, value in environment.items():
            if not isinstance(key, str) or not key or "=" in key or not isinstance(value, str):
                raise InvalidConfigError(
                    f"environment must map names to strings; {key!r} maps to a "
                    f"{type(value).__name__} (write it as a string, e.g. str(value))"
                )
    for name, value, optional in (
        ("rule_timeout_secs", rule_timeout_secs, False),
        ("stop_grace_secs", stop_grace_secs, True),
    ):
        if value is None and optional:
            continue
        if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
            raise InvalidConfigError(f"{name} must be a number of seconds > 0, got {value!r}")


def check_job_name(name: object) -> str:
    if not is_plain_name(name):
        raise InvalidConfigError(
            f"invalid job_name {name!r}: expected 1-128 letters, digits, '_', '.', '-' "
            "starting with a letter or digit (it names a folder inside output_path)"
        )
    return name


def check_command(command: object) -> None:
    """A list of strings; ``python script.py`` names a script that exists."""
    if (
        isinstance(command, str)
        or not isinstance(command, list | tuple)
        or not command
        or not all(isinstance(a, str) for a in command)
    ):
        raise InvalidConfigError(
            f"command must be a list of strings such as ['python', 'train.py'], got {command!r}"
        )
    if (
        len(command) >= 2
        and os.path.basename(command[0]).startswith("python")
        and command[1].endswith(".py")
        and not os.path.isfile(command[1])
    ):
        raise InvalidConfigError(
            f"the training script {command[1]} does not exist (looked in {os.getcwd()}); "
            "check the path"
        )
