"""Recycling under load, on the real Pulumi engine and a real Docker engine (sim).

One card (one vLLM, two PaddleX), the gateway image built by the stack from this checkout, and
`recycle.maxDocuments` of 5: under a steady load every instance passes it within seconds, so
the host's recycler drains, restarts and undrains them one after the other. No request fails,
one instance always serves, and each recycle restarted the container it names.
"""

from __future__ import annotations

import json
import os
import time

import pytest

from bench.rollout.load import CapacitySampler, ClientLoad, summarize
from tests.e2e.gateway_view import wait_for_every_worker
from tests.e2e.sim_stack import SimStack, sim_stack, tokens
from tests.e2e.test_fleet_on_docker import docker, labelled_containers

pytestmark = pytest.mark.docker

TOKEN, ADMIN_TOKEN = ("recycling-" + os.urandom(12).hex() for _ in range(2))
USER = {"Authorization": f"Bearer {TOKEN}"}
ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
RECYCLER = "paddleocr-fleet-gateway-recycling-recycler-local"
CONTAINER = "docker:index/container:Container"


@pytest.fixture(scope="module")
def fleet(docker_engine):
    config = {
        "simVllmLoadSeconds": "1",
        "drainTimeout": "60",
        "recycle": json.dumps({"maxDocuments": 5, "checkIntervalS": 1, "minUptimeS": 0}),
    }
    with sim_stack("recycling", 22000, tokens(TOKEN, ADMIN_TOKEN), **config) as fleet:
        fleet.stack.up()
        yield fleet


def recycles() -> list[dict]:
    """The recycler's `recycled {json}` log lines."""
    logs = docker("logs", RECYCLER)
    text = logs.stdout + logs.stderr
    return [
        json.loads(line.split("recycled ", 1)[1])
        for line in text.splitlines()
        if " recycled " in line
    ]


def started_at(container: str) -> str:
    return docker("inspect", "-f", "{{.State.StartedAt}}", container).stdout.strip()


def paddlex_containers(fleet: SimStack) -> list[str]:
    return sorted(n for n in labelled_containers(fleet.label) if n.startswith("paddle-"))


def test_instances_past_max_documents_are_recycled_under_load_with_no_failed_request(fleet):
    paddlex = paddlex_containers(fleet)
    assert len(paddlex) == 2, paddlex
    first_start = {name: started_at(name) for name in paddlex}
    url = fleet.url
    with ClientLoad(url, clients=4, headers=USER) as load, CapacitySampler(url, ADMIN) as cap:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            done = recycles()
            if {r["container"] for r in done} == set(paddlex) and len(done) >= 3:
                break
            time.sleep(1)
        time.sleep(2)
    summary = summarize(load.results, cap.samples)
    done = recycles()
    print(json.dumps({"summary": summary, "recycles": done}, indent=1))
    assert {r["container"] for r in done} == set(paddlex), done
    assert all(r["ok"] and r["reason"].startswith("documents ") for r in done), done
    assert all(r["documents"] >= 5 and r["in_flight_at_restart"] == 0 for r in done), done
    assert summary["failed"] == 0, summary
    assert summary["capacity_floor"] >= 1, summary  # never both instances out
    for name in paddlex:
        assert started_at(name) != first_start[name], f"{name} was not restarted"
    wait_for_every_worker(
        fleet.url,
        ADMIN,
        lambda states: set(states.values()) <= {"healthy", "draining", "drained"},
        timeout_s=30,
    )


def test_the_gateway_knows_the_recycler_by_its_own_token_name(fleet):
    config = fleet.stack.outputs()["topology"]
    assert config["hosts"][0]["cards"][0]["card"] == 0
    log = docker("logs", RECYCLER)
    assert "limits: memory None MB, documents 5" in log.stdout + log.stderr
    # the stack's admin token of its own is the recyclers', by name, never its plaintext
    state = json.dumps(fleet.stack.state())
    token = docker("exec", RECYCLER, "cat", "/etc/paddleocr-fleet/recycler.token").stdout.strip()
    assert len(token) == 64 and token not in state


def test_a_preview_after_the_update_leaves_the_recycler_alone(fleet):
    """Its healthcheck is off, and Docker fills the timings left at zero from the image's: read
    back on the preview's refresh, they were an update of the container every time
    (components/recycler.py `NO_HEALTHCHECK`)."""
    steps = fleet.stack.preview()
    recycler = [s for s in steps if s.type == CONTAINER and s.name == "local-recycler"]
    assert recycler, "the preview shows no recycler container"
    assert {s.op for s in recycler} <= {"same", "refresh", "read"}, recycler
