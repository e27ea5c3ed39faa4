"""The gateway's status page (``gateway.status``) driven in headless Chromium: the steps the
browser tests share, so that a change to the page's markup is followed here once."""

from __future__ import annotations

import os
import time
from pathlib import Path

from tests.monitoring.cdp import Page

ARTIFACTS = Path(os.environ.get("TEST_ARTIFACTS", "/tmp/paddleocr-fleet-artifacts"))
"""Where screenshots go: CI keeps this folder (``TEST_ARTIFACTS``) for a person to look at."""


def log_in(page: Page, token: str) -> None:
    """Log in through the page's form and wait for its first drawing of the fleet."""
    page.wait_for("!!document.getElementById('token')")
    page.eval(f"document.getElementById('token').value = {token!r}")
    page.eval("document.getElementById('login').click(), true")
    page.wait_for("document.body.dataset.loaded === '1'")


def seconds_until_unhealthy(page: Page, paddlex_url: str, timeout: float) -> float:
    """Wait until the chip of the PaddleX at ``paddlex_url`` leaves the healthy state; the
    seconds that took (call it right after taking the instance away)."""
    started = time.monotonic()
    page.wait_for(
        f"document.querySelector('.chip.paddlex[data-url=\"{paddlex_url}\"]')"
        ".dataset.state !== 'healthy'",
        timeout=timeout,
    )
    return time.monotonic() - started


def save_screenshot(page: Page, name: str) -> Path:
    """A screenshot of the page in :data:`ARTIFACTS`; its path."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    return page.screenshot(ARTIFACTS / name)
