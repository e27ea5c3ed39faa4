"""Where the monitoring tests find promtool and chromium (scripts/test.sh installs them)."""

from __future__ import annotations

import shutil

from tests.real_components import unavailable


def require(tool: str, package: str, component: str) -> str:
    """The path of ``tool``; in CI its absence fails the test naming ``component``, elsewhere
    it skips it."""
    path = shutil.which(tool)
    if path is None:
        unavailable(
            component, f"{tool} is not installed (apt-get install {package}; scripts/test.sh does)"
        )
    return path
