"""Two Docker hosts on one machine: two engines with their own sockets and data roots, sim mode,
one gateway over both. Host networking is shared here, so the hosts get distinct port bases."""

from __future__ import annotations

import base64
import json
import subprocess
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from components.plan import build_plan
from components.settings import load_settings
from tests.e2e.conftest import SIM_IMAGES, _unavailable
from tests.e2e.engine import StandInEngine, temp_model_dir
from tests.e2e.test_fleet_on_docker import png_bytes, vllm_port_named_in
from tests.pulumi_harness import REPO, record_stack

pytestmark = pytest.mark.docker

ENGINE_A = "unix:///var/run/docker.sock"
ENGINE_B = "unix:///var/run/docker-b.sock"


def _docker(endpoint: str, *args: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["docker", *args],
        env={"PATH": "/usr/bin:/bin:/usr/local/bin", "DOCKER_HOST": endpoint},
        capture_output=True,
        text=True,
        check=False,
        **kwargs,
    )


def _image_id(endpoint: str, image: str) -> str:
    return _docker(endpoint, "image", "inspect", "-f", "{{.Id}}", image).stdout.strip()


@pytest.fixture(scope="module")
def second_engine(docker_engine) -> str:
    started = subprocess.run(
        [
            "bash",
            str(REPO / ".ci/docker-up.sh"),
            "--socket",
            ENGINE_B.removeprefix("unix://"),
            "--data-root",
            "/var/lib/docker-b",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    if started.returncode != 0:
        _unavailable(f"a second Docker engine could not start: {started.stderr[-500:]}")
    missing = [i for i in SIM_IMAGES[:2] if _image_id(ENGINE_A, i) != _image_id(ENGINE_B, i)]
    if missing:
        saved = subprocess.Popen(["docker", "save", *missing], stdout=subprocess.PIPE)
        loaded = _docker(ENGINE_B, "load", stdin=saved.stdout)
        saved.wait()
        assert loaded.returncode == 0, loaded.stderr
    return ENGINE_B


def two_host_config(model_dir: str) -> dict[str, str]:
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
            "endpoint": ENGINE_B,
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
        "gatewayImage": "paddleocr-fleet/gateway:latest",
        "vllmReadyTimeout": "180",
        "paddlexReadyTimeout": "180",
        "readyPollInterval": "1",
    }


@pytest.fixture(scope="module")
def fleet(second_engine):
    config = two_host_config(temp_model_dir())
    plan = build_plan(load_settings(config))
    engine = StandInEngine(record_stack(config))
    engine.destroy()
    try:
        engine.apply()
        yield plan, engine
    finally:
        engine.destroy()


def _names(endpoint: str) -> set[str]:
    return set(_docker(endpoint, "ps", "--format", "{{.Names}}").stdout.split())


def test_each_hosts_containers_run_on_its_own_engine(fleet):
    plan, _ = fleet
    on_a, on_b = _names(ENGINE_A), _names(ENGINE_B)
    for instance in (*plan.vllm, *plan.paddlex):
        expected, other = (on_a, on_b) if instance.host.name == "host-a" else (on_b, on_a)
        assert instance.container_name in expected
        assert instance.container_name not in other
    assert plan.gateway.container_name in on_a and plan.gateway.container_name not in on_b


def test_one_gateway_serves_from_both_hosts_each_answer_from_its_bound_vllm(fleet):
    plan, _ = fleet
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
    plan, _ = fleet
    for paddlex in plan.paddlex:
        endpoint = ENGINE_A if paddlex.host.name == "host-a" else ENGINE_B
        log = _docker(endpoint, "exec", paddlex.container_name, "cat", paddlex.log_path)
        assert log.returncode == 0 and log.stdout, f"{paddlex.container_name}: {log.stderr}"


def test_teardown_leaves_no_container_on_either_engine(fleet):
    plan, engine = fleet
    assert engine.destroy() == []
    names = {i.container_name for i in (*plan.vllm, *plan.paddlex)} | {plan.gateway.container_name}
    assert names.isdisjoint(_names(ENGINE_A) | _names(ENGINE_B))
    for endpoint in (ENGINE_A, ENGINE_B):
        left = _docker(endpoint, "ps", "-aq", "--filter", "label=paddleocr-fleet.role").stdout
        assert left.split() == []
