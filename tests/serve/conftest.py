"""Fixtures of the dashboard's browser tests."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture
def viewport(browser) -> Iterator[Any]:
    """Set the page's viewport to a width (exactly, through the DevTools protocol); reset after."""

    def set_width(width: int) -> None:
        browser.driver.execute_cdp_cmd(
            "Emulation.setDeviceMetricsOverride",
            {"width": width, "height": 900, "deviceScaleFactor": 1, "mobile": False},
        )

    yield set_width
    browser.driver.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
