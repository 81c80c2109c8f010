"""The dashboard's web app: Starlette routes over a :class:`~tensortap.serve.catalog.Catalog`.

Pages are static shells (``static/``) that ask the JSON API and draw with plotly.js, served
from the plotly package installed here (the dashboard needs no network). Handlers are plain
functions, run by Starlette in its thread pool; each run's cached data is guarded by its lock.
"""

from __future__ import annotations

import hmac
import json
import math
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import FileResponse, HTMLResponse, JSONResponse, Response
from starlette.routing import Route

from tensortap.exceptions import InvalidConfigError, TensortapError
from tensortap.serve import data
from tensortap.serve.catalog import Catalog, Run

STATIC = Path(__file__).with_name("static")
COOKIE = "tensortap_token"


def plotly_js() -> Path:
    import plotly

    return Path(plotly.__file__).parent / "package_data" / "plotly.min.js"


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


def create_app(catalog: Catalog, token: str | None = None) -> Starlette:
    """The app; with ``token``, every request must carry it (``?token=`` once, then a cookie)."""
    check_token(token)

    def run_or_404(request: Request) -> Run:
        run = catalog.get(request.path_params["run"])
        if run is None:
            raise _NotFound(f"no run {request.path_params['run']!r} under {catalog.places}")
        return run

    def api_runs(request: Request) -> Response:
        out = []
        for run in catalog.runs():
            with run.lock:
                out.append(data.overview(run))
        return _json({"runs": out, "places": catalog.places, "errors": catalog.errors})

    def api_run(request: Request) -> Response:
        run = run_or_404(request)
        with run.lock:
            return _json(data.detail(run))

    def api_curves(request: Request) -> Response:
        run = run_or_404(request)
        q = request.query_params
        limit = q.get("limit")
        with run.lock:
            return _json(
                data.curves(
                    run,
                    _float(q.get("x0")),
                    _float(q.get("x1")),
                    names=q.getlist("name") or None,
                    match=q.get("match") or None,
                    limit=int(limit) if limit else data.MAX_SERIES,
                )
            )

    def api_health(request: Request) -> Response:
        run = run_or_404(request)
        with run.lock:
            return _json(data.health(run))

    def api_tensorplot(request: Request) -> Response:
        from tensortap.viz.tensor_plot import TensorPlot

        run = run_or_404(request)
        q = request.query_params
        step = q.get("step")
        with run.lock:
            try:
                plot = TensorPlot(
                    q.get("regex") or r".*relu_output",
                    data.trial_of(run),
                    steps=[int(step)] if step else 1,
                    batch_sample_id=-1,
                )
            except TensortapError as exc:  # nothing to draw is an answer, not a failure
                return _json({"steps": [], "figure": None, "note": str(exc)})
            steps = plot.steps_with_layers(10_000)
            figure = plot.fig.to_json()
            return Response(
                f'{{"steps": {json.dumps(steps)}, "figure": {figure}}}',
                media_type="application/json",
            )

    def api_embeddings(request: Request) -> Response:
        run = run_or_404(request)
        q = request.query_params
        with run.lock:
            found = data.embeddings(
                run, q.get("tensor") or None, q.get("labels") or None, q.get("mode") or None
            )
            figure = found["figure"]
            shown = None if figure is None else json.loads(figure.to_json())
            return _json({**found, "figure": shown})

    def report(request: Request) -> Response:
        from tensortap.report import training_report

        run = run_or_404(request)  # its own trial, outside the run's lock: a report that
        # runs rules over a long bare trial takes a while, and the live page must not wait
        if run.refused is not None:
            return _json({"error": run.refused}, 403)
        return HTMLResponse(training_report(run.location, run.job))

    def page(request: Request) -> Response:  # one shell: its script draws what the path says
        return FileResponse(STATIC / "dashboard.html", headers={"Cache-Control": "no-store"})

    routes = [
        Route("/", page),
        Route("/run/{run}", page),
        Route("/compare", page),
        Route("/report/{run}", report),
        Route("/api/runs", api_runs),
        Route("/api/run/{run}", api_run),
        Route("/api/run/{run}/curves", api_curves),
        Route("/api/run/{run}/health", api_health),
        Route("/api/run/{run}/tensorplot", api_tensorplot),
        Route("/api/run/{run}/embeddings", api_embeddings),
        Route("/static/plotly.min.js", lambda r: FileResponse(plotly_js())),
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
    return app


class _NotFound(TensortapError):
    pass


def _static(request: Request) -> Response:
    name = request.path_params["name"]
    path = (STATIC / name).resolve()
    if path.parent != STATIC.resolve() or not path.is_file():
        return JSONResponse({"error": "not found"}, status_code=404)
    return FileResponse(path, headers={"Cache-Control": "no-store"})


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


__all__ = ["create_app", "plotly_js"]
