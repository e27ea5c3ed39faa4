"""The README's main job, `bash scripts/up.sh`, run for real: the demo stack, twice, then down.

It runs in a copy of the checkout (what git tracks, plus untracked files it does not ignore), so
its `.venv`, `.pulumi-state/` and `Pulumi.demo.yaml` are its own, as on a fresh machine. The
demo's container names are fixed, so a demo deployed from another checkout is taken away first.
"""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

from tests.e2e.pulumi_stack import REPO
from tests.pulumi_sets import find_cli
from tests.shell_scripts import run_script

DEMO_LABEL = "paddleocr-fleet.stack=paddleocr-fleet/demo"
BLOCKER_IMAGE = "paddleocr-fleet/test-blocker:empty"
DEMO_VLLM_NAME = "vllm-sim-paddleocr-9025-sim-0"


def _checkout_copy(target: Path) -> Path:
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        capture_output=True,
        check=True,
    ).stdout.split(b"\0")
    for name in filter(None, (n.decode() for n in listed)):
        source = REPO / name
        if source.is_file():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / name)
    return target


def _docker(*args: str, stdin: bytes | None = None) -> str:
    done = subprocess.run(["docker", *args], input=stdin, capture_output=True, check=True)
    return done.stdout.decode()


def _demo_containers() -> list[str]:
    return _docker("ps", "-aq", "--filter", f"label={DEMO_LABEL}").split()


def _remove_demo_containers() -> None:
    ids = _demo_containers()
    if ids:
        _docker("rm", "-f", *ids)


def _hold_a_demo_name() -> None:
    """A created (never started) container of an empty image, holding the demo vLLM's name."""
    empty = io.BytesIO()
    tarfile.open(fileobj=empty, mode="w").close()
    _docker("import", "-", BLOCKER_IMAGE, stdin=empty.getvalue())
    _docker("create", "--name", DEMO_VLLM_NAME, "--label", DEMO_LABEL, BLOCKER_IMAGE, "/none")


def _run(
    checkout: Path, env: dict[str, str], timeout: float, script: str = "up.sh"
) -> subprocess.CompletedProcess[str]:
    return run_script(checkout / "scripts" / script, env, timeout=timeout)


@pytest.mark.docker
def test_the_main_job_deploys_the_demo_serves_a_document_and_a_second_run_changes_nothing(
    docker_engine, tmp_path
):
    if find_cli() is None:
        pytest.fail("no Pulumi CLI: scripts/test.sh installs one (scripts/install-pulumi.sh)")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PULUMI_", "VIRTUAL_ENV"))}
    checkout = _checkout_copy(tmp_path / "checkout")
    _remove_demo_containers()
    try:
        _hold_a_demo_name()
        blocked = _run(checkout, env, timeout=1800)
        assert blocked.returncode == 1, blocked.stdout[-4000:] + blocked.stderr[-4000:]
        assert f"{DEMO_VLLM_NAME} on host local" in blocked.stderr, blocked.stderr[-4000:]
        assert f"docker rm -f {DEMO_VLLM_NAME}" in blocked.stderr
        assert "pulumi:pulumi:Stack" not in blocked.stdout  # no update began
        _docker("rm", "-f", DEMO_VLLM_NAME)

        first = _run(checkout, env, timeout=1800)
        assert first.returncode == 0, first.stdout[-4000:] + first.stderr[-4000:]
        assert "sim-vllm:" in first.stdout  # the sample document's markdown
        assert "http://127.0.0.1:9120" in first.stdout  # the upstream list
        second = _run(checkout, env, timeout=900)
        assert second.returncode == 0, second.stdout[-4000:] + second.stderr[-4000:]
        assert "unchanged" in second.stdout and "created" not in second.stdout
        # A quiet CLI, whichever plugin set up.sh installed: no warning, no note to act on.
        preview = _pulumi(checkout, env, "preview", "--stack", "demo", "--expect-no-changes")
        assert preview.returncode == 0, preview.stdout[-4000:] + preview.stderr[-4000:]
        for said in (second.stdout, preview.stdout + preview.stderr):
            assert "warning" not in said.lower() and "Building your image" not in said, said

        down = _run(checkout, env, timeout=900, script="down.sh")
        assert down.returncode == 0, down.stdout[-4000:] + down.stderr[-4000:]
        assert _demo_containers() == []
    finally:
        subprocess.run(["docker", "rm", "-f", DEMO_VLLM_NAME], capture_output=True, check=False)
        subprocess.run(["docker", "rmi", BLOCKER_IMAGE], capture_output=True, check=False)
        _pulumi(checkout, env, "destroy", "--stack", "demo", "--yes")


def _pulumi(checkout: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """`pulumi ARGS` on the checkout's demo stack as up.sh left it (its toolchain, its state)."""
    installed = subprocess.run(
        ["bash", str(checkout / "scripts" / "install-pulumi.sh")],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert installed.returncode == 0, installed.stderr[-3000:]
    bin_dir = installed.stdout.split()[-1]
    return subprocess.run(
        [f"{bin_dir}/pulumi", *args, "--non-interactive"],
        cwd=checkout,
        env={
            **env,
            "PATH": f"{bin_dir}:{env['PATH']}",
            "PULUMI_BACKEND_URL": (checkout / ".pulumi-state").as_uri() + "?metadata=skip",
            "PULUMI_CONFIG_PASSPHRASE": "",
            "PULUMI_SKIP_UPDATE_CHECK": "true",
        },
        capture_output=True,
        text=True,
        check=False,
        timeout=900,
    )
