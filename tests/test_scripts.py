"""The README's main job and the toolchain installer, run for real."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest

from tests.e2e.pulumi_stack import find_cli
from tests.pulumi_harness import REPO

UP = REPO / "scripts" / "up.sh"
INSTALL = REPO / "scripts" / "install-pulumi.sh"


def _fake(bin_dir: Path, name: str, body: str) -> None:
    path = bin_dir / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


def _run(script: Path, env: dict[str, str], *args: str, timeout: float = 300):
    return subprocess.run(
        ["bash", str(script), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        stdin=subprocess.DEVNULL,
    )


def test_install_uses_a_complete_official_installation_as_it_is(tmp_path):
    bin_dir = tmp_path / "official"
    bin_dir.mkdir()
    plugins = (
        '[{"kind": "resource", "name": "docker", "version": "5.2.0"},'
        ' {"kind": "resource", "name": "command", "version": "1.2.1"}]'
    )
    _fake(bin_dir, "pulumi", f"case \"$*\" in 'plugin ls --json') echo '{plugins}';; esac\n")
    _fake(bin_dir, "pulumi-language-python", "exit 0\n")
    env = {**os.environ, "PATH": f"{bin_dir}:/usr/bin:/bin"}
    result = _run(INSTALL, env, "--prefix", str(tmp_path / "prefix"))
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == str(bin_dir)
    assert not (tmp_path / "prefix").exists()


def test_install_without_go_and_no_cached_cli_names_what_is_missing(tmp_path):
    env = {**os.environ, "PATH": "/usr/bin:/bin"}  # no go, no pulumi
    result = _run(INSTALL, env, "--prefix", str(tmp_path / "prefix"))
    assert result.returncode == 1
    assert "no Go toolchain on PATH" in result.stderr


@pytest.mark.docker
def test_the_main_job_deploys_the_demo_serves_a_document_and_a_second_run_changes_nothing(
    docker_engine,
):
    if find_cli() is None:
        pytest.fail("no Pulumi CLI: scripts/test.sh installs one (scripts/install-pulumi.sh)")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PULUMI_")}
    backend = REPO / ".pulumi-state"
    try:
        first = _run(UP, env, timeout=1800)
        assert first.returncode == 0, first.stdout[-4000:] + first.stderr[-4000:]
        assert "sim-vllm:" in first.stdout  # the sample document's markdown
        assert "http://127.0.0.1:9120" in first.stdout  # the upstream list
        second = _run(UP, env, timeout=900)
        assert second.returncode == 0, second.stdout[-4000:] + second.stderr[-4000:]
        assert "unchanged" in second.stdout and "created" not in second.stdout
    finally:
        pulumi = find_cli()
        subprocess.run(
            [str(pulumi), "destroy", "--stack", "demo", "--yes", "--non-interactive"],
            cwd=REPO,
            env={
                **env,
                "PATH": f"{pulumi.parent}:{env['PATH']}",
                "PULUMI_BACKEND_URL": backend.as_uri(),
                "PULUMI_CONFIG_PASSPHRASE": "",
                "PULUMI_SKIP_UPDATE_CHECK": "true",
            },
            capture_output=True,
            check=False,
            timeout=900,
        )
