"""``fleetctl top`` against the real gateway's status API (the status page's document)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import httpx
import pytest

from fleetctl.cli import main
from gateway.config.settings import parse_settings
from gateway.server.app import create_app
from tests.doubles.paddlex_double import DoubleFleet
from tests.doubles.servers import ServerThread
from tests.fleetctl.conftest import one_card_topology
from tests.gateway.conftest import gateway_config
from tests.waiting import wait_for

ADMIN = "top-admin-token-0123456789"


def test_top_once_shows_every_upstream_and_its_state(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    with DoubleFleet(3) as fleet:
        specs = [
            {"url": url, "host": "local", "card": i // 2, "vllm": "http://127.0.0.1:1",
             "container": f"paddle-{i}"}
            for i, url in enumerate(fleet.urls)
        ]  # fmt: skip
        auth = {
            "admin_tokens": [{"name": "ops", "sha256": hashlib.sha256(ADMIN.encode()).hexdigest()}]
        }
        server = ServerThread(create_app(parse_settings(gateway_config(specs, auth=auth)))).start()
        try:
            outputs = tmp_path / "outputs.json"
            topology = one_card_topology([])
            outputs.write_text(json.dumps({"gateway_url": server.url, "topology": topology}))
            fleet[2].stop()
            assert wait_for(
                lambda: (
                    httpx.get(
                        f"{server.url}/status/api/state",
                        headers={"Authorization": f"Bearer {ADMIN}"},
                    ).json()["upstreams"][2]["state"]
                    != "healthy"
                ),
                timeout=10,
            )
            assert main(["top", "--once", "--outputs", str(outputs)]) == 1
            assert "needs an admin token" in capsys.readouterr().err

            monkeypatch.setenv("PADDLEOCR_FLEET_ADMIN_TOKEN", ADMIN)
            assert main(["top", "--once", "--outputs", str(outputs)]) == 0
            out = capsys.readouterr().out
        finally:
            server.stop()
    for i in range(3):
        assert f"paddle-{i}" in out
    assert "2 healthy, 1 unhealthy" in out
    assert "gateway: RSS" in out and "queue: 0 waiting" in out
