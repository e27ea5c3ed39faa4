"""The Python language host (pulumi_plugins/langhost.py), in-process and under the real CLI."""

from __future__ import annotations

import importlib.metadata
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from google.protobuf import struct_pb2
from pulumi.runtime.proto import language_pb2

import pulumi_plugins.docker as docker_plugin
from pulumi_plugins import langhost
from tests.pulumi_plugins.conftest import REPO, PulumiEnv

PROGRAM = """\
import sys
import pulumi

config = pulumi.Config()
print("hello from the program")
print("and from its stderr", file=sys.stderr)
pulumi.export("greeting", f"hello {config.require('name')}")
pulumi.export("token", config.require_secret("token"))
"""


def ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, f"{result.args} exited {result.returncode}:\n{output(result)}"
    return result.stdout


def output(result: subprocess.CompletedProcess[str]) -> str:
    return f"{result.stdout}\n{result.stderr}"


def program_info(root: Path, **options: str) -> language_pb2.ProgramInfo:
    struct = struct_pb2.Struct()
    struct.update(options)
    return language_pb2.ProgramInfo(
        root_directory=str(root), program_directory=str(root), entry_point=".", options=struct
    )


def test_the_engine_flags_and_address_are_told_apart_from_ours() -> None:
    args = langhost.parse_args(
        ["--exec-script", "/opt/exec", "-root=/p", "-tracing=x:1", "127.0.0.1:4000"]
    )
    assert args == langhost.HostArgs(Path("/opt/exec"), "127.0.0.1:4000")


def test_required_packages_are_the_virtualenvs_resource_plugins(tmp_path: Path) -> None:
    host = langhost.PythonLanguageHost(langhost.parse_args(["127.0.0.1:1"]))
    request = language_pb2.GetRequiredPackagesRequest(
        info=program_info(tmp_path, toolchain="pip", virtualenv=sys.prefix)
    )
    packages = host.GetRequiredPackages(request, context=None).packages  # type: ignore[arg-type]
    found = {(p.name, p.kind, p.version) for p in packages}
    expected = {
        ("docker", "resource", f"v{docker_plugin.VERSION}"),
        ("command", "resource", "v1.2.1"),
    }
    assert expected <= found


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        (0, language_pb2.RunResponse()),
        (32, language_pb2.RunResponse(bail=True)),
        (1, language_pb2.RunResponse(error="Program exited with non-zero exit code: 1")),
        (-9, language_pb2.RunResponse(error="Program was killed by signal SIGKILL")),
    ],
)
def test_exit_codes_become_run_responses(code: int, expected: language_pb2.RunResponse) -> None:
    assert langhost.exit_response(code) == expected


def test_a_stack_goes_up_and_down(pulumi_env: PulumiEnv) -> None:
    project = pulumi_env.project("lifecycle", PROGRAM)
    run = pulumi_env.run
    ok(run(["stack", "init", "dev"], cwd=project))
    ok(run(["config", "set", "name", "world"], cwd=project))
    ok(run(["config", "set", "--secret", "token", "s3cr3t"], cwd=project))
    assert "[secret]" in ok(run(["config"], cwd=project))

    preview = run(["preview"], cwd=project)
    shown = ok(preview)
    assert "hello from the program" in shown
    assert "and from its stderr" in shown
    assert 'greeting: "hello world"' in shown
    assert "pulumi-language-python from $PATH" not in output(preview)
    assert "Traceback" not in output(preview)

    ok(run(["up", "--yes"], cwd=project))
    outputs = json.loads(ok(run(["stack", "output", "--json", "--show-secrets"], cwd=project)))
    assert outputs == {"greeting": "hello world", "token": "s3cr3t"}

    ok(run(["destroy", "--yes"], cwd=project))
    assert json.loads(ok(run(["stack", "output", "--json"], cwd=project))) == {}


@pytest.mark.parametrize(
    ("name", "program", "shown"),
    [
        (
            "raises",
            "import pulumi\nraise ValueError('boom from the program')\n",
            ["Program failed with an unhandled exception", "ValueError: boom from the program"],
        ),
        (
            "misconfigured",
            "import pulumi\npulumi.Config().require('missing')\n",
            [
                "Missing required configuration variable 'misconfigured:missing'",
                "Program exited with non-zero exit code: 1",
            ],
        ),
    ],
    ids=["raises", "misconfigured"],
)
def test_a_failing_program_fails_the_update_and_shows_why(
    pulumi_env: PulumiEnv, name: str, program: str, shown: list[str]
) -> None:
    project = pulumi_env.project(name, program)
    ok(pulumi_env.run(["stack", "init", "dev"], cwd=project))
    result = pulumi_env.run(["up", "--yes"], cwd=project)
    assert result.returncode != 0
    for text in shown:
        assert text in output(result)


def test_install_creates_the_virtualenv_and_about_describes_it(pulumi_env: PulumiEnv) -> None:
    # The official steps: the virtualenv, pip/setuptools/wheel from the index, requirements.txt.
    project = pulumi_env.project(
        "installed",
        "import pulumi\n",
        virtualenv="venv",
        **{"requirements.txt": "--no-index\npip\n"},
    )
    shown = ok(pulumi_env.run(["install"], cwd=project))
    steps = [
        "Installing dependencies...",
        "Creating virtual environment...",
        "Finished creating virtual environment",
        "Updating pip, setuptools, and wheel in virtual environment...",
        "Finished updating",
        "Installing dependencies in virtual environment...",
        "Requirement already satisfied: pip",
        "Finished installing dependencies",
    ]
    at = 0
    for step in steps:  # in this order
        at = shown.find(step, at)
        assert at >= 0, (step, shown)

    about = ok(pulumi_env.run(["about"], cwd=project))
    assert f"executable='{project / 'venv' / 'bin' / 'python'}'" in about
    assert "toolchain='pip'" in about


def test_the_first_preview_creates_a_missing_virtualenv(pulumi_env: PulumiEnv) -> None:
    """As the official host: no `pulumi install` needed; the venv and requirements.txt's
    packages are installed when the engine first asks for the program's packages."""
    sdk = f"pulumi=={importlib.metadata.version('pulumi')}"
    project = pulumi_env.project(
        "uninstalled",
        "import pulumi\npulumi.export('made', 'here')\n",
        virtualenv="venv",
        **{"requirements.txt": f"{sdk}\n"},
    )
    ok(pulumi_env.run(["stack", "init", "dev"], cwd=project))
    shown = ok(pulumi_env.run(["preview"], cwd=project, timeout=600))
    assert 'made: "here"' in shown
    assert (project / "venv" / "bin" / "python").exists()


def test_a_virtualenv_that_is_another_directory_is_not_touched(pulumi_env: PulumiEnv) -> None:
    project = pulumi_env.project("not-a-venv", "import pulumi\n", virtualenv="venv")
    (project / "venv").mkdir()
    (project / "venv" / "notes.txt").write_text("mine\n")
    ok(pulumi_env.run(["stack", "init", "dev"], cwd=project))
    result = pulumi_env.run(["preview"], cwd=project)
    assert result.returncode != 0
    assert "Run `pulumi install`" in output(result)
    assert sorted(p.name for p in (project / "venv").iterdir()) == ["notes.txt"]


def test_the_fleet_project_previews_from_a_checkout_without_its_venv(
    pulumi_env: PulumiEnv, tmp_path: Path
) -> None:
    """The README's operator steps with no `pulumi install`: the project as checked out (its own
    Pulumi.yaml, `virtualenv: .venv`, requirements.txt `-e .`), and the first preview makes .venv
    (slow: the project's packages come from the package index, or pip's cache)."""
    project = tmp_path / "paddleocr-fleet"
    project.mkdir()
    for name in ("Pulumi.yaml", "__main__.py", "requirements.txt", "pyproject.toml"):
        shutil.copy2(REPO / name, project / name)
    for name in ("components", "config", "gateway", "fleetctl", "pulumi_plugins"):
        shutil.copytree(REPO / name, project / name, ignore=shutil.ignore_patterns("__pycache__"))
    pulumi_env.install_plugin("docker", docker_plugin.VERSION)
    pulumi_env.install_plugin("command", "1.2.1")
    ok(pulumi_env.run(["stack", "init", "dev"], cwd=project))
    config = {"accelerator": "sim", "cards": "1", "allowOpenAccess": "true"}
    for key, value in config.items():
        ok(pulumi_env.run(["config", "set", key, value], cwd=project))
    preview = pulumi_env.run(["preview"], cwd=project, timeout=1200)
    ok(preview)
    assert (project / ".venv" / "bin" / "python").exists()
    assert "Traceback" not in output(preview)
