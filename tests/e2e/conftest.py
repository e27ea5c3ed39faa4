"""Docker engine fixtures for the end-to-end tests.

A test that needs Docker skips, saying why, only where no engine can start; in CI (CI=true) a
missing engine or image is a failure, not a skip (:func:`tests.real_components.unavailable`).
"""

from __future__ import annotations

import subprocess

import pytest

from tests.real_components import unavailable

SIM_IMAGES = (
    "paddleocr-fleet/vllm-sim:latest",
    "paddleocr-fleet/paddlex-sim:latest",
    "paddleocr-fleet/gateway:latest",
)


def docker_available(env: dict[str, str] | None = None) -> str | None:
    """None when an engine answers and the sim images exist, else the reason."""
    try:
        info = subprocess.run(
            ["docker", "info", "--format", "{{.ServerVersion}}"],
            env=env,
            capture_output=True,
            text=True,
            timeout=20,
            check=False,
        )
    except (FileNotFoundError, subprocess.TimeoutExpired) as exc:
        return f"no Docker engine: {exc}"
    if info.returncode != 0:
        return f"no Docker engine answers ({info.stderr.strip()[:200]}); run .ci/docker-up.sh"
    for image in SIM_IMAGES:
        found = subprocess.run(
            ["docker", "image", "inspect", image], env=env, capture_output=True, check=False
        )
        if found.returncode != 0:
            return f"image {image} missing; run .ci/build-images.sh"
    return None


@pytest.fixture(scope="session")
def docker_engine() -> None:
    reason = docker_available()
    if reason:
        unavailable("Docker", f"{reason} (.ci/run starts the engine and builds the images)")
