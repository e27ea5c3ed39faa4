"""The gateway's layers: imports only downward, no circle (import-linter, the contracts of
``[tool.importlinter]`` in pyproject.toml), and a check that breaking them is seen."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    """``lint-imports`` over the gateway package found in ``root``, with the repo's contracts."""
    if not LINT_IMPORTS.exists():
        pytest.fail(f"{LINT_IMPORTS} missing: install the test extra (pip install -e '.[test]')")
    return subprocess.run(
        [str(LINT_IMPORTS), "--config", str(REPO / "pyproject.toml"), "--no-cache"],
        cwd=root,
        env={**os.environ, "PYTHONPATH": str(root)},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_gateway_keeps_its_layers() -> None:
    done = lint_imports(REPO)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Contracts: 2 kept, 0 broken." in done.stdout


@pytest.mark.parametrize(
    ("module", "upward"),
    [
        ("gateway/errors.py", "from gateway.server import app"),  # the bottom reaches the top
        ("gateway/dispatch/pool.py", "from gateway.upstream import proxy"),  # one layer up
        ("gateway/inputs/pdf.py", "from gateway.inputs import document"),  # a circle in a package
    ],
)
def test_an_upward_import_breaks_the_contract(tmp_path: Path, module: str, upward: str) -> None:
    shutil.copytree(REPO / "gateway", tmp_path / "gateway", ignore=shutil.ignore_patterns("*.pyc"))
    target = tmp_path / module
    target.write_text(target.read_text() + f"\n{upward}  # noqa\n")
    done = lint_imports(tmp_path)
    assert done.returncode != 0, done.stdout
    assert "BROKEN" in done.stdout
    importer = module.removesuffix(".py").replace("/", ".")
    assert importer in done.stdout or importer.rsplit(".", 1)[-1] in done.stdout, done.stdout
