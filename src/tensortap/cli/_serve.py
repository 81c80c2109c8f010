"""``tensortap serve [DIR_OR_URL ...]``: the live dashboard in the browser."""

from __future__ import annotations

import argparse
from typing import Any


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
        help="runs directories, job or trial directories, s3:// prefixes (default runs)",
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


def serve(ns: argparse.Namespace) -> int:
    from tensortap.serve._server import start

    def ready(url: str) -> None:
        print(f"tensortap serve: {url}  (Ctrl-C stops it)", flush=True)

    start(
        ns.places,
        ns.host,
        ns.port,
        ns.token,
        background=False,
        on_ready=ready,
        allow_hosts=ns.allow_host,
    )
    return 0


__all__ = ["add_parser", "serve"]
