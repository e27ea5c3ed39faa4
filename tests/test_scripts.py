"""The toolchain installer, run for real (the main job is in tests/e2e/test_main_job.py)."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest

from tests.pulumi_harness import REPO
from tests.pulumi_sets import find_cli
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


def _prefix_with_cli(tmp_path: Path) -> Path:
    """An install prefix whose CLI is already built (a link to the installed one)."""
    cli = find_cli()
    if cli is None:
        pytest.fail("no Pulumi CLI: scripts/test.sh installs one (scripts/install-pulumi.sh)")
    target = tmp_path / "prefix" / "cli-v3.274.1" / "pulumi"
    target.parent.mkdir(parents=True)
    try:
        os.link(cli.resolve(), target)
    except OSError:
        target.symlink_to(cli.resolve())
    return target.parent.parent


def _official_folder(tmp_path: Path) -> Path:
    """A folder shaped like ../shared/official-plugins, of small stand-in executables."""
    folder = tmp_path / "official-plugins"
    folder.mkdir()
    for name in (
        "pulumi-language-python",
        "pulumi-language-python-exec",
        "pulumi-resource-docker",
        "pulumi-resource-command",
    ):
        _fake(folder, name, f"# stand-in for the official {name}\nexit 0\n")
    sums = subprocess.run(
        "sha256sum pulumi-*", shell=True, cwd=folder, capture_output=True, text=True, check=True
    )
    (folder / "SHA256SUMS").write_text(sums.stdout)
    return folder


def test_install_takes_the_official_plugins_checked_into_the_plugin_cache_never_on_path(
    tmp_path,
):
    prefix, official = _prefix_with_cli(tmp_path), _official_folder(tmp_path)
    home = tmp_path / "home"
    env = {
        **os.environ,
        "PULUMI_HOME": str(home),
        "PADDLEOCR_FLEET_OFFICIAL_PLUGINS": str(official),
    }
    result = run_script(INSTALL, env, "--prefix", str(prefix))
    assert result.returncode == 0, result.stderr
    bin_dir = Path(result.stdout.strip().splitlines()[-1])
    assert bin_dir == prefix / "official" / "bin"
    assert "plugin set: official" in result.stderr
    assert sorted(p.name for p in bin_dir.iterdir()) == [
        "pulumi",
        "pulumi-language-python",
        "pulumi-language-python-exec",
    ]
    for name, version in (("docker", "5.1.0"), ("command", "1.2.1")):
        cached = home / "plugins" / f"resource-{name}-v{version}" / f"pulumi-resource-{name}"
        assert cached.read_bytes() == (official / f"pulumi-resource-{name}").read_bytes()

    which = run_script(INSTALL, {**env, "PATH": f"{bin_dir}:{env['PATH']}"}, "--which")
    assert which.returncode == 0, which.stderr
    lines = which.stdout.splitlines()
    assert lines[1].endswith("pulumi-language-python: official"), lines
    assert [line.rsplit(": ", 1)[-1] for line in lines[2:]] == ["official", "official"], lines


def test_install_refuses_official_plugins_that_do_not_match_their_checksums(tmp_path):
    prefix, official = _prefix_with_cli(tmp_path), _official_folder(tmp_path)
    with (official / "pulumi-resource-docker").open("a") as plugin:
        plugin.write("# changed\n")
    env = {
        **os.environ,
        "PULUMI_HOME": str(tmp_path / "home"),
        "PADDLEOCR_FLEET_OFFICIAL_PLUGINS": str(official),
    }
    result = run_script(INSTALL, env, "--prefix", str(prefix))
    assert result.returncode == 1
    assert "do not match their SHA256SUMS" in result.stderr
    assert not (tmp_path / "home" / "plugins").exists()


def test_install_names_a_plugin_set_it_does_not_know(tmp_path):
    result = run_script(INSTALL, dict(os.environ), "--plugins", "theirs")
    assert result.returncode == 2
    assert "--plugins must be auto, official or ours, not 'theirs'" in result.stderr
