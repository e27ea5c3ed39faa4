"""The README's main job, `bash scripts/up.sh`, run for real: the demo stack, twice.

It runs in a copy of the checkout (what git tracks, plus untracked files it does not ignore), so
its `.venv`, `.pulumi-state/` and `Pulumi.demo.yaml` are its own, as on a fresh machine.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.e2e.pulumi_stack import REPO, find_cli


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


def _run(checkout: Path, env: dict[str, str], timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(checkout / "scripts" / "up.sh")],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        stdin=subprocess.DEVNULL,
    )


@pytest.mark.docker
def test_the_main_job_deploys_the_demo_serves_a_document_and_a_second_run_changes_nothing(
    docker_engine, tmp_path
):
    if find_cli() is None:
        pytest.fail("no Pulumi CLI: scripts/test.sh installs one (scripts/install-pulumi.sh)")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PULUMI_", "VIRTUAL_ENV"))}
    checkout = _checkout_copy(tmp_path / "checkout")
    backend = checkout / ".pulumi-state"
    try:
        first = _run(checkout, env, timeout=1800)
        assert first.returncode == 0, first.stdout[-4000:] + first.stderr[-4000:]
        assert "sim-vllm:" in first.stdout  # the sample document's markdown
        assert "http://127.0.0.1:9120" in first.stdout  # the upstream list
        second = _run(checkout, env, timeout=900)
        assert second.returncode == 0, second.stdout[-4000:] + second.stderr[-4000:]
        assert "unchanged" in second.stdout and "created" not in second.stdout
    finally:
        pulumi = find_cli()
        subprocess.run(
            [str(pulumi), "destroy", "--stack", "demo", "--yes", "--non-interactive"],
            cwd=checkout,
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
