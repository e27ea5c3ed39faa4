"""The per-host gateway layout under the real Pulumi engine on a real Docker engine, in sim mode.

One stack (one host, one card), in file order: up in the single layout; `gatewayLayout
per-host`, which adds the balancer (its image built by the stack: HAProxy on the local base
image) and leaves the gateway as it is; documents and the job API through the balancer with the
gateway's tokens; a no-op up; a changed balancer setting reloaded in place; back to the single
layout, which removes the balancer alone; destroy.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator

import httpx
import pytest

from tests.e2e.job_api import finished_job
from tests.e2e.pulumi_stack import changed
from tests.e2e.sim_stack import SimStack, sim_stack
from tests.e2e.test_fleet_on_docker import (
    docker,
    labelled_containers,
    png_bytes,
    vllm_port_named_in,
)

pytestmark = pytest.mark.docker

BALANCER_PORT = 17180
BALANCER_NAME = "paddleocr-fleet-balancer-scale-out"
TOKEN = "scale-out-token-" + os.urandom(12).hex()
USER = {"Authorization": f"Bearer {TOKEN}"}
BALANCER = {"port": BALANCER_PORT, "containerName": BALANCER_NAME, "checkIntervalS": 1}


@pytest.fixture(scope="module")
def fleet(docker_engine) -> Iterator[SimStack]:
    if BALANCER_NAME in docker("ps", "-a", "--format", "{{.Names}}").stdout.split():
        docker("rm", "-f", BALANCER_NAME)  # a leftover of an interrupted run
    with sim_stack(
        "scale-out",
        ports=17000,
        secrets={"tokens": json.dumps({"team-a": TOKEN})},
        # No image registry here: the balancer image builds on the local base image.
        buildArgs=json.dumps({"BASE_IMAGE": "paddleocr-fleet/base:bookworm"}),
    ) as fleet:
        yield fleet


def container_ids(fleet: SimStack) -> dict[str, str]:
    """Name -> id of every container of this module's stack."""
    return labelled_containers(fleet.label)


def ocr(url: str, headers: dict[str, str] | None = USER) -> httpx.Response:
    return httpx.post(
        f"{url}/ocr-file",
        headers=headers,
        files={"file": ("doc.png", png_bytes(), "image/png")},
        timeout=60,
    )


def assert_served(fleet: SimStack, url: str) -> None:
    answer = ocr(url)
    assert answer.status_code == 200, answer.text
    body = answer.json()
    binding = {p.url: p.vllm.port for p in fleet.plan.paddlex}
    assert vllm_port_named_in(body["text"]) == binding[body["upstream"]]


def test_up_in_the_single_layout_serves_through_the_gateway(fleet):
    fleet.stack.up()
    outputs = fleet.stack.outputs()
    assert outputs["gateway_url"] == fleet.plan.gateway.url and "gateways" not in outputs
    assert_served(fleet, outputs["gateway_url"])


def test_per_host_adds_the_balancer_and_leaves_every_other_resource_alone(fleet):
    before = container_ids(fleet)
    fleet.set(gatewayLayout="per-host", balancer=json.dumps(BALANCER))
    steps = fleet.stack.up()
    touched = changed(steps)
    # One host: its gateway already owned every PaddleX. Its config changes in one point (the
    # balancer is its only client) and is installed in the running gateway.
    reloaded = touched.pop("local-gateway-config", None)
    assert reloaded, "the gateway's config was not installed again"
    assert all(n.startswith("local-balancer") and ops == {"create"} for n, ops in touched.items())
    assert {"local-balancer", "local-balancer-image", "local-balancer-ready"} <= set(touched)
    after = container_ids(fleet)
    assert {n: i for n, i in after.items() if n != BALANCER_NAME} == before
    outputs = fleet.stack.outputs()
    plan = fleet.plan
    assert plan.balancer is not None
    assert outputs["gateway_url"] == plan.balancer.url == f"http://127.0.0.1:{BALANCER_PORT}"
    assert outputs["gateways"] == [plan.gateway.url]
    assert outputs["topology"]["balancer"]["container"] == BALANCER_NAME


def test_documents_go_through_the_balancer_with_the_gateways_tokens(fleet):
    url = fleet.plan.entry_url
    assert ocr(url, headers=None).status_code == 401  # the gateway's answer, passed on
    assert httpx.get(f"{url}/balancer/health", timeout=10).status_code == 200
    for _ in range(4):
        assert_served(fleet, url)


def test_the_job_api_works_through_the_balancer(fleet):
    url = fleet.plan.entry_url
    job = finished_job(url, USER, ("doc.png", png_bytes(), "image/png"))
    assert job.result_url.startswith(url)  # the balancer's address, as the client called it
    page = job.pages[0]
    assert "sim-vllm:" in page["markdown"]["text"]


def test_a_second_up_changes_nothing(fleet):
    fleet.stack.preview("--expect-no-changes")
    assert changed(fleet.stack.up()) == {}


def test_a_changed_balancer_setting_is_reloaded_in_the_running_container(fleet):
    before = container_ids(fleet)
    fleet.set(balancer=json.dumps({**BALANCER, "checkIntervalS": 0.5}))
    touched = changed(fleet.stack.up())
    # The container ignores its upload: the new config is installed and reloaded in it.
    assert set(touched) == {"local-balancer-config"}, touched
    assert container_ids(fleet) == before
    plan = fleet.plan
    assert plan.balancer is not None
    config = docker("exec", BALANCER_NAME, "cat", plan.balancer.config_path).stdout
    assert "inter 500ms" in config
    assert_served(fleet, plan.entry_url)


def test_back_to_the_single_layout_removes_the_balancer_alone(fleet):
    before = container_ids(fleet)
    fleet.set(gatewayLayout="single")
    fleet.remove("balancer")
    touched = changed(fleet.stack.up())
    assert touched.pop("local-gateway-config", None), "the gateway's config was not installed"
    assert touched and all(n.startswith("local-balancer") for n in touched), touched
    assert all(ops == {"delete"} for ops in touched.values()), touched
    assert container_ids(fleet) == {n: i for n, i in before.items() if n != BALANCER_NAME}
    assert docker("image", "inspect", f"paddleocr-fleet/balancer:{fleet.name}").returncode != 0
    outputs = fleet.stack.outputs()
    assert outputs["gateway_url"] == fleet.plan.gateway.url and "gateways" not in outputs
    assert_served(fleet, outputs["gateway_url"])


def test_destroy_leaves_no_container(fleet):
    fleet.stack.destroy()
    assert container_ids(fleet) == {}
