"""tests/real_components.py: a real component that cannot start fails a test under CI=true,
naming the component, and skips it elsewhere; PostgreSQL made absent
(``$PADDLEOCR_FLEET_PG_BIN`` without ``pg_ctl``) is such a component."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

NEEDS_A_COMPONENT = """
from tests.real_components import unavailable


def test_needs_the_component() -> None:
    unavailable("Frobnicator", "frobd is not installed")
"""

NEEDS_POSTGRES = """
from tests.real_components import start_postgres


def test_needs_postgres() -> None:
    start_postgres().destroy()
"""


def _run(tmp_path: Path, source: str, ci: str | None, **env: str) -> tuple[int, str]:
    """``source`` as a test module run by pytest in a child (``CI`` set to ``ci``, or unset);
    its exit status and output."""
    (tmp_path / "test_child.py").write_text(source)
    child = {k: v for k, v in os.environ.items() if k != "CI"} | env
    child["PYTHONPATH"] = str(REPO)
    if ci is not None:
        child["CI"] = ci
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rsf", "-p", "no:cacheprovider", "test_child.py"],
        cwd=tmp_path,
        env=child,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    return done.returncode, done.stdout + done.stderr


def test_in_ci_a_missing_component_fails_the_test_naming_it(tmp_path: Path) -> None:
    status, out = _run(tmp_path, NEEDS_A_COMPONENT, "true")
    assert status == 1, out
    assert "1 failed" in out and "Frobnicator could not start: frobd is not installed" in out
    assert "CI must provide Frobnicator" in out


def test_elsewhere_a_missing_component_skips_the_test_saying_why(tmp_path: Path) -> None:
    for ci in (None, "false", ""):
        status, out = _run(tmp_path, NEEDS_A_COMPONENT, ci)
        assert status == 0, (ci, out)
        assert "1 skipped" in out and "Frobnicator could not start: frobd is not installed" in out


def test_postgres_made_absent_fails_in_ci_and_skips_elsewhere(tmp_path: Path) -> None:
    absent = {"PADDLEOCR_FLEET_PG_BIN": str(tmp_path / "no-postgres-here")}
    status, out = _run(tmp_path, NEEDS_POSTGRES, "true", **absent)
    assert status == 1 and "1 failed" in out, out
    assert f"PostgreSQL could not start: no pg_ctl in {tmp_path / 'no-postgres-here'}" in out
    status, out = _run(tmp_path, NEEDS_POSTGRES, None, **absent)
    assert status == 0 and "1 skipped" in out and "PostgreSQL could not start" in out, out
