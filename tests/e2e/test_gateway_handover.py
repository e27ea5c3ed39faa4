"""The gateway replaced under load on the real Pulumi engine and a real Docker engine (sim
mode, 1 card): a changed gateway source rebuilds its image; the new gateway container is
created beside the old one, takes over its listening socket, gets its config and answers
/ready; only then is the old one deleted. 8 clients sending /ocr-file all along see no refused
connection and no failed request.
"""

from __future__ import annotations

import json
import os
import re
import threading
import time

import httpx
import pytest

from bench.rollout.load import ClientLoad
from tests.e2e.pulumi_stack import changed
from tests.e2e.sim_stack import SimStack, sim_stack, tokens
from tests.e2e.test_fleet_on_docker import (
    ContainerEvents,
    docker,
    labelled_containers,
)

pytestmark = pytest.mark.docker

TOKEN = "e2e-user-token-" + os.urandom(12).hex()
ADMIN_TOKEN = "e2e-admin-token-" + os.urandom(12).hex()


def gateways(fleet: SimStack) -> dict[str, str]:
    """Name -> id of the stack's gateway containers."""
    return {
        name: cid
        for name, cid in labelled_containers(fleet.label).items()
        if re.fullmatch(re.escape(fleet.gateway_name) + r"-[0-9a-f]{12}", name)
    }


class HealthLoad:
    """One client asking `url`/health on a new connection each time, until stopped."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.answered = 0
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> HealthLoad:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                reply = httpx.get(f"{self.url}/health", timeout=10, trust_env=False)
                if reply.status_code == 200:
                    self.answered += 1
                else:
                    self.errors.append(f"{reply.status_code} {reply.text[:100]}")
            except httpx.TransportError as exc:
                self.errors.append(repr(exc))
            time.sleep(0.02)


def full_id(name: str) -> str:
    return docker("inspect", "-f", "{{.Id}}", name).stdout.strip()


@pytest.fixture(scope="module")
def fleet(docker_engine):
    # built from the stack's sources (no gatewayImage), on the local base image
    config = {
        "gatewayImage": None,
        "buildArgs": json.dumps({"BASE_IMAGE": "paddleocr-fleet/base:bookworm"}),
    }
    with sim_stack("handover", 25000, tokens(TOKEN, ADMIN_TOKEN), **config) as fleet:
        yield fleet


def test_a_changed_gateway_source_replaces_the_gateway_without_refusing_anything(fleet):
    stack = fleet.stack
    stack.up()
    (old_name,) = gateways(fleet)
    old_id = full_id(old_name)
    url = fleet.url
    source = stack.project / "gateway" / "api" / "postprocess.py"
    source.write_text(source.read_text() + "\n# a change of the gateway's sources\n")
    headers = {"Authorization": f"Bearer {TOKEN}"}
    keeper_url = stack.outputs()["topology"]["gateway"]["keeper"]["url"]
    with (
        ContainerEvents() as events,
        ClientLoad(url, clients=8, headers=headers) as load,
        HealthLoad(keeper_url) as keeper_load,
    ):
        time.sleep(2)
        before = load.total
        started = time.monotonic()
        steps = stack.up()
        took = time.monotonic() - started
        time.sleep(2)
    (new_name,) = gateways(fleet)
    new_id = full_id(new_name)
    assert new_name != old_name and new_id != old_id
    assert "local-gateway" in changed(steps)
    created = events.seen[(new_id, "create")]
    destroyed = events.seen[(old_id, "destroy")]
    print(
        f"pulumi up {took:.0f}s; {load.total} answers ({load.total - before} during the up), "
        f"{len(load.errors)} errors, {load.closing} with Connection: close, longest gap "
        f"{load.longest_gap_s * 1000:.0f} ms; the new gateway was created "
        f"{(destroyed - created) / 1e9:.1f}s before the old one was destroyed"
    )
    assert load.errors == [], f"{len(load.errors)} errors, e.g. {load.errors[:3]}"
    # the keeper (same image) was handed over too: its port never refused a connection
    print(f"keeper: {keeper_load.answered} answers, {len(keeper_load.errors)} errors")
    assert keeper_load.errors == [] and keeper_load.answered > 20, keeper_load.errors[:3]
    assert "local-gateway-keeper" in changed(steps)
    assert set(load.statuses) == {200}, load.statuses
    assert created < destroyed, "the old gateway was deleted before the new one was created"
    # in the engine's order: the new one was created, got its config and answered /ready,
    # and only then was the old one deleted
    order = {(s.name, s.op): s for s in steps}
    print(sorted((s.started, s.ended, s.name, s.op) for s in steps if "gateway" in s.name))
    create = order[("local-gateway", "create-replacement")]
    config = order[("local-gateway-config", "create-replacement")]
    ready = order[("local-gateway-ready", "create-replacement")]
    delete = order[("local-gateway", "delete-replaced")]
    assert create.ended is not None and config.ended is not None and ready.ended is not None
    assert create.ended < config.started and config.ended < ready.started
    assert ready.ended < delete.started
