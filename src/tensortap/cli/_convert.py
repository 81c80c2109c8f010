"""``tensortap convert SMDEBUG_TRIAL OUT``: a trial written by SageMaker Debugger, rewritten in
tensortap's format."""

from __future__ import annotations

import argparse
from typing import Any


def add_parser(sub: Any) -> None:
    convert = sub.add_parser(
        "convert",
        help="rewrite a trial written by smdebug (SageMaker Debugger) in tensortap's format",
    )
    convert.add_argument("trial", help="the smdebug trial (a directory or an s3:// URL)")
    convert.add_argument("output", help="where the tensortap trial goes (must not hold one)")


def convert(ns: argparse.Namespace) -> int:
    from tensortap.exceptions import InvalidConfigError
    from tensortap.smdebug import convert as convert_trial
    from tensortap.smdebug import is_smdebug_trial
    from tensortap.storage import open_store

    source, target = open_store(ns.trial), open_store(ns.output)
    if not is_smdebug_trial(source):
        raise InvalidConfigError(
            f"{ns.trial} holds no smdebug trial (expected index/ and events/ folders there)"
        )
    if target.list(""):
        raise InvalidConfigError(f"{ns.output} is not empty: give a new directory for the copy")
    count = convert_trial(source, target)
    print(f"converted {count} worker-steps of {ns.trial} into {ns.output}")
    return 0
