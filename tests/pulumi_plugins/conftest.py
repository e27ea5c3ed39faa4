"""An isolated real Pulumi CLI for the plugin tests: `pulumi_env`, one per test module.

It has a file backend and a PULUMI_HOME of its own, never downloads plugins, and puts `bin_dir`
first on PATH, holding a `pulumi-language-python` wrapper that runs our language host. Provider
tests put their wrappers there and install them::

    wrapper = pulumi_env.wrapper("pulumi-resource-docker", "-m", "pulumi_plugins.docker")
    pulumi_env.run(["plugin", "install", "resource", "docker", "5.1.0", "--file", str(wrapper)])
    project = pulumi_env.project("demo", "import pulumi\\npulumi.export('x', 1)\\n")
    pulumi_env.run(["stack", "init", "dev"], cwd=project)

Projects of one module share the backend: give each its own name. The CLI is the default
set's (tests/pulumi_sets.py); PATH keeps no other folder holding a resource plugin, so the tests
run our plugins and no other. They skip, saying why, when there is no CLI (fail under CI=true).
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.pulumi_sets import CLI_VARIABLE, clean_path, find_cli

REPO = Path(__file__).resolve().parents[2]
EXEC_SCRIPT = "pulumi-language-python-exec"
VIRTUALENV = Path(sys.prefix)
"""The virtualenv running the tests (the repo's .venv): it has the Pulumi SDK and the providers'."""


def _version_key(path: Path) -> tuple[int, ...]:
    match = re.search(r"@v(\d+)\.(\d+)\.(\d+)", str(path))
    return tuple(int(part) for part in match.groups()) if match else ()


def find_exec_script() -> Path | None:
    """The SDK's program runner: beside our plugin set's CLI (scripts/install-pulumi.sh puts it
    there), or else the newest in Go's module cache."""
    for cli in (find_cli("ours"), find_cli()):
        if cli is not None and (cli.parent / EXEC_SCRIPT).is_file():
            return cli.parent / EXEC_SCRIPT
    cache = Path(os.environ.get("GOMODCACHE") or Path.home() / "go" / "pkg" / "mod")
    found = cache.glob(f"github.com/pulumi/pulumi/sdk/v3@v*/python/cmd/{EXEC_SCRIPT}")
    return max(found, key=_version_key, default=None)


@dataclass
class PulumiEnv:
    root: Path
    cli: Path
    bin_dir: Path
    env: dict[str, str]

    def run(
        self, args: Sequence[str], cwd: Path | None = None, timeout: float = 300
    ) -> subprocess.CompletedProcess[str]:
        """`pulumi ARGS` in `cwd`, output captured as text; never raises on a failed command."""
        return subprocess.run(
            [str(self.cli), *args],
            cwd=cwd or self.root,
            env=self.env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def start(self, args: Sequence[str], cwd: Path, **popen: Any) -> subprocess.Popen[str]:
        """`pulumi ARGS` in `cwd` started, not waited for: for the tests that interrupt or kill
        it mid-run. `popen` (stdout, start_new_session, ...) goes to :class:`subprocess.Popen`."""
        return subprocess.Popen(
            [str(self.cli), *args],
            cwd=cwd,
            env=self.env,
            stdin=subprocess.DEVNULL,
            text=True,
            **popen,
        )

    def wrapper(self, name: str, *python_args: str) -> Path:
        """An executable `bin_dir/NAME` running this Python with `python_args` and the engine's."""
        script = self.bin_dir / name
        command = shlex.join([sys.executable, *python_args])
        repo = shlex.quote(str(REPO))
        script.write_text(f'#!/bin/sh\nPYTHONPATH={repo} exec {command} "$@"\n')
        script.chmod(0o755)
        return script

    def install_plugin(self, plugin: str, version: str) -> None:
        """Our resource plugin `plugin` (pulumi_plugins.PLUGIN of this checkout) installed as
        that version in this PULUMI_HOME, its wrapper kept off PATH (a plugin found on PATH
        would be used, with a warning, instead of the installed one)."""
        wrapper = self.root / "providers" / f"pulumi-resource-{plugin}"
        wrapper.parent.mkdir(exist_ok=True)
        python = shlex.join([sys.executable, "-m", f"pulumi_plugins.{plugin}"])
        wrapper.write_text(f'#!/bin/sh\nPYTHONPATH={shlex.quote(str(REPO))} exec {python} "$@"\n')
        wrapper.chmod(0o755)
        install = ["plugin", "install", "resource", plugin, version, "--file", str(wrapper)]
        result = self.run(install)
        assert result.returncode == 0, result.stderr

    def project(
        self, name: str, program: str, virtualenv: Path | str = VIRTUALENV, **files: str
    ) -> Path:
        """A Python project `root/projects/NAME` with `program` as __main__.py, plus `files`."""
        directory = self.root / "projects" / name
        directory.mkdir(parents=True)
        (directory / "Pulumi.yaml").write_text(
            f"name: {name}\n"
            "runtime:\n"
            "  name: python\n"
            "  options:\n"
            "    toolchain: pip\n"
            f"    virtualenv: {virtualenv}\n"
        )
        (directory / "__main__.py").write_text(program)
        for filename, text in files.items():
            (directory / filename).write_text(text)
        return directory


def _isolated_env(root: Path, bin_dir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PULUMI_")}
    env.update(
        PATH=clean_path(bin_dir, env.get("PATH", "")),
        PULUMI_HOME=str(root / "home"),
        PULUMI_BACKEND_URL=(root / "state").as_uri(),
        PULUMI_CONFIG_PASSPHRASE="",
        PULUMI_SKIP_UPDATE_CHECK="true",
        PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION="true",
    )
    return env


def _cli_beside_wrappers(cli: Path, bin_dir: Path) -> Path:
    """A hard link of the CLI in `bin_dir`, where it looks first for its bundled language
    plugins (a language host found only on PATH gets a warning in every command's output)."""
    linked = bin_dir / cli.name
    try:
        os.link(cli, linked)
    except OSError:
        return cli
    return linked


@pytest.fixture(scope="module")
def pulumi_env(tmp_path_factory: pytest.TempPathFactory) -> PulumiEnv:
    cli = find_cli()
    if cli is None:
        pytest.skip(f"no Pulumi CLI: ${CLI_VARIABLE} is unset and no `pulumi` is on PATH")
    exec_script = find_exec_script()
    if exec_script is None:
        pytest.skip(f"no {EXEC_SCRIPT} beside pulumi_plugins/langhost.py or in Go's module cache")
    root = tmp_path_factory.mktemp("pulumi")
    bin_dir = root / "bin"
    bin_dir.mkdir()
    (root / "state").mkdir()
    pulumi = PulumiEnv(
        root, _cli_beside_wrappers(cli, bin_dir), bin_dir, _isolated_env(root, bin_dir)
    )
    pulumi.wrapper(
        "pulumi-language-python",
        "-m",
        "pulumi_plugins.langhost",
        "--exec-script",
        str(exec_script),
    )
    return pulumi
