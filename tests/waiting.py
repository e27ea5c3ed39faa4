"""Polling for the tests: wait until something observable is true, with a generous bound.

Usage::

    assert wait_for(lambda: len(double.layout_requests()) >= 2)
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def wait_for(predicate: Callable[[], Any], timeout: float = 30.0, step: float = 0.02) -> bool:
    """Poll `predicate` until it is true (True) or `timeout` seconds pass (False).

    The default timeout is generous (a loaded CI machine can stall for seconds); it costs
    nothing when the predicate comes true early."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(step)
    return False
