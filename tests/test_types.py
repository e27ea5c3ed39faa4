"""The type checker, strict on gateway/ and components/, as configured in pyproject.toml.

Run as the README's test command runs everything else, so a wrong annotation or a call that no
longer matches its callee fails CI, with mypy's own report in the failure message.
"""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_mypy_strict_is_clean(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--config-file",
            "pyproject.toml",
            "--cache-dir",
            str(tmp_path / "mypy-cache"),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, f"mypy failed:\n{done.stdout}\n{done.stderr}"
