"""The recycler over real HTTP: a real gateway over two PaddleX doubles, and a fake Docker
Engine API on a unix socket (the calls the recycler makes: inspect, stats, restart), whose
restart restarts a double and notes the gateway's view of it at that moment.

- memory past the limit: that instance is drained, restarted, undrained; the other untouched
- documents past the limit: counted from the gateway's /metrics, one instance per check
- another instance out of service holds the recycle; an admin token is sent when configured
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from fastapi import FastAPI
from fastapi.responses import JSONResponse, Response

from gateway.recycler.config import RecyclerConfig
from gateway.recycler.engine import Engine
from gateway.recycler.loop import GatewayAdmin, Recycler
from gateway.recycler.policy import MB
from tests.doubles.paddlex_double import DoubleFleet, PaddlexDouble
from tests.gateway.conftest import RunningGateway, gateway_config
from tests.gateway.samples import b64, png_bytes

PNG = b64(png_bytes())
ADMIN = "recycler-admin-token-0123456789"


@dataclass
class FakeContainer:
    double: PaddlexDouble
    memory_mb: int = 1000
    started: datetime = field(default_factory=lambda: datetime.now(UTC))
    restarts: list[dict[str, Any]] = field(default_factory=list)


class FakeEngine:
    """The Docker Engine API calls of gateway/recycler/engine.py, on a unix socket."""

    def __init__(self, path: Path, containers: dict[str, FakeContainer], gateway: str) -> None:
        self.path, self.containers, self.gateway = path, containers, gateway
        app = FastAPI()

        @app.get("/containers/{name}/json")
        def inspect(name: str) -> JSONResponse:
            c = self.containers.get(name)
            if c is None:
                return JSONResponse({"message": f"No such container: {name}"}, 404)
            started = c.started.isoformat().replace("+00:00", "") + "123Z"
            return JSONResponse(
                {"Id": f"id-{name}", "State": {"Running": c.double.running, "StartedAt": started}}
            )

        @app.get("/containers/{name}/stats")
        def stats(name: str, stream: str = "true", one_shot: str = "") -> JSONResponse:
            c = self.containers[name]
            usage = (c.memory_mb + 300) * MB
            return JSONResponse(
                {"memory_stats": {"usage": usage, "stats": {"inactive_file": 300 * MB}}}
            )

        @app.post("/containers/{name}/restart")
        def restart(name: str, t: int = 10) -> JSONResponse:
            c = self.containers[name]
            view = httpx.get(f"{self.gateway}/upstreams", headers=auth(), timeout=10).json()
            c.restarts.append({u["url"]: u["state"] for u in view["upstreams"]})
            c.double.stop()
            c.double.start()
            c.memory_mb, c.started = 500, datetime.now(UTC)
            return Response(status_code=204)

        self.server = uvicorn.Server(uvicorn.Config(app, uds=str(path), log_level="critical"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> FakeEngine:
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started and time.monotonic() < deadline:
            time.sleep(0.01)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(10)


def auth() -> dict[str, str]:
    return {"Authorization": f"Bearer {ADMIN}"}


@dataclass
class Setup:
    fleet: DoubleFleet
    gateway: RunningGateway
    containers: dict[str, FakeContainer]
    socket: Path

    def recycler(self, **limits: Any) -> Recycler:
        config = RecyclerConfig.model_validate(
            {
                "host": "local",
                "gateway": {"url": self.gateway.url, "token_file": None},
                "instances": [
                    {"url": d.url, "health_url": f"{d.url}/health", "container": name, "card": 0}
                    for name, d in ((n, c.double) for n, c in self.containers.items())
                ],
                "min_uptime_s": 0,
                "drain_timeout_s": 10,
                "ready_timeout_s": 10,
                "stop_grace_s": 1,
                "docker_socket": str(self.socket),
                **limits,
            }
        )
        return Recycler(config, Engine(str(self.socket)), GatewayAdmin(self.gateway.url, ADMIN))

    def states(self) -> dict[str, str]:
        doc = self.gateway.client.get("/upstreams", headers=auth()).json()
        return {u["url"]: u["state"] for u in doc["upstreams"]}


@pytest.fixture
def setup(start_gateway, tmp_path: Path) -> Iterator[Setup]:
    with DoubleFleet(2) as fleet:
        digest = hashlib.sha256(ADMIN.encode()).hexdigest()
        gw = start_gateway(
            gateway_config(
                fleet.urls,
                auth={
                    "admin_tokens": [{"name": "recycler", "sha256": digest}],
                    "tokens": [],
                },
            )
        )
        gw.client.headers.update(auth())
        containers = {f"paddle-{d.port}": FakeContainer(d) for d in fleet.doubles}
        socket = tmp_path / "docker.sock"
        with FakeEngine(socket, containers, gw.url):
            yield Setup(fleet, gw, containers, socket)


def test_memory_past_the_limit_recycles_that_instance_drained_around_its_restart(setup):
    big, small = setup.containers.values()
    big.memory_mb = 17000
    recycler = setup.recycler(max_memory_mb=16000)
    record = recycler.check()
    assert record is not None and record["ok"], record
    assert record["reason"] == "memory 17000 MB > 16000 MB"
    assert record["memory_mb"] == 17000 and record["in_flight_at_restart"] == 0
    assert len(big.restarts) == 1 and small.restarts == []
    at_restart = big.restarts[0]
    assert at_restart[big.double.url] == "drained"
    assert at_restart[small.double.url] == "healthy"
    assert set(setup.states().values()) == {"healthy"}  # undrained after
    assert recycler.check() is None  # its memory is back below the limit
    assert setup.gateway.client.post("/ocr", json={"base64": PNG}).status_code == 200


def test_documents_counted_at_the_gateway_recycle_one_instance_per_check(setup):
    recycler = setup.recycler(max_documents=5)
    assert recycler.check() is None  # the baseline of the gateway's counters
    for _ in range(12):  # round robin: 6 each
        assert setup.gateway.client.post("/ocr", json={"base64": PNG}).status_code == 200
    first = recycler.check()
    assert first is not None and first["ok"] and first["documents"] == 6, first
    second = recycler.check()
    assert second is not None and second["ok"], second
    assert {first["container"], second["container"]} == set(setup.containers)
    assert all(len(c.restarts) == 1 for c in setup.containers.values())
    assert recycler.check() is None  # both start again from zero


def test_another_instance_out_of_service_holds_the_recycle(setup):
    big, other = setup.containers.values()
    big.memory_mb = 20000
    drained = setup.gateway.client.post(
        "/admin/drain", json={"upstreams": [other.double.url], "wait_s": 0}
    )
    assert drained.status_code == 200
    recycler = setup.recycler(max_memory_mb=16000)
    assert recycler.check() is None
    assert big.restarts == []
    setup.gateway.client.post("/admin/undrain", json={"upstreams": [other.double.url]})
    record = recycler.check()
    assert record is not None and record["container"] == f"paddle-{big.double.port}"


def test_a_wrong_token_is_a_skipped_check_not_a_recycle(setup):
    big, _ = setup.containers.values()
    big.memory_mb = 20000
    recycler = setup.recycler(max_memory_mb=16000)
    recycler.gateway = GatewayAdmin(setup.gateway.url, "not-the-token-0123456789")
    assert recycler.check() is None
    assert big.restarts == []
