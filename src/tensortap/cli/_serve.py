"""``tensortap serve [DIR_OR_URL ...]``: the live dashboard in the browser."""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path
from typing import Any

from tensortap.cli import _sources as sources
from tensortap.cli._import import role_arguments
from tensortap.exceptions import InvalidConfigError
from tensortap.serve._series import CACHE_MB
from tensortap.trackers._follow import FOLLOW_SECS


def add_parser(sub: Any) -> None:
    serve = sub.add_parser(
        "serve",
        help="a live dashboard in the browser over jobs and trials (local or s3://)",
        description="Runs, their curves per mode with the rules' findings, layer health, "
        "TensorPlot, the rule timeline and the training log, updated as training goes; "
        "compare runs side by side. Binds 127.0.0.1 unless --host says otherwise (then a "
        "token is required, printed in the URL).",
    )
    serve.add_argument(
        "places",
        nargs="*",
        default=["runs"],
        help="runs directories, job or trial directories, s3:// prefixes (default runs), or "
        "another tracker's runs (a TensorBoard logdir, mlruns/, W&B, Neptune's Parquet: "
        "imported into a temporary directory, removed when serve ends, and followed: checked "
        f"every {FOLLOW_SECS:g} s, new steps and runs are imported as the tracker writes them)",
    )
    serve.add_argument("--host", default="127.0.0.1", help="the address to listen on")
    serve.add_argument("--port", type=int, default=8765, help="default 8765; 0: any free port")
    serve.add_argument("--token", help="the access token (made up when --host is not local)")
    serve.add_argument(
        "--allow-host",
        action="append",
        default=[],
        metavar="NAME",
        help="also answer requests whose Host header is NAME (a proxy's or tunnel's name, "
        "optionally NAME:PORT; repeatable); by default only the --host address and "
        "localhost, 127.0.0.1, [::1] with the bound port are answered, anything else gets 403",
    )
    serve.add_argument(
        "--cache-mb",
        type=int,
        default=CACHE_MB,
        metavar="N",
        help=f"megabytes the dashboard keeps in memory of all runs together (curves answered, "
        f"series heads, report pages), least recently used out; default {CACHE_MB}",
    )
    role_arguments(serve)


def serve(ns: argparse.Namespace) -> int:
    from tensortap.serve._server import start

    def ready(url: str) -> None:
        print(f"tensortap serve: {url}  (Ctrl-C stops it)", flush=True)

    with sources.import_directory("tensortap-serve-") as place:
        places, shown, followers = _places(ns, place)
        start(
            places,
            ns.host,
            ns.port,
            ns.token,
            background=False,
            on_ready=ready,
            allow_hosts=ns.allow_host,
            shown=shown,
            cache_mb=ns.cache_mb,
            follow=followers,
            # a signal ends the process at once: the imported trials go first
            before_exit=lambda: shutil.rmtree(place, ignore_errors=True),
        )
    return 0


def _places(ns: argparse.Namespace, place: Path) -> tuple[list[str], dict[str, str], list[Any]]:
    """The places to serve: tensortap's own as given, another tracker's runs imported under
    ``place``; how the page names the imported ones (their sources, never the temporary
    directory); and the imports to follow while serving."""
    places: list[str] = []
    shown: dict[str, str] = {}
    followers: list[Any] = []
    for n, given in enumerate(ns.places):
        if ns.format is None and sources.is_tensortap(given):
            places.append(given)
            continue
        into = place / f"{n}-{Path(given).resolve().name or 'source'}"
        spare = place / f"{n}-next"  # the trials imported again, outside every place served
        follower, result = sources.follow_source(
            given, into, spare, ns.format, ns.loss, ns.val_loss
        )
        if len(result.failed) == len(result.runs):
            raise InvalidConfigError(f"no run of {given} could be imported (said above)")
        print(
            f"  followed: checked every {FOLLOW_SECS:g} s; steps and runs written there later "
            "are imported as they come",
            file=sys.stderr,
        )
        places.append(str(into))
        shown.update(sources.shown_locations(given, into, result))
        followers.append(follower)
    return places, shown, followers


__all__ = ["add_parser", "serve"]
