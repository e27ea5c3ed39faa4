"""Where the monitoring tests find promtool and chromium (scripts/test.sh installs them)."""

from __future__ import annotations

import os
import shutil

import pytest


def require(tool: str, package: str) -> str:
    """The path of ``tool``; in CI its absence fails the test, elsewhere it skips it."""
    path = shutil.which(tool)
    if path is None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"{tool} is not installed (scripts/test.sh installs {package})")
        pytest.skip(f"{tool} is not installed: apt-get install {package}")
    return path
