"""Running the repository's shell scripts (scripts/*.sh) as a user does, for the tests of them."""

from __future__ import annotations

import subprocess
from pathlib import Path


def run_script(
    script: Path, env: dict[str, str], *args: str, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    """``bash script args...`` with ``env`` and no terminal input (a script that asks hangs
    until ``timeout`` rather than reading the test's stdin); output captured as text, the exit
    status left to the caller."""
    return subprocess.run(
        ["bash", str(script), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        stdin=subprocess.DEVNULL,
    )
