"""Running the dashboard: uvicorn on a socket bound here (so that port 0 gives a free port
whose number is known at once), in the foreground or in a thread (tests, notebooks)."""

from __future__ import annotations

import ipaddress
import logging
import secrets
import signal
import socket
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tensortap.exceptions import InvalidConfigError
from tensortap.serve._catalog import RESCAN_SECS, Catalog, FollowedSource
from tensortap.serve._series import CACHE_MB
from tensortap.storage._descriptors import raise_open_file_limit

log = logging.getLogger(__name__)

LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1")


def _is_local(host: str) -> bool:
    if host in LOCAL_HOSTS:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


#: On SIGTERM or SIGINT, how long the requests in flight may take to finish (seconds); then the
#: server ends whatever they are doing (a request is a thread, which nothing can interrupt).
STOP_GRACE_SECS = 2.0

#: Charts of a run read ahead: about what a page shows before it is scrolled (each chart is
#: asked for when on screen). All of them would read a huge run whole: 100 series of 10^6
#: steps took 4 s and 3 GB, and the first page waited for it.
WARM_CHARTS = 12


def _warm(catalog: Catalog, stop: threading.Event) -> None:
    """Read the first charts of each run once, in the background, as runs are found: a long
    run's page then opens at once instead of reading 100,000 steps on the first click. Only
    new runs are read; following a run stays the page's business. The runs table's rows of
    new runs are read first (a few milliseconds each), so that it opens whole."""
    from tensortap.serve import _data as data
    from tensortap.serve import _rows as rows

    while not stop.is_set():
        for run in catalog.runs():
            if stop.is_set():
                return
            if run.row is None:
                rows.row_of(run, [1], time.monotonic())
        for run in catalog.runs():
            if stop.is_set():
                return
            if run.cache.warmed:
                continue
            with run.lock:
                try:
                    data.curves(run, limit=WARM_CHARTS)
                except Exception:  # a run that cannot be read now: its page will say why
                    log.debug("could not read %s ahead", run.location, exc_info=True)
                run.cache.warmed = True
        stop.wait(RESCAN_SECS)


#: How often the followed sources are asked whether they are due (each says when it is).
FOLLOW_POLL_SECS = 0.25


def _follow(catalog: Catalog, sources: Sequence[FollowedSource], stop: threading.Event) -> None:
    """Ask each followed source what changed (it re-imports, when due, in this thread) and
    show it; one source that fails is logged and asked again, the others go on."""
    while not stop.is_set():
        for source in sources:
            if stop.is_set():
                return
            try:
                catalog.follow(source.check())
            except Exception:  # a fault of ours: said, and the source is asked again
                log.exception("could not follow %r", source)
        stop.wait(FOLLOW_POLL_SECS)


@dataclass
class Dashboard:
    """A dashboard being served: its ``url`` (with the token when there is one)."""

    url: str
    server: Any
    thread: threading.Thread | None
    warming: threading.Event
    catalog: Catalog | None = None  # the runs it serves

    def stop(self, timeout: float = 10.0) -> None:
        self.warming.set()
        self.server.should_exit = True
        if self.thread is not None:
            self.thread.join(timeout)


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise InvalidConfigError(
            f"cannot listen on {host}:{port} ({exc.strerror}): choose another --port (0 picks "
            "a free one)"
        ) from None
    sock.listen(128)
    sock.set_inheritable(True)
    return sock


def _serve_until_signal(
    server: Any, sock: socket.socket, before_exit: Callable[[], None] | None = None
) -> None:
    """Serve from a thread until SIGTERM or SIGINT, then end the process as that signal does
    (exit status 128 + its number), within :data:`STOP_GRACE_SECS` (a second signal: at once)
    whatever the requests in flight are doing. uvicorn's own handling waits for every request
    (a runs list over a 27 MB summary.json kept the server up), and a request's thread, which
    cannot be interrupted, would also keep the interpreter from exiting."""
    received: list[int] = []

    def on_signal(signum: int, frame: object) -> None:  # only flags: no lock in a handler
        received.append(signum)
        server.should_exit = True

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
    thread = threading.Thread(
        target=server.run, kwargs={"sockets": [sock]}, name="tensortap-serve", daemon=True
    )
    thread.start()
    try:
        while thread.is_alive() and not received:
            thread.join(0.2)  # the handler runs in this thread, between two waits
        deadline = time.monotonic() + STOP_GRACE_SECS + 1.0
        while thread.is_alive() and len(received) < 2 and time.monotonic() < deadline:
            thread.join(0.1)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if received:
        sock.close()
        if before_exit is not None:
            before_exit()
        logging.shutdown()  # what was logged is written before the end
        # killed by the signal it got, as the default action ends a process: the requests'
        # threads (non-daemon, and perhaps still reading) cannot hold the exit up
        signal.signal(received[0], signal.SIG_DFL)
        signal.raise_signal(received[0])


def start(
    places: list[str],
    host: str = "127.0.0.1",
    port: int = 8765,
    token: str | None = None,
    background: bool = True,
    on_ready: Any = None,
    warm: bool = True,
    allow_hosts: Sequence[str] = (),
    before_exit: Callable[[], None] | None = None,
    shown: Mapping[str, str] | None = None,
    cache_mb: int = CACHE_MB,
    follow: Sequence[FollowedSource] = (),
) -> Dashboard:
    """Serve a dashboard over ``places``. Off the local machine (``host`` not a loopback
    address) a token is required: ``token``, or one made here and put in the URL. With
    ``warm``, each run's curves are read ahead in the background as runs are found.
    Requests are answered only for the ``Host`` names ``host`` and the loopback names (with
    the bound port), and those in ``allow_hosts`` (``--allow-host``): anything else gets 403,
    so that a page that DNS-rebinds its own name to this address reads nothing. In the
    foreground (not ``background``, from the main thread, as ``tensortap serve`` runs it),
    SIGTERM and SIGINT end the process within :data:`STOP_GRACE_SECS`, as that signal ends
    one, calling ``before_exit`` first (the process ends without unwinding); in the
    background, :meth:`Dashboard.stop` stops the server. ``shown`` maps a place or a trial's
    location to how the page names it (see :class:`~tensortap.serve._catalog.Catalog`). What
    is kept in memory of all the runs together (answers, series heads, report pages) stays
    within ``cache_mb`` megabytes (``--cache-mb``), least recently used out. Each of
    ``follow`` (another tracker's runs imported under a place:
    :class:`tensortap.trackers.FollowedImport`) is checked in a thread of its own while
    serving, and what it imports again replaces its runs' trials."""
    import uvicorn

    from tensortap.serve._app import allowed_hosts, check_allowed_host, check_token, create_app

    check_token(token)  # before binding: an empty token would let anyone in
    if isinstance(allow_hosts, str):
        allow_hosts = [allow_hosts]
    for name in allow_hosts:
        check_allowed_host(name)
    if not isinstance(port, int) or isinstance(port, bool) or not 0 <= port <= 65535:
        raise InvalidConfigError(f"port must be 0..65535, got {port!r}")
    if not _is_local(host) and token is None:
        token = secrets.token_urlsafe(18)
    catalog = Catalog(list(places), shown, cache_mb)
    raise_open_file_limit()  # many runs, each with files open: room for them and the sockets
    sock = _bind(host, port)
    bound = sock.getsockname()[1]
    named = f"[{host}]" if ":" in host else host
    url = f"http://{named}:{bound}/" + (f"?token={token}" if token else "")
    config = uvicorn.Config(
        create_app(catalog, token, allowed_hosts(host, bound, allow_hosts)),
        log_level="warning",
        access_log=False,
        lifespan="off",
        timeout_graceful_shutdown=int(STOP_GRACE_SECS),
    )
    server = uvicorn.Server(config)
    warming = threading.Event()
    if warm:
        threading.Thread(
            target=_warm, args=(catalog, warming), name="tensortap-serve-warm", daemon=True
        ).start()
    if follow:
        threading.Thread(
            target=_follow,
            args=(catalog, list(follow), warming),
            name="tensortap-serve-follow",
            daemon=True,
        ).start()
    if on_ready is not None:
        on_ready(url)
    if not background:
        try:
            if threading.current_thread() is threading.main_thread():
                _serve_until_signal(
                    server, sock, before_exit
                )  # ends the process on SIGTERM and SIGINT
            else:  # no signal reaches this thread: whoever started it stops the server
                server.run(sockets=[sock])
        finally:
            warming.set()
            sock.close()
        return Dashboard(url, server, None, warming, catalog)
    thread = threading.Thread(
        target=server.run, kwargs={"sockets": [sock]}, name="tensortap-serve", daemon=True
    )
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise InvalidConfigError(f"the dashboard did not start on {host}:{bound}")
        time.sleep(0.01)
    return Dashboard(url, server, thread, warming, catalog)


__all__ = ["Dashboard", "start"]
