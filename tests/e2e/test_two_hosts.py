"""Two Docker hosts under the real Pulumi engine, in sim mode: host-a is this machine's engine
(unix socket), host-b a network namespace with its own engine and sshd, reached as
`ssh://root@ADDRESS` (tests/e2e/netns_host.py). One gateway, on host-a, serves from both.

The namespace shares this machine's files, so the two hosts have one model dir: their ports
differ to keep their PaddleX logs apart. Traffic goes to loopback and the namespace only.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from components.plan import FleetPlan, HostPlan, build_plan
from components.settings import load_settings
from tests.e2e.conftest import SIM_IMAGES, _unavailable
from tests.e2e.netns_host import HostUnavailable, NetnsHost, netns_host, unavailable
from tests.e2e.pulumi_stack import PulumiStack, Step
from tests.e2e.test_fleet_on_docker import png_bytes, temp_model_dir, vllm_port_named_in

pytestmark = pytest.mark.docker

ENGINE_A = "unix:///var/run/docker.sock"
ROLE_LABEL, HOST_LABEL = "paddleocr-fleet.role", "paddleocr-fleet.host"
STACK = "two-hosts"
HOSTS = ("host-a", "host-b")


def two_host_config(model_dir: str, host_b: NetnsHost) -> dict[str, str]:
    hosts = [
        {
            "name": "host-a",
            "endpoint": ENGINE_A,
            "cards": 1,
            "vllmBasePort": 29025,
            "paddlexBasePort": 29120,
        },
        {
            "name": "host-b",
            "endpoint": host_b.endpoint,
            "address": host_b.address,
            "cards": 1,
            "vllmBasePort": 29525,
            "paddlexBasePort": 29620,
        },
    ]
    return {
        "hosts": json.dumps(hosts),
        "accelerator": "sim",
        "vllmPerCard": "1",
        "paddlexPerVllm": "2",
        "modelDir": model_dir,
        "gatewayPort": "29101",
        "keeperPort": "29102",
        "gatewayContainerName": "paddleocr-fleet-gateway-two-hosts",
        "gatewayImage": "paddleocr-fleet/gateway:latest",
        "gatewayJobsDir": f"{model_dir}/jobs",
        "allowOpenAccess": "true",  # a test gateway: no tokens
        "vllmReadyTimeout": "180",
        "paddlexReadyTimeout": "180",
        "readyPollInterval": "1",
    }


@dataclass
class TwoHosts:
    stack: PulumiStack
    host_b: NetnsHost
    plan: FleetPlan
    model_dir: Path
    seconds: dict[str, float] = field(default_factory=dict)

    def docker(self, host: HostPlan | str, *args: str) -> subprocess.CompletedProcess[str]:
        """The docker CLI through `host`'s own endpoint (host-b: ssh)."""
        name = host if isinstance(host, str) else host.name
        if name == "host-b":
            return self.host_b.docker(*args)
        env = {k: v for k, v in os.environ.items() if k != "DOCKER_CONTEXT"}
        return subprocess.run(
            ["docker", *args],
            env={**env, "DOCKER_HOST": ENGINE_A},
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    def containers(self, host: str) -> dict[str, str]:
        """Name -> host label of this stack's containers on `host`'s engine, running or not
        (host-a's engine may hold other stacks' containers: their host is not ours)."""
        listed = self.docker(
            host,
            "ps",
            "-a",
            "--filter",
            f"label={ROLE_LABEL}",
            "--format",
            f'{{{{.Names}}}} {{{{.Label "{HOST_LABEL}"}}}}',
        )
        assert listed.returncode == 0, listed.stderr
        found = dict(line.split() for line in listed.stdout.splitlines())
        return {name: label for name, label in found.items() if label in HOSTS}

    def timed(self, label: str, run: Callable[[], list[Step]]) -> list[Step]:
        started = time.monotonic()
        steps = run()
        self.seconds[label] = round(time.monotonic() - started, 1)
        return steps


@pytest.fixture(scope="module")
def host_b(docker_engine) -> Iterator[NetnsHost]:
    reason = unavailable()
    if reason:
        _unavailable(f"no namespace host: {reason}")
    try:
        with netns_host(images=SIM_IMAGES[:2]) as host:
            yield host
    except HostUnavailable as exc:
        _unavailable(f"no namespace host: {exc}")


@pytest.fixture(scope="module")
def fleet(host_b, tmp_path_factory) -> Iterator[TwoHosts]:
    model_dir = temp_model_dir()
    try:
        config = two_host_config(model_dir, host_b)
        stack = PulumiStack.create(tmp_path_factory.mktemp(STACK), STACK, config)
        stack.prepend_path(host_b.bin_dir)
        fleet = TwoHosts(stack, host_b, build_plan(load_settings(config)), Path(model_dir))
        _remove_containers(fleet, "host-a")  # leftovers of an interrupted run
        try:
            fleet.timed("up", stack.up)
            yield fleet
        finally:
            if stack.state():
                stack.run(["destroy", "--stack", STACK, "--yes", "--non-interactive"], check=False)
            _remove_containers(fleet, "host-a")
            print(
                f"\ntwo hosts: seconds {fleet.seconds}; host-b: {len(host_b.ssh_calls())} ssh "
                f"calls over {host_b.accepted_logins()} ssh connections"
            )
    finally:
        shutil.rmtree(model_dir, ignore_errors=True)


def _remove_containers(fleet: TwoHosts, host: str) -> None:
    """Remove what a run left of `host`'s containers (host-b's go with its namespace)."""
    names = [name for name, label in fleet.containers(host).items() if label == host]
    if names:
        fleet.docker(host, "rm", "-f", *names)


def test_each_hosts_containers_run_on_its_own_engine(fleet):
    plan = fleet.plan
    on_a, on_b = fleet.containers("host-a"), fleet.containers("host-b")
    expected = {
        host: {i.container_name for i in (*plan.vllm, *plan.paddlex) if i.host.name == host}
        for host in HOSTS
    }
    assert plan.gateway.keeper is not None  # beside the gateway, on its host
    entry = fleet.stack.outputs()["topology"]["gateway"]  # names with their generation
    expected["host-a"] |= {entry["container"], entry["keeper"]["container"]}
    assert on_a == dict.fromkeys(expected["host-a"], "host-a")
    assert on_b == dict.fromkeys(expected["host-b"], "host-b")
    running = fleet.docker("host-b", "ps", "--format", "{{.Names}}").stdout.split()
    assert sorted(running) == sorted(expected["host-b"])
    topology = fleet.stack.outputs()["topology"]
    assert [h["docker_host"] for h in topology["hosts"]] == [ENGINE_A, fleet.host_b.endpoint]


def test_host_b_serves_in_its_namespace_not_on_this_machines_loopback(fleet):
    vllm = next(v for v in fleet.plan.vllm if v.host.name == "host-b")
    answer = httpx.get(f"{vllm.url}/v1/models", timeout=10)
    assert answer.status_code == 200 and vllm.url.startswith(f"http://{fleet.host_b.address}:")
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"http://127.0.0.1:{vllm.port}/v1/models", timeout=5)


def test_host_b_containers_start_commands_and_readiness_waits_went_through_ssh(fleet):
    host_b, plan = fleet.host_b, fleet.plan
    calls = host_b.ssh_calls()
    assert all(
        call.args.endswith(f"{host_b.address} docker system dial-stdio") for call in calls
    ), calls[:3]

    def ran(prefix: str, *parts: str) -> int:
        """How many docker commands like this one went through ssh (one may make several
        ssh calls)."""
        return len(
            {
                call.caller_pid
                for call in calls
                if call.caller.startswith(prefix) and all(p in call.caller for p in parts)
            }
        )

    for paddlex in (p for p in plan.paddlex if p.host.name == "host-b"):
        name = paddlex.container_name
        assert ran(f"docker exec -d {name} bash {paddlex.service_script_path}") == 1, name
        assert ran(f"docker exec -u 0 {name} sh -c", paddlex.service_script_path) == 1, name
        assert ran(f"docker exec {name} python3 -c", f"{paddlex.local_url}/health") >= 1, name
    for vllm in (v for v in plan.vllm if v.host.name == "host-b"):
        name = vllm.container_name
        assert ran(f"docker exec {name} python3 -c", f"{vllm.local_url}/v1/models") >= 1, name
    # The docker provider's own connections: ours runs `docker system dial-stdio` through ssh,
    # the official one runs ssh itself; neither is one of the commands' docker calls.
    commands = ("docker exec ", "docker inspect ", "docker ps ")
    provider_calls = [call for call in calls if not call.caller.startswith(commands)]
    assert provider_calls, "no container of host-b went through ssh: its docker provider used none"
    on_a = [i.container_name for i in (*plan.vllm, *plan.paddlex) if i.host.name == "host-a"]
    entry = fleet.stack.outputs()["topology"]["gateway"]
    on_a += [entry["container"], entry["keeper"]["container"]]
    assert not [c for c in calls if any(name in c.caller.split() for name in on_a)]
    logins = host_b.accepted_logins()
    sshd_log = host_b.sshd_log.read_text()
    assert f"Accepted publickey for root from {host_b.peer_address}" in sshd_log
    assert 1 <= logins < len(calls) / 2, f"{logins} ssh connections for {len(calls)} calls"


def test_a_preview_after_up_expects_no_changes(fleet):
    fleet.timed("preview", lambda: fleet.stack.preview("--expect-no-changes"))


def test_the_gateway_on_host_a_serves_from_both_hosts_each_from_its_bound_vllm(fleet):
    plan = fleet.plan
    assert plan.gateway.host.name == "host-a"
    binding = {p.url: p.vllm.port for p in plan.paddlex}
    upstreams = httpx.get(f"{plan.gateway.url}/upstreams", timeout=10).json()["upstreams"]
    assert {(u["url"], u["host"]) for u in upstreams} == {
        (p.url, p.host.name) for p in plan.paddlex
    }
    seen: dict[str, int] = {}
    body = {"base64": base64.b64encode(png_bytes()).decode()}
    with httpx.Client(timeout=120) as client, ThreadPoolExecutor(max_workers=8) as pool:
        for _ in range(10):
            for response in pool.map(
                lambda _: client.post(f"{plan.gateway.url}/ocr", json=body), range(16)
            ):
                assert response.status_code == 200, response.text
                answer = response.json()
                seen[answer["upstream"]] = vllm_port_named_in(answer["text"])
            if len(seen) == len(binding):
                break
    assert seen == binding


def test_paddlex_logs_land_in_each_hosts_model_dir(fleet):
    for paddlex in fleet.plan.paddlex:
        on_disk = fleet.model_dir / paddlex.log_path.removeprefix("/data/")
        assert on_disk.is_file() and on_disk.stat().st_size > 0, on_disk
        seen = fleet.docker(paddlex.host, "exec", paddlex.container_name, "cat", paddlex.log_path)
        assert seen.returncode == 0, f"{paddlex.container_name}: {seen.stderr}"
        assert on_disk.read_text().startswith(seen.stdout[:200]) and seen.stdout


def test_destroy_leaves_no_labelled_container_on_either_engine(fleet):
    destroy_started = time.time()
    steps = fleet.timed("destroy", fleet.stack.destroy)
    # the project refreshes before every update (Pulumi.yaml `refresh: always`), destroy too
    ops = {s.op for s in steps if s.type.startswith(("docker:", "command:"))}
    assert ops - {"refresh"} == {"delete"}
    assert fleet.containers("host-a") == {}
    assert fleet.containers("host-b") == {}
    stopped = [
        call.caller
        for call in fleet.host_b.ssh_calls()
        if call.time >= destroy_started and call.caller.startswith("docker exec ")
    ]
    for paddlex in (p for p in fleet.plan.paddlex if p.host.name == "host-b"):
        stop = f"docker exec {paddlex.container_name} bash -c rm -f {paddlex.service_script_path}"
        assert any(c.startswith(stop) for c in stopped), paddlex.container_name
