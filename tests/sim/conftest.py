"""Fixtures for the simulator tests (helpers live in tests/sim/helpers.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from .helpers import Processes, paddlex_python_or_skip


@pytest.fixture(scope="session")
def px_python() -> str:
    """Interpreter for `python -m sim.paddlex`; skip (fail under CI) when PaddleX is missing."""
    return paddlex_python_or_skip(
        "the PaddleX simulator needs `pip install -r sim/paddlex/requirements.txt` in this "
        "venv, or PADDLEX_SIM_PYTHON=<python with it>"
    )


@pytest.fixture
def procs(tmp_path: Path) -> Iterator[Processes]:
    """Per-test process launcher; everything it started is stopped afterwards."""
    launcher = Processes(tmp_path)
    yield launcher
    launcher.stop_all()


@pytest.fixture
def write_yaml(tmp_path: Path) -> Callable[[dict[str, Any], str], Path]:
    """Write a pipeline config to tmp_path/NAME and return its path."""

    def _write(config: dict[str, Any], name: str = "pipeline_config_vllm.yaml") -> Path:
        path = tmp_path / name
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        return path

    return _write
