"""The README's main-job command, run for real with fake `pulumi` and `docker` on PATH."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest

from tests.pulumi_harness import REPO

UP = REPO / "scripts" / "up.sh"


def _fake(bin_dir: Path, name: str, body: str) -> None:
    path = bin_dir / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


@pytest.fixture
def bin_dir(tmp_path: Path) -> Path:
    path = tmp_path / "bin"
    path.mkdir()
    return path


def _run_up(bin_dir: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PATH": f"{bin_dir}:/usr/bin:/bin"}
    env.pop("PULUMI_BACKEND_URL", None)
    return subprocess.run(
        ["bash", str(UP), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_without_the_pulumi_cli_it_says_so_and_prints_the_plan(bin_dir):
    _fake(bin_dir, "docker", "exit 0\n")
    result = _run_up(bin_dir)
    assert result.returncode == 0, result.stderr
    assert "not deploying: this machine lacks the Pulumi CLI" in result.stdout
    assert "host local (ascend, 127.0.0.1): 8 cards, 16 vLLM, 48 PaddleX" in result.stdout


def test_without_a_docker_engine_it_says_so_and_prints_the_plan(bin_dir):
    _fake(bin_dir, "pulumi", "exit 0\n")
    _fake(bin_dir, "docker", "echo 'Cannot connect to the Docker daemon' >&2; exit 1\n")
    result = _run_up(bin_dir)
    assert result.returncode == 0, result.stderr
    assert "lacks a reachable Docker engine" in result.stdout
    assert "-> 48 upstreams" in result.stdout


def test_with_both_it_runs_pulumi_up_on_a_local_file_backend(bin_dir, tmp_path):
    calls = tmp_path / "pulumi.calls"
    _fake(bin_dir, "docker", "exit 0\n")
    _fake(
        bin_dir,
        "pulumi",
        f"printf '%s\\n' \"$PULUMI_BACKEND_URL|$*\" >> {calls}\n"
        'case "$*" in "stack output"*) echo http://127.0.0.1:9101 ;; esac\n',
    )
    result = _run_up(bin_dir, "prod")
    assert result.returncode == 0, result.stderr
    backend = f"file://{REPO}/.pulumi-state"
    assert calls.read_text().splitlines() == [
        f"{backend}|stack select --create prod --non-interactive",
        f"{backend}|up --yes --non-interactive --stack prod",
        f"{backend}|stack output --stack prod gateway_url",
    ]
    assert result.stdout.strip().endswith("http://127.0.0.1:9101")
