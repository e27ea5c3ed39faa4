"""Rolling replacement under load, on the real Pulumi engine and a real Docker engine (sim).

One stack of two cards (one vLLM and two PaddleX each, so it stays small), clients sending
documents through the gateway the whole time. In file order: a vLLM flag change rolls card by
card with no failed request, the waves read from the engine's events; a rollout killed half-way
(`kill -9` of the CLI) leaves a card drained until the next `pulumi up` puts it right.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import httpx
import pytest

from bench.rollout.load import CapacitySampler, ClientLoad, summarize
from tests.e2e.pulumi_stack import PulumiStack, Step
from tests.e2e.test_fleet_on_docker import docker, labelled_containers, temp_model_dir

pytestmark = pytest.mark.docker

VLLM_BASE, PADDLEX_BASE, GATEWAY_PORT = 18025, 18120, 18101
STACK = "rolling-" + os.urandom(3).hex()
GATEWAY_NAME = "paddleocr-fleet-gateway-rolling"
STACK_LABEL = f"paddleocr-fleet.stack=paddleocr-fleet/{STACK}"
TOKEN, ADMIN_TOKEN = ("rolling-" + os.urandom(12).hex() for _ in range(2))
USER = {"Authorization": f"Bearer {TOKEN}"}
ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
URL = f"http://127.0.0.1:{GATEWAY_PORT}"
PER_CARD = 2  # PaddleX instances of a card


@pytest.fixture(scope="module")
def stack(docker_engine):
    for name in docker("ps", "-a", "--format", "{{.Names}}").stdout.split():
        if name.startswith(GATEWAY_NAME) or re.search(r"-18[0-9]{3}-sim-", name):
            docker("rm", "-f", name)  # leftovers of an interrupted run
    model_dir = temp_model_dir()
    config = {
        "accelerator": "sim",
        "cards": "2",
        "vllmPerCard": "1",
        "paddlexPerVllm": str(PER_CARD),
        "modelDir": model_dir,
        "vllmBasePort": str(VLLM_BASE),
        "paddlexBasePort": str(PADDLEX_BASE),
        "gatewayPort": str(GATEWAY_PORT),
        "gatewayContainerName": GATEWAY_NAME,
        "keeperPort": str(GATEWAY_PORT + 1),
        "gatewayImage": "paddleocr-fleet/gateway:latest",
        "gatewayJobsDir": tempfile.mkdtemp(prefix="paddleocr-fleet-jobs-"),
        "simVllmLoadSeconds": "3",
        "drainTimeout": "60",
        "vllmReadyTimeout": "180",
        "paddlexReadyTimeout": "180",
        "readyPollInterval": "1",
    }
    secrets = {
        "tokens": json.dumps({"team-a": TOKEN}),
        "adminTokens": json.dumps({"ops": ADMIN_TOKEN}),
    }
    root = Path(tempfile.mkdtemp(prefix="paddleocr-fleet-rolling-"))
    stack = PulumiStack.create(root, STACK, config, secrets)
    try:
        stack.up()
        yield stack
    finally:
        if labelled_containers(STACK_LABEL):
            stack.run(["destroy", "--stack", STACK, "--yes", "--non-interactive"], check=False)
        shutil.rmtree(root, ignore_errors=True)
        shutil.rmtree(model_dir, ignore_errors=True)


def upstream_states() -> dict[str, str]:
    doc = httpx.get(f"{URL}/upstreams", headers=ADMIN, timeout=10).json()
    return {u["url"]: u["state"] for u in doc["upstreams"]}


def first(steps: list[Step], name: str, op: str) -> Step:
    return next(s for s in steps if s.name == name and s.op == op)


def test_a_vllm_flag_change_rolls_card_by_card_with_no_failed_request(stack):
    with ClientLoad(URL, clients=8, headers=USER) as load, CapacitySampler(URL, ADMIN) as cap:
        time.sleep(2)
        began = load.now()
        stack.set_config({"maxNumBatchedTokens": "8192"})
        steps = stack.up()
        ended = load.now()
        time.sleep(2)
    summary = summarize(load.results, cap.samples, (began, ended))
    assert summary["failed"] == 0, summary
    assert summary["requests"] > 50, summary
    # Never more than one card (of two) out of service: at least the other card's instances.
    assert summary["capacity_floor"] >= PER_CARD, summary
    # The waves, from the engine's events: card 1 is drained only once card 0 is back in.
    card0_back = first(steps, "local-card-0-in-service", "create-replacement")
    card1_out = first(steps, "local-card-1-in-service", "delete-replaced")
    assert card0_back.ended is not None and card0_back.ended < card1_out.started
    card0_out = first(steps, "local-card-0-in-service", "delete-replaced")
    card0_vllm = first(steps, "local-card-0-vllm-0", "delete-replaced")
    assert card0_out.ended is not None and card0_out.ended < card0_vllm.started
    assert set(upstream_states().values()) == {"healthy"}


def test_a_rollout_killed_half_way_is_put_right_by_the_next_up(stack):
    stack.set_config({"maxNumBatchedTokens": "4096"})
    args = ["up", "--stack", STACK, "--config-file", str(stack.config_file)]
    process = subprocess.Popen(
        [str(stack.cli), *args, "--yes", "--skip-preview", "--non-interactive"],
        cwd=stack.project,
        env=stack.env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 120
        while "drained" not in upstream_states().values():
            assert process.poll() is None and time.monotonic() < deadline, "no card was drained"
            time.sleep(0.2)
    finally:
        os.kill(process.pid, signal.SIGKILL)  # the CLI alone, as an operator's kill -9 would
        process.wait()
    assert "drained" in upstream_states().values()
    stack.run(["cancel", "--stack", STACK, "--yes"], check=False)  # a lock, if the backend has one
    steps = stack.up()
    assert any(s.op != "same" for s in steps)
    assert set(upstream_states().values()) == {"healthy"}
