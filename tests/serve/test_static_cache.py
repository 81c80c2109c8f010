"""plotly.js (3.5-4.8 MB) is fetched once and kept by the browser (issue 48, item 4): the
pages load it from a path naming its content's hash, served as immutable for a year; its
old path still answers."""

from __future__ import annotations

import hashlib

import pytest

import tensortap as tt
from tests.serve.test_serve import raw_get

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")


def plotly_path() -> str:
    from tensortap.serve._app import plotly_js

    digest = hashlib.sha256(plotly_js().read_bytes()).hexdigest()[:16]
    return f"/static/plotly-{digest}.min.js"


def small_run(out) -> None:
    hook = tt.Hook(out, save_config=tt.SaveConfig(save_interval=1))
    for step in range(20):
        hook.save_scalar("loss", 1 / (1 + step))
        hook.next_step()
    hook.close()


def test_plotly_is_served_at_its_hash_as_immutable_and_at_its_old_path(tmp_path, serve) -> None:
    from tensortap.serve._app import plotly_js

    small_run(tmp_path / "r")
    dashboard = serve(tmp_path / "r", warm=False)
    hashed, whole = plotly_path(), plotly_js().read_bytes()
    _, _, shell = raw_get(dashboard.url, "/")
    assert f'<meta name="tensortap-plotly" content="{hashed}">'.encode() in shell
    status, headers, body = raw_get(dashboard.url, hashed)
    assert status == 200 and body == whole
    assert headers["cache-control"] == "public, max-age=31536000, immutable"
    assert headers["content-type"].startswith("text/javascript")
    assert headers["x-content-type-options"] == "nosniff"  # the security headers too
    status, headers, body = raw_get(dashboard.url, "/static/plotly.min.js")  # the old path
    assert status == 200 and body == whole and "immutable" not in headers["cache-control"]
    status, headers, _ = raw_get(dashboard.url, "/static/plotly-0123456789abcdef.min.js")
    assert status == 404 and headers["x-frame-options"] == "DENY"  # another plotly's hash


def test_the_run_page_loads_plotly_from_its_hashed_path(tmp_path, serve, browser) -> None:
    small_run(tmp_path / "r")
    dashboard = serve(tmp_path / "r", warm=False)
    (run,) = dashboard.catalog.runs()
    browser.visit(f"{dashboard.url}run/{run.id}")
    browser.until("return !!window.Plotly;")
    sources = browser.driver.execute_script(
        "return [...document.scripts].map((s) => s.src).filter((s) => s.includes('plotly'));"
    )
    assert sources == [dashboard.url.rstrip("/") + plotly_path()]
    assert browser.errors() == []
