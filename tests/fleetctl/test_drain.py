"""``fleetctl drain``, ``undrain``, ``recycle`` and the drained state in ``status``, against the
real gateway (gateway.server.app) in front of PaddleX doubles on two cards.

- drain by card and undrain by port change what the gateway's ``/upstreams`` says;
  ``status`` shows a drained instance (and counts it as fine: it is out on purpose).
- recycle restarts card by card: while a card is restarted only its instances are drained,
  and a stream of requests through the gateway never fails.
- recycle through the CLI runs ``docker restart`` and the start command, then undrains.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from fleetctl import drain as draining
from fleetctl.cli import main
from fleetctl.topology import Instance, load_fleet
from gateway.config.settings import parse_settings
from gateway.server.app import create_app
from tests.doubles.paddlex_double import DoubleFleet
from tests.doubles.servers import ServerThread
from tests.fleetctl.conftest import FakeDocker
from tests.fleetctl.fakes import fake_vllm
from tests.gateway.conftest import gateway_config
from tests.gateway.samples import b64, png_bytes
from tests.waiting import wait_for

PNG = b64(png_bytes())
ADMIN = "ops-secret"
AUTH = {"Authorization": f"Bearer {ADMIN}"}


class Setup:
    """Four doubles, two per card, a fake vLLM per card, a gateway, the outputs file."""

    def __init__(self, tmp_path: Path, doubles: DoubleFleet, vllms: list[ServerThread]) -> None:
        self.doubles = doubles
        cards = [doubles.doubles[:2], doubles.doubles[2:]]
        ups = [
            {"url": d.url, "host": "local", "card": c, "vllm": vllms[c].url,
             "container": f"paddle-{d.port}-sim-{c}"}
            for c, members in enumerate(cards) for d in members
        ]  # fmt: skip
        admin = {"name": "ops", "sha256": hashlib.sha256(ADMIN.encode()).hexdigest()}
        cfg = gateway_config(ups, auth={"admin_tokens": [admin]})
        self.gateway = ServerThread(create_app(parse_settings(cfg))).start()
        topo_cards = [
            {
                "card": c,
                "vllm": [
                    {
                        "port": vllms[c].port,
                        "url": vllms[c].url,
                        "container": f"vllm-sim-{c}",
                        "paddlex": [
                            {
                                "port": d.port,
                                "url": d.url,
                                "container": f"paddle-{d.port}-sim-{c}",
                                "start_command": "true",
                            }
                            for d in members
                        ],
                    }
                ],
            }
            for c, members in enumerate(cards)
        ]
        host = {"name": "local", "address": "127.0.0.1", "accelerator": "sim", "cards": topo_cards}
        topology = {
            "hosts": [host],
            "gateway": {"host": "local", "port": self.gateway.port, "url": self.gateway.url,
                        "container": "paddleocr-fleet-gateway"},
        }  # fmt: skip
        self.outputs = tmp_path / "outputs.json"
        self.outputs.write_text(json.dumps({"gateway_url": self.gateway.url, "topology": topology}))
        self.client = httpx.Client(
            base_url=self.gateway.url,
            timeout=30,
            trust_env=False,
            headers=AUTH,
        )

    def states(self) -> dict[int, str]:
        doc = self.client.get("/upstreams").json()
        return {int(u["url"].rsplit(":", 1)[1]): u["state"] for u in doc["upstreams"]}

    def ports(self, card: int) -> list[int]:
        return [d.port for d in self.doubles.doubles[2 * card : 2 * card + 2]]


@pytest.fixture
def setup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Setup]:
    monkeypatch.setenv("PADDLEOCR_FLEET_ADMIN_TOKEN", ADMIN)
    with (
        DoubleFleet(4) as doubles,
        ServerThread(fake_vllm()) as v0,
        ServerThread(fake_vllm()) as v1,
    ):
        s = Setup(tmp_path, doubles, [v0, v1])
        yield s
        s.client.close()
        s.gateway.stop()


def test_drain_by_card_undrain_by_port_and_status(
    setup: Setup, fake_docker: FakeDocker, capsys: pytest.CaptureFixture[str]
) -> None:
    out = str(setup.outputs)
    assert main(["drain", "--outputs", out, "--card", "0", "--wait", "5"]) == 0
    printed = capsys.readouterr().out
    card0, card1 = setup.ports(0), setup.ports(1)
    assert printed.count(": drained, 0 in flight") == 2
    states = setup.states()
    assert [states[p] for p in card0 + card1] == ["drained", "drained", "healthy", "healthy"]
    containers = {n: "running" for n in ("vllm-sim-0", "vllm-sim-1", "paddleocr-fleet-gateway")}
    fake_docker.set_states(
        {**containers, **{f"paddle-{p}-sim-{c}": "running" for c in (0, 1) for p in setup.ports(c)}}
    )
    assert main(["status", "--outputs", out, "--json"]) == 0  # drained on purpose: fine
    rows = {r["port"]: r for r in json.loads(capsys.readouterr().out)["instances"]}
    assert rows[card0[0]]["gateway"].startswith("drained") and rows[card0[0]]["ok"]
    assert rows[card1[0]]["gateway"] == "healthy"
    assert main(["undrain", "--outputs", out, str(card0[0])]) == 0
    assert f"127.0.0.1:{card0[0]}: healthy" in capsys.readouterr().out
    assert [setup.states()[p] for p in card0] == ["healthy", "drained"]
    assert main(["undrain", "--outputs", out, "--card", "0", "--json"]) == 0
    answers = json.loads(capsys.readouterr().out)
    assert [u["state"] for a in answers.values() for u in a["upstreams"]] == ["healthy"] * 2
    # a name that is not an instance: a usage error naming it
    assert main(["drain", "--outputs", out, "9"]) == 2
    assert "unknown port 9; known ports: paddlex" in capsys.readouterr().err
    assert main(["drain", "--outputs", out]) == 2


def test_drain_without_an_admin_token_is_refused(
    setup: Setup, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("PADDLEOCR_FLEET_ADMIN_TOKEN")
    assert main(["drain", "--outputs", str(setup.outputs), "--card", "1"]) == 1
    assert "requires an admin token" in capsys.readouterr().err
    assert set(setup.states().values()) == {"healthy"}


def test_recycle_goes_card_by_card_without_a_failed_request(setup: Setup) -> None:
    fleet = load_fleet(setup.outputs)
    seen: list[tuple[int, dict[int, str]]] = []
    by_port = {d.port: d for d in setup.doubles.doubles}

    def restart(inst: Instance) -> None:
        seen.append((inst.port, setup.states()))
        by_port[inst.port].stop()  # the container goes away and comes back
        by_port[inst.port].start()

    stop = threading.Event()
    answers: list[int] = []

    def traffic() -> None:
        with httpx.Client(
            base_url=setup.gateway.url, timeout=30, trust_env=False, headers=AUTH
        ) as c:
            while not stop.is_set():
                answers.append(c.post("/ocr", json={"base64": PNG}).status_code)

    sender = threading.Thread(target=traffic)
    sender.start()
    try:
        insts = draining.targets(fleet, [], [0, 1])
        ok = draining.recycle(
            fleet, insts, ADMIN, lambda m: None, restart=restart, ready_s=30, poll_s=0.1
        )
    finally:
        stop.set()
        sender.join(60)
    assert ok
    card0, card1 = setup.ports(0), setup.ports(1)
    assert [port for port, _ in seen] == card0 + card1
    for port, states in seen:  # only the card being restarted is out
        card = card0 if port in card0 else card1
        drained = sorted(p for p, state in states.items() if state in ("draining", "drained"))
        assert drained == sorted(card), states
    assert answers and set(answers) == {200}, answers
    assert set(setup.states().values()) == {"healthy"}


def test_recycle_stops_when_the_card_does_not_drain(setup: Setup) -> None:
    fleet = load_fleet(setup.outputs)
    busy = setup.doubles.doubles[0]
    restarted: list[Any] = []
    busy.knobs.hang = True  # a request that reaches it is held there
    try:
        with ThreadPoolExecutor(4) as pool:
            while busy.stats.hung == 0:  # round robin: one of the first requests gets there

                def ocr() -> int:
                    with httpx.Client(
                        base_url=setup.gateway.url, timeout=60, trust_env=False, headers=AUTH
                    ) as c:
                        return c.post("/ocr", json={"base64": PNG}).status_code

                pool.submit(ocr)
                time.sleep(0.2)
            insts = draining.targets(fleet, [], [0])
            ok = draining.recycle(
                fleet, insts, ADMIN, lambda m: None, restart=restarted.append, drain_wait_s=0.3
            )
            busy.knobs.hang = False
    finally:
        busy.knobs.hang = False
    assert not ok and restarted == []
    assert "drained" not in setup.states().values()  # undrained again
    # The undrain probed the instance while it still held the request: healthy again once it
    # answers its probes.
    assert wait_for(lambda: set(setup.states().values()) == {"healthy"}, timeout=30)


def test_recycle_cli_restarts_the_container_and_undrains(
    setup: Setup, fake_docker: FakeDocker, capsys: pytest.CaptureFixture[str]
) -> None:
    port = setup.ports(1)[0]
    assert main(["recycle", "--outputs", str(setup.outputs), str(port), "--wait", "30"]) == 0
    printed = capsys.readouterr().out
    assert "local card 1: drained" in printed and "local card 1: undrained" in printed
    assert ["restart", f"paddle-{port}-sim-1"] in fake_docker.argvs()
    assert set(setup.states().values()) == {"healthy"}
