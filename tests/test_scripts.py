"""The toolchain installer, run for real (the main job is in tests/e2e/test_main_job.py)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from tests.pulumi_harness import REPO
from tests.shell_scripts import run_script

INSTALL = REPO / "scripts" / "install-pulumi.sh"


def _fake(bin_dir: Path, name: str, body: str) -> None:
    path = bin_dir / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


def test_install_uses_a_complete_official_installation_as_it_is(tmp_path):
    bin_dir = tmp_path / "official"
    bin_dir.mkdir()
    plugins = (
        '[{"kind": "resource", "name": "docker", "version": "5.1.0"},'
        ' {"kind": "resource", "name": "command", "version": "1.2.1"}]'
    )
    _fake(bin_dir, "pulumi", f"case \"$*\" in 'plugin ls --json') echo '{plugins}';; esac\n")
    _fake(bin_dir, "pulumi-language-python", "exit 0\n")
    env = {**os.environ, "PATH": f"{bin_dir}:/usr/bin:/bin"}
    result = run_script(INSTALL, env, "--prefix", str(tmp_path / "prefix"))
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == str(bin_dir)
    assert not (tmp_path / "prefix").exists()


def test_install_without_go_and_no_cached_cli_names_what_is_missing(tmp_path):
    env = {**os.environ, "PATH": "/usr/bin:/bin"}  # no go, no pulumi
    result = run_script(INSTALL, env, "--prefix", str(tmp_path / "prefix"))
    assert result.returncode == 1
    assert "no Go toolchain on PATH" in result.stderr
