"""The dashboard's web app: Starlette routes over a :class:`~tensortap.serve._catalog.Catalog`.

Pages are static shells (``static/``) that ask the JSON API and draw with plotly.js, served
from the plotly package installed here (the dashboard needs no network). Handlers are plain
functions, run by Starlette in its thread pool. A run's series reads (the charts) hold its
``lock``, its trial's reads (layer health, TensorPlot, embeddings) its ``trial_lock``, so a
chart never waits for a heat map; the runs list, the runs table (``/api/table``,
:mod:`tensortap.serve._rows`) and a run's summary take neither (they read the small
documents only).
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import json
import logging
import math
import re
import secrets
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import FileResponse, HTMLResponse, JSONResponse, Response
from starlette.routing import Route

from tensortap.core._safe_regex import compile_untrusted
from tensortap.exceptions import FormatError, InvalidConfigError, TensortapError
from tensortap.report import _colours as colours
from tensortap.serve import _data as data
from tensortap.serve import _layers as layers
from tensortap.serve import _meta as meta
from tensortap.serve import _rows as rows
from tensortap.serve._catalog import Catalog, Run

log = logging.getLogger(__name__)
STATIC = Path(__file__).with_name("static")
COOKIE = "tensortap_token"
#: The most layers one TensorPlot request draws (their names are matched by RE2 first).
MOST_LAYERS = 256
#: Layers a compare answer lists of two runs' diff (the most changed first).
DIFF_LAYERS = 50


def plotly_js() -> Path:
    import plotly

    return Path(plotly.__file__).parent / "package_data" / "plotly.min.js"


@functools.cache
def plotly_url() -> str:
    """Where the pages load plotly.js from: a path naming its content's hash, so that a
    browser keeps it for good (:data:`IMMUTABLE`) and fetches it again only when the plotly
    installed here changes (then the path changes). Hashed once per process (~10 ms)."""
    digest = hashlib.sha256(plotly_js().read_bytes()).hexdigest()[:16]
    return f"/static/plotly-{digest}.min.js"


#: The caching of a file served at a path naming its content's hash: kept a year, never
#: asked for again (not even on reload).
IMMUTABLE = "public, max-age=31536000, immutable"
#: Where the page shell names the plotly.js to load (dashboard.js reads it).
_PLOTLY_PLACEHOLDER = b"/static/plotly.min.js"


def _json(payload: Any, status: int = 200) -> Response:
    return Response(
        json.dumps(payload, allow_nan=False, default=str),
        status_code=status,
        media_type="application/json",
        headers={"Cache-Control": "no-store"},
    )


def _float(text: str | None) -> float | None:
    if text is None or text == "":
        return None
    value = float(text)
    return value if math.isfinite(value) else None


def _int(text: str | None, what: str) -> int | None:
    if text is None or text == "":
        return None
    try:
        return int(text)
    except ValueError:
        raise InvalidConfigError(f"{what} is a whole number, got {text!r}") from None


#: What a token may hold: it travels in a URL and a cookie as it is.
_TOKEN_CHARACTERS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")


def check_token(token: str | None) -> None:
    """Refuse a token that would let anyone in (empty) or cannot travel in a URL and a
    cookie as it is."""
    if token is None:
        return
    if not isinstance(token, str) or not token:
        raise InvalidConfigError(
            f"the dashboard's token must be a non-empty string, got {token!r}: an empty token "
            "would let anyone in; leave --token out on the local machine, or pass a secret"
        )
    odd = sorted(set(token) - _TOKEN_CHARACTERS)
    if odd:
        raise InvalidConfigError(
            f"the dashboard's token may hold letters, digits and '-._~' (it travels in a URL "
            f"and a cookie), got one with {''.join(odd)!r}; for example pass "
            "$(python -c 'import secrets; print(secrets.token_urlsafe(18))')"
        )


def create_app(
    catalog: Catalog, token: str | None = None, hosts: Iterable[str] | None = None
) -> Starlette:
    """The app; with ``token``, every request must carry it (``?token=`` once, then a cookie).
    With ``hosts`` (see :func:`allowed_hosts`), a request whose ``Host`` header names none of
    them gets 403 (a page DNS-rebound to this address names its own host). Every answer
    carries the security headers (:data:`SECURITY_HEADERS`)."""
    check_token(token)

    def run_or_404(request: Request) -> Run:
        run = catalog.get(request.path_params["run"])
        if run is None:
            raise _NotFound(f"no run {request.path_params['run']!r} under {catalog.shown_places()}")
        return run

    def api_runs(request: Request) -> Response:  # no run's lock: never waits for a read
        out = [_overview(run) for run in catalog.runs()]
        return _json(
            {"runs": out, "places": catalog.shown_places(), "errors": catalog.shown_errors()}
        )

    def api_table(request: Request) -> Response:  # no run's lock: the rows' small reads
        q = request.query_params
        body = rows.table(
            catalog.runs(),
            sort=q.get("sort") or None,
            text=q.get("filter") or None,
            group=q.get("group") or None,
        )
        return _json({**body, "places": catalog.shown_places(), "errors": catalog.shown_errors()})

    def api_run(request: Request) -> Response:
        return _json(data.detail(run_or_404(request)))

    def api_series(request: Request) -> Response:
        run = run_or_404(request)
        q = request.query_params
        with run.lock:
            return _json(
                data.series_list(
                    run,
                    match=q.get("match") or None,
                    offset=_int(q.get("offset"), "offset") or 0,
                    limit=_int(q.get("limit"), "limit") or data.MAX_SERIES,
                )
            )

    def api_curves(request: Request) -> Response:
        run = run_or_404(request)
        q = request.query_params
        with run.lock:
            return _json(
                data.curves(
                    run,
                    _float(q.get("x0")),
                    _float(q.get("x1")),
                    names=q.getlist("name") or None,
                    match=q.get("match") or None,
                    limit=_int(q.get("limit"), "limit") or data.MAX_SERIES,
                    after=_int(q.get("after"), "after"),
                    statistics=q.getlist("stat") or None,
                )
            )

    def api_health(request: Request) -> Response:
        run = run_or_404(request)
        with run.trial_lock:
            return _json(layers.health(run))

    def api_diff(request: Request) -> Response:
        """Which layer changed between runs ``a`` and ``b`` (query.layer_diff), the most
        first; both runs' trials held in one order (by id), so two such answers never wait
        on each other."""
        from tensortap.query import layer_diff

        found = []
        for key in ("a", "b"):
            run = catalog.get(request.query_params.get(key, ""))
            if run is None:
                raise _NotFound(f"no run {request.query_params.get(key)!r} to compare ({key}=)")
            found.append(run)
        a, b = found
        if a is b:
            return _json({"error": "a and b name the same run; choose two runs"}, 400)
        first, second = sorted((a, b), key=lambda r: r.id)
        with first.trial_lock, second.trial_lock:
            diffs = layer_diff(data.trial_of(a), data.trial_of(b))
        return _json(
            {
                "a": a.name,
                "b": b.name,
                "layers": [d.to_dict() for d in diffs[:DIFF_LAYERS]],
                "total": len(diffs),
            }
        )

    def api_tensorplot(request: Request) -> Response:
        from tensortap.viz._tensor_plot import TensorPlot

        run = run_or_404(request)
        q = request.query_params
        step = q.get("step")
        wanted = q.get("regex") or r".*relu_output"
        # a regex from a URL is data: matched by RE2 (linear in the names, bounded memory),
        # never by Python's backtracking re under the run's lock ((a+)+$ took minutes)
        try:
            matcher = compile_untrusted(
                wanted, "the regex parameter", "use a regex without backreferences or lookaround"
            )
        except FormatError as exc:
            return _json({"error": str(exc)}, 400)
        with run.trial_lock:
            # the names from an outline (no row per saved value: 0.9 GB of a 10^7-value run
            # of scalars, where the page asks for its activations in vain); the trial read
            # whole only when there is something to draw
            outline = data.trial_of(run, records=False)
            names = [n for n in outline.tensor_names() if matcher.search(n)]
            if not names:
                return _json({"steps": [], "figure": None, "note": f"no tensor matches {wanted!r}"})
            trial = data.trial_of(run)
            shown = names[:MOST_LAYERS]
            try:
                plot = TensorPlot(  # the names RE2 chose, literally
                    "^(?:" + "|".join(re.escape(n) for n in shown) + ")$",
                    trial,
                    steps=[int(step)] if step else 1,
                    batch_sample_id=-1,
                    title=wanted,
                )
            except TensortapError as exc:  # nothing to draw is an answer, not a failure
                return _json({"steps": [], "figure": None, "note": str(exc)})
            steps = plot.steps_with_layers(10_000)
            figure = plot.fig.to_json()
            note = (
                f"the first {MOST_LAYERS} of the {len(names)} tensors that match {wanted!r}: "
                "narrow the regex to see the others"
                if len(names) > MOST_LAYERS
                else None
            )
            labels = [plot.step_label(s) for s in steps]  # which mode's step each one is
            return Response(
                f'{{"steps": {json.dumps(steps)}, "labels": {json.dumps(labels)}, '
                f'"figure": {figure}, "note": {json.dumps(note)}}}',
                media_type="application/json",
            )

    def api_embeddings(request: Request) -> Response:
        run = run_or_404(request)
        q = request.query_params
        with run.trial_lock:
            found = layers.embeddings(
                run, q.get("tensor") or None, q.get("labels") or None, q.get("mode") or None
            )
            figure = found["figure"]
            shown = None if figure is None else json.loads(figure.to_json())
            return _json({**found, "figure": shown})

    def report(request: Request) -> Response:
        run = run_or_404(request)
        if run.refused is not None:
            return _json({"error": run.refused}, 403)
        with run.trial_lock:  # the run's own trial, read once (its index took 62% of a
            # 10^6-step report when each request opened its own)
            page = data.report_page(run)
        # the report carries plotly.js and its figure inline (it is also a file that opens
        # offline): those scripts, and only they, run here, by a nonce made for this answer
        # (every value from the trial or the job in the page is escaped, so each <script> in
        # it is the report's own)
        nonce = secrets.token_urlsafe(18)
        page = _SCRIPT_TAG.sub(f'<script nonce="{nonce}"', page)
        return HTMLResponse(page, headers={"Content-Security-Policy": csp(f"'nonce-{nonce}'")})

    def page(request: Request) -> Response:  # one shell: its script draws what the path says
        return Response(
            shell(), media_type="text/html; charset=utf-8", headers={"Cache-Control": "no-store"}
        )

    def plotly_hashed(request: Request) -> Response:
        if request.url.path != plotly_url():  # another plotly's hash (an older install)
            raise _NotFound(f"no {request.url.path}: plotly.js is at {plotly_url()}")
        return FileResponse(plotly_js(), headers={"Cache-Control": IMMUTABLE})

    routes = [
        Route("/", page),
        Route("/run/{run}", page),
        Route("/compare", page),
        Route("/report/{run}", report),
        Route("/api/runs", api_runs),
        Route("/api/table", api_table),
        Route("/api/run/{run}", api_run),
        Route("/api/run/{run}/series", api_series),
        Route("/api/run/{run}/curves", api_curves),
        Route("/api/run/{run}/health", api_health),
        Route("/api/diff", api_diff),
        Route("/api/run/{run}/tensorplot", api_tensorplot),
        Route("/api/run/{run}/embeddings", api_embeddings),
        Route("/static/plotly-{digest}.min.js", plotly_hashed),
        # the old path still answers (a page saved before), checked again on every use
        Route(
            "/static/plotly.min.js",
            lambda r: FileResponse(plotly_js(), headers={"Cache-Control": "no-cache"}),
        ),
        # the colours of every page, from the table the static report embeds
        Route("/static/colours.css", lambda r: Response(colours.css(), media_type="text/css")),
        Route(
            "/static/colours.js",
            lambda r: Response(colours.script(), media_type="text/javascript"),
        ),
        Route("/favicon.ico", lambda r: FileResponse(STATIC / "favicon.svg")),
        Route("/static/{name:path}", _static),
    ]

    async def errors(request: Request, exc: Exception) -> Response:
        status = 404 if isinstance(exc, _NotFound) else 422
        return _json({"error": str(exc)}, status)

    app = Starlette(
        routes=routes,
        exception_handlers={_NotFound: errors, TensortapError: errors, ValueError: errors},
    )
    if token is not None:
        app.add_middleware(_TokenMiddleware, token=token)
    # added last, so outermost: a foreign Host is refused before anything else, the token
    # check's own answers carry the headers too
    app.add_middleware(_GuardMiddleware, hosts=None if hosts is None else frozenset(hosts))
    return app


@functools.cache
def shell() -> bytes:
    """The pages' one shell (``static/dashboard.html``), naming plotly.js by its hashed path."""
    page = (STATIC / "dashboard.html").read_bytes()
    return page.replace(_PLOTLY_PLACEHOLDER, plotly_url().encode())


def _overview(run: Run) -> dict[str, Any]:
    """The run's line in the runs list; one that cannot be built (a fault of ours that a
    run's files found) is listed with the reason, and the other runs are served."""
    try:
        return meta.overview(run)
    except Exception as exc:  # one run never takes the list down for everyone
        log.exception("the runs list left out what it could not read of %s", run.name)
        return {
            "id": run.id,
            "name": run.name,
            "kind": "job" if run.job is not None else "trial",
            "location": run.shown or run.location,
            "status": "Unreadable",
            "started": None,
            "last_step": None,
            "rules": [],
            "problems_found": 0,
            "diagnosis": None,
            "problems": [f"this run cannot be shown ({type(exc).__name__}: {exc})"],
            "learning_rate": None,
            "batch_size": None,
        }


_SCRIPT_TAG = re.compile(r"<script(?=[\s>])", re.IGNORECASE)


def csp(scripts: str = "'self'") -> str:
    """The Content-Security-Policy of every answer: scripts only from this server (no inline
    script, no eval), or those carrying the nonce ``scripts`` names; styles may be inline
    (plotly sets them); no framing, no plugins, no <base>, no form posted elsewhere."""
    return (
        f"default-src 'self'; script-src {scripts}; style-src 'self' 'unsafe-inline'; "
        "img-src 'self' data: blob:; font-src 'self' data:; connect-src 'self'; "
        "worker-src 'self' blob:; object-src 'none'; base-uri 'none'; form-action 'self'; "
        "frame-ancestors 'none'"
    )


#: Sent with every answer (the report's own CSP, with its nonce, replaces the first).
SECURITY_HEADERS = (
    ("content-security-policy", csp()),
    ("x-frame-options", "DENY"),
    ("x-content-type-options", "nosniff"),
    ("referrer-policy", "no-referrer"),
    ("cross-origin-opener-policy", "same-origin"),
)

#: The names a dashboard on the local machine is always reached by.
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "[::1]")


def allowed_hosts(host: str, port: int, extra: Iterable[str] = ()) -> frozenset[str]:
    """The ``Host`` headers a dashboard bound to ``host``:``port`` answers: the bound name or
    address and the loopback names, each with the port (and without it on port 80), and each
    of ``extra`` (``--allow-host``) with or without a port (a name given with a port only so)."""
    bound = f"[{host}]" if ":" in host and not host.startswith("[") else host
    names = {bound.lower(), *LOOPBACK_NAMES}
    out = {f"{n}:{port}" for n in names} | (names if port == 80 else set())
    for name in extra:
        name = check_allowed_host(name).lower()
        if _HAS_PORT.search(name):
            out.add(name)
        else:
            out |= {name, f"{name}:{port}"}
    return frozenset(out)


_HAS_PORT = re.compile(r":[0-9]+$")
_HOST_NAME = re.compile(r"^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._-]+)(:[0-9]{1,5})?$")


def check_allowed_host(name: object) -> str:
    """An ``--allow-host`` value: a host name or address (IPv6 in brackets), optionally with
    ``:port``."""
    if not isinstance(name, str) or not _HOST_NAME.match(name):
        raise InvalidConfigError(
            f"--allow-host takes a host name or address as a browser sends it in the Host "
            f"header (dash.example.com, 10.0.0.5, [fe80::1], optionally with :PORT), got "
            f"{name!r}"
        )
    return name


class _NotFound(TensortapError):
    pass


def _static(request: Request) -> Response:
    name = request.path_params["name"]
    path = (STATIC / name).resolve()
    if path.parent != STATIC.resolve() or not path.is_file():
        return JSONResponse({"error": "not found"}, status_code=404)
    return FileResponse(path, headers={"Cache-Control": "no-store"})


class _GuardMiddleware:
    """Refuses a request whose ``Host`` header names none of ``hosts`` (403: DNS rebinding),
    and adds :data:`SECURITY_HEADERS` to every answer (an answer's own CSP is kept)."""

    def __init__(self, app: Callable[..., Awaitable[None]], hosts: frozenset[str] | None) -> None:
        self.app, self.hosts = app, hosts

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: MutableMapping[str, Any]) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                present = {k.lower() for k, _ in headers}
                headers += [
                    (k.encode(), v.encode())
                    for k, v in SECURITY_HEADERS
                    if k.encode() not in present
                ]
                message["headers"] = headers
            await send(message)

        started = False

        async def send_once(message: MutableMapping[str, Any]) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send_with_headers(message)

        if self.hosts is not None:
            given = dict(scope.get("headers", [])).get(b"host", b"")
            host = given.decode("latin-1").strip().lower()
            if host not in self.hosts:
                response = JSONResponse(
                    {
                        "error": f"this dashboard does not answer requests for host {host!r}: "
                        "open it by the address `tensortap serve` printed, or start it with "
                        "--allow-host NAME for a name it is reached by (a proxy, a tunnel)"
                    },
                    status_code=403,
                )
                await response(scope, receive, send_with_headers)
                return
        try:
            await self.app(scope, receive, send_once)
        except Exception:
            # Starlette's own error middleware sits outside this one and would answer the
            # 500 without the headers: answer it here (the error is logged, not shown)
            log.exception("an unexpected error answering %s", scope.get("path"))
            if started:
                raise
            response = JSONResponse(
                {"error": "the dashboard failed answering this request; its log says why"},
                status_code=500,
            )
            await response(scope, receive, send_with_headers)


class _TokenMiddleware:
    """Lets a request through when it carries the token: ``?token=`` (which also sets a
    cookie, so that the page's own requests need not repeat it), the cookie, or a header."""

    def __init__(self, app: Callable[..., Awaitable[None]], token: str) -> None:
        self.app, self.token = app, token
        self._expected = token.encode()

    def _matches(self, given: str) -> bool:
        """A constant-time comparison that any string a request carries can take (a non-ASCII
        one made compare_digest raise: a 500 instead of a 401)."""
        return hmac.compare_digest(given.encode("utf-8", "surrogatepass"), self._expected)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        given = request.query_params.get("token")
        held = request.cookies.get(COOKIE) or request.headers.get("x-tensortap-token")
        if given is not None and self._matches(given):

            async def send_with_cookie(message: dict[str, Any]) -> None:
                if message["type"] == "http.response.start":
                    cookie = f"{COOKIE}={self.token}; Path=/; HttpOnly; SameSite=Strict"
                    message["headers"] = [
                        *message.get("headers", []),
                        (b"set-cookie", cookie.encode()),
                    ]
                await send(message)

            await self.app(scope, receive, send_with_cookie)
            return
        if held is not None and self._matches(held):
            await self.app(scope, receive, send)
            return
        response = JSONResponse(
            {"error": "this dashboard needs its token: open the URL `tensortap serve` printed"},
            status_code=401,
        )
        await response(scope, receive, send)


__all__ = [
    "IMMUTABLE",
    "SECURITY_HEADERS",
    "allowed_hosts",
    "create_app",
    "csp",
    "plotly_js",
    "plotly_url",
]
