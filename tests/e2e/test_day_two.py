"""Day two under the real Pulumi engine on a real Docker engine, in sim mode (issue 26).

One small stack (1 card, 1 vLLM, 1 PaddleX, the gateway without its keeper), in file order:
up; the host's endpoint spelled differently (an in-place update of the PaddleX start command,
which must not start a second service and must leave one the stop command can end); a stopped
vLLM started again by `pulumi refresh` + `pulumi up`, which must end only once the model is
loaded and the PaddleX service (killed meanwhile) serves again; a removed PaddleX container,
which `fleetctl status` names with the repair and a plain `pulumi up` (the project refreshes
first) creates again. The vLLM simulator loads for VLLM_LOAD_S here, so an `up` that does not
wait for it returns while the model is still loading.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.e2e.gateway_view import wait_for_every_worker
from tests.e2e.pulumi_stack import REPO, changed
from tests.e2e.sim_stack import SimStack, sim_stack
from tests.e2e.test_fleet_on_docker import docker, labelled_containers

pytestmark = pytest.mark.docker

ADMIN_TOKEN = "day-two-admin-" + os.urandom(12).hex()
ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
SOCKET = "unix:///var/run/docker.sock"
SOCKET_RESPELLED = "unix:///var/run/../run/docker.sock"
VLLM_LOAD_S = 12


@pytest.fixture(scope="module")
def fleet(docker_engine):
    config = {
        "paddlexPerVllm": "1",
        "dockerHost": SOCKET,
        "keeper": "false",
        "gateway": json.dumps({"health": {"interval_s": 1}}),
        "simVllmLoadSeconds": str(VLLM_LOAD_S),
        "vllmReadyTimeout": "120",
        "paddlexReadyTimeout": "120",
    }
    secrets = {"adminTokens": json.dumps({"ops": ADMIN_TOKEN})}
    with sim_stack("day-two", 15000, secrets, **config) as fleet:
        yield fleet


def services(container: str) -> list[int]:
    """Pids (in the container) of every `paddlex --serve` process running in it."""
    listing = "for d in /proc/[0-9]*; do echo \"${d#/proc/} $(tr '\\0' ' ' < $d/cmdline)\"; done"
    out = docker("exec", container, "sh", "-c", listing).stdout
    return [int(line.split()[0]) for line in out.splitlines() if "-m sim.paddlex --serve" in line]


def pid_file_names(fleet: SimStack, container: str) -> int:
    from components.render import pid_file

    paddlex = next(p for p in fleet.plan.paddlex if p.container_name == container)
    return int(docker("exec", container, "cat", pid_file(paddlex)).stdout.strip() or 0)


def healthy(url: str) -> bool:
    try:
        return httpx.get(url, timeout=3).status_code == 200
    except httpx.TransportError:
        return False


def gateway_sees_all_healthy(fleet: SimStack) -> None:
    wait_for_every_worker(
        fleet.plan.gateway.url,
        ADMIN,
        lambda states: set(states.values()) == {"healthy"},
        explain=lambda: gateway_logs(fleet),
    )


def _output(done: subprocess.CompletedProcess[str]) -> str:
    return done.stdout + done.stderr


def gateway_logs(fleet: SimStack, tail: int = 60) -> str:
    """The last lines of every container of this module's gateway: for a failure's message."""
    names = docker("ps", "-a", "--format", "{{.Names}}").stdout.split()
    return "\n".join(
        f"--- {name}\n" + _output(docker("logs", "--tail", str(tail), name))
        for name in names
        if name.startswith(fleet.gateway_name)
    )


def start_command_state(fleet: SimStack) -> dict:
    """The PaddleX start command's state (what a delete or an update runs)."""
    return next(
        r["outputs"]
        for r in fleet.stack.state()
        if r["type"] == "command:local:Command" and r["urn"].endswith("-paddlex-0-start")
    )


def test_up(fleet):
    fleet.stack.up()
    plan = fleet.plan
    assert healthy(f"{plan.paddlex[0].url}/health")
    assert [len(services(p.container_name)) for p in plan.paddlex] == [1]


def test_a_respelled_endpoint_leaves_one_service_that_the_stop_command_ends(fleet):
    before = labelled_containers(fleet.label)
    fleet.set(dockerHost=SOCKET_RESPELLED)
    steps = fleet.stack.up()
    assert labelled_containers(fleet.label) == before  # the same engine: nothing replaced
    assert changed(steps)["local-card-0-paddlex-0-start"] == {"update"}
    paddlex = fleet.plan.paddlex[0]
    name = paddlex.container_name
    # A second server would need its import and load time before failing on the held port.
    deadline = time.monotonic() + 12
    while time.monotonic() < deadline:
        running = services(name)
        assert len(running) == 1, f"{len(running)} services in {name}"
        time.sleep(0.5)
    assert pid_file_names(fleet, name) == running[0]
    assert healthy(f"{paddlex.url}/health")
    # What `pulumi destroy` or a replacement runs: the delete script of the state.
    state = start_command_state(fleet)
    env = {**os.environ, **state["environment"]}
    subprocess.run(["/bin/sh", "-c", state["delete"]], env=env, check=True, timeout=60)
    assert services(name) == [] and not healthy(f"{paddlex.url}/health")
    # Back to a served fleet for what follows: the start command as the state holds it.
    subprocess.run(["/bin/sh", "-c", state["create"]], env=env, check=True, timeout=60)
    deadline = time.monotonic() + 60
    while not healthy(f"{paddlex.url}/health") and time.monotonic() < deadline:
        time.sleep(0.5)
    assert len(services(name)) == 1


def test_a_stopped_vllm_is_started_and_waited_for_and_its_paddlex_service_restarted(fleet):
    plan = fleet.plan
    vllm, paddlex = plan.vllm[0], plan.paddlex[0]
    for pid in services(paddlex.container_name):  # its service died meanwhile
        docker("exec", paddlex.container_name, "kill", "-9", str(pid))
    assert docker("stop", vllm.container_name).returncode == 0
    fleet.stack.run(["refresh", *fleet.stack._stack_args(), "--yes", "--non-interactive"])
    started = time.monotonic()
    steps = fleet.stack.up()
    elapsed = time.monotonic() - started
    # As soon as `up` returns: the model is listed and the PaddleX service answers.
    models = httpx.get(f"{vllm.url}/v1/models", timeout=5)
    assert models.status_code == 200 and "PaddleOCR-VL" in models.text
    assert healthy(f"{paddlex.url}/health")
    assert elapsed >= VLLM_LOAD_S - 1, f"`up` took {elapsed:.1f} s: it did not wait for the load"
    touched = changed(steps)
    assert touched["local-card-0-vllm-0"] == {"update"}  # started, not replaced
    assert "create-replacement" in touched["local-card-0-vllm-0-ready"]  # waited for again
    assert touched["local-card-0-paddlex-0-start"] == {"update"}
    assert len(services(paddlex.container_name)) == 1
    gateway_sees_all_healthy(fleet)  # every worker's probes see it back


def fleetctl(fleet: SimStack, tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    outputs = tmp_path / "outputs.json"
    outputs.write_text(json.dumps(fleet.stack.outputs()))
    return subprocess.run(
        [sys.executable, "-m", "fleetctl", *args[:1], "--outputs", str(outputs), *args[1:]],
        cwd=REPO,
        env={**os.environ, "PADDLEOCR_FLEET_ADMIN_TOKEN": ADMIN_TOKEN},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_a_removed_paddlex_is_named_with_its_repair_and_a_plain_up_creates_it(fleet, tmp_path):
    paddlex = fleet.plan.paddlex[0]
    assert docker("rm", "-f", paddlex.container_name).returncode == 0
    status = fleetctl(fleet, tmp_path, "status")
    assert status.returncode == 1
    assert f"{paddlex.container_name} (missing)" in status.stdout, status.stdout
    assert f"pulumi up --refresh --stack {fleet.name}" in status.stdout, status.stdout
    steps = fleet.stack.up()  # no --refresh: the project refreshes before every update
    assert "create" in changed(steps)["local-card-0-paddlex-0"]
    assert healthy(f"{paddlex.url}/health")
    assert len(services(paddlex.container_name)) == 1
    gateway_sees_all_healthy(fleet)  # what `status` reports as the gateway's view
    status = fleetctl(fleet, tmp_path, "status")
    assert status.returncode == 0, status.stdout + status.stderr + gateway_logs(fleet)
