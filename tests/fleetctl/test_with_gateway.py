"""fleetctl against the real gateway (gateway.server.app.create_app) in front of PaddleX doubles."""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fleetctl import batch
from fleetctl.cli import main
from fleetctl.client import AsyncClient, AuthError, Client, OcrError, RetryPolicy
from gateway.config.settings import parse_settings
from gateway.server.app import create_app
from tests.doubles.paddlex_double import DoubleFleet
from tests.doubles.servers import ServerThread
from tests.fleetctl.conftest import FakeDocker, one_card_topology
from tests.fleetctl.fakes import fake_vllm
from tests.gateway.conftest import gateway_config
from tests.gateway.samples import pdf_bytes, png_bytes
from tests.ports import free_port


def png(gray: int = 0) -> bytes:
    """A small PNG of one gray level, so documents differ by content."""
    return png_bytes(40, 20, (gray, gray, gray))


def config(upstreams: list[Any], **lb: Any) -> dict[str, Any]:
    """The gateway tests' config, with 4 attempts and ``lb`` in ``load_balance``."""
    return gateway_config(upstreams, load_balance={"max_attempts": 4, **lb})


class Gateway:
    def __init__(self, cfg: dict[str, Any]) -> None:
        self.server = ServerThread(create_app(parse_settings(cfg))).start()
        self.url = self.server.url

    def stop(self) -> None:
        self.server.stop()


@pytest.fixture
def doubles() -> Iterator[DoubleFleet]:
    with DoubleFleet(2, service_time_s=0.02) as d:
        yield d


@pytest.fixture
def gateway(doubles: DoubleFleet) -> Iterator[Gateway]:
    gw = Gateway(config(doubles.urls))
    yield gw
    gw.stop()


def test_client_through_real_gateway(gateway: Gateway, tmp_path: Path) -> None:
    f = tmp_path / "three.pdf"
    f.write_bytes(pdf_bytes(3))
    with Client(gateway.url, trust_env=False) as c:
        r = c.ocr(f)
        assert r.pages == 3 and r.upstream and r.request_id and "double-" in r.text
        assert c.ocr(png()).pages == 1
        with pytest.raises(OcrError) as ei:
            c.ocr(b"this is not a document")
    assert 400 <= ei.value.status < 500 and ei.value.attempts == 1 and ei.value.code


def test_batch_through_real_gateway(
    gateway: Gateway, doubles: DoubleFleet, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src, out = tmp_path / "in", tmp_path / "out"
    (src / "a" / "b").mkdir(parents=True)
    (src / "one.png").write_bytes(png(10))
    (src / "a" / "two.pdf").write_bytes(pdf_bytes(2))
    (src / "a" / "b" / "three.png").write_bytes(png(200))
    # passes fleetctl's magic-byte check, but no image decoder can read it: the upstream
    # refuses it (4xx) and that must not stop the batch
    (src / "a" / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\n" + b"\0" * 64)
    code = main(
        ["ocr", str(src), "--out", str(out), "--gateway", gateway.url, "--no-progress", "-c", "3"]
    )
    assert code == 1
    got = sorted(str(p.relative_to(out)) for p in out.rglob("*.md"))
    assert got == ["a/b/three.md", "a/two.md", "one.md"]
    assert "double-" in (out / "a/two.md").read_text()
    (rep,) = [json.loads(x) for x in (out / batch.REPORT_NAME).read_text().splitlines()]
    assert rep["file"].endswith("broken.png") and 400 <= rep["status"] < 500
    assert "3 done (4 pages), 1 failed" in capsys.readouterr().err
    served = sum(len(d.layout_requests()) for d in doubles)
    assert served >= 3


def test_503_retry_after_from_real_gateway(doubles: DoubleFleet, tmp_path: Path) -> None:
    for d in doubles:
        d.knobs.service_time_s = 0.3
    gw = Gateway(config(doubles.urls, mode="queue", upstream_concurrency=1, queue_max_depth=0))
    try:
        jobs = []
        for i in range(6):
            f = tmp_path / f"{i}.png"
            f.write_bytes(png(i * 20))
            jobs.append(batch.Job(f, tmp_path / "out" / f"{i}.md"))
        summary = batch.Summary()

        async def go() -> None:
            policy = RetryPolicy(max_attempts=10, max_retry_after=2)
            async with AsyncClient(
                gw.url, retry=policy, on_retry=summary.on_retry, trust_env=False
            ) as c:
                await batch.run(jobs, c, concurrency=6, summary=summary, progress=False)

        asyncio.run(go())
    finally:
        gw.stop()
    assert summary.failures == [] and summary.done == 6
    assert summary.retries >= 4  # 2 upstreams, no queue: 4 of the first 6 got 503


def test_status_and_verify_with_real_gateway(
    doubles: DoubleFleet,
    tmp_path: Path,
    fake_docker: FakeDocker,
    capsys: pytest.CaptureFixture[str],
) -> None:
    with ServerThread(fake_vllm()) as vllm:
        ups = [
            {
                "url": d.url,
                "host": "local",
                "card": 0,
                "vllm": vllm.url,
                "container": f"paddle-{d.port}-sim-0",
            }
            for d in doubles
        ]
        gw = Gateway(config(ups))
        try:
            paddlex = [
                {
                    "port": d.port,
                    "url": d.url,
                    "container": f"paddle-{d.port}-sim-0",
                    "start_command": "true",
                }
                for d in doubles
            ]
            topo = one_card_topology(
                [
                    {
                        "port": vllm.port,
                        "url": vllm.url,
                        "paddlex": paddlex,
                        "container": f"vllm-sim-paddleocr-{vllm.port}-sim-0",
                    }
                ],
                gateway={
                    "host": "local",
                    "port": gw.server.port,
                    "url": gw.url,
                    "container": "paddleocr-fleet-gateway",
                },
            )
            outputs = tmp_path / "outputs.json"
            outputs.write_text(json.dumps({"gateway_url": gw.url, "topology": topo}))
            names = [f"paddle-{d.port}-sim-0" for d in doubles]
            fake_docker.set_states(
                {
                    n: "running"
                    for n in [
                        *names,
                        f"vllm-sim-paddleocr-{vllm.port}-sim-0",
                        "paddleocr-fleet-gateway",
                    ]
                }
            )
            assert main(["status", "--outputs", str(outputs), "--json"]) == 0
            rows = json.loads(capsys.readouterr().out)["instances"]
            views = {r["port"]: r["gateway"] for r in rows}
            assert views[doubles[0].port].startswith("healthy")
            assert views[vllm.port] == "2/2 paddlex healthy"
            assert views[gw.server.port].startswith("mode round_robin")
            assert main(["verify", "--outputs", str(outputs)]) == 0
            assert "4/4 passed" in capsys.readouterr().out
            assert all(len(d.layout_requests()) >= 1 for d in doubles)
            doubles[1].stop()
            assert main(["status", "--outputs", str(outputs), "--json"]) == 1
            rows = json.loads(capsys.readouterr().out)["instances"]
            down = next(r for r in rows if r["port"] == doubles[1].port)
            assert not down["ok"] and down["health"].startswith("down")
        finally:
            gw.stop()


def test_tokens_with_real_gateway(
    doubles: DoubleFleet,
    tmp_path: Path,
    fake_docker: FakeDocker,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    user, admin = "u-" + "5" * 30, "a-" + "9" * 30
    auth = {
        "tokens": [{"name": "team-a", "sha256": hashlib.sha256(user.encode()).hexdigest()}],
        "admin_tokens": [{"name": "ops", "sha256": hashlib.sha256(admin.encode()).hexdigest()}],
    }
    ups = [{"url": d.url, "container": f"paddle-{d.port}-sim-0"} for d in doubles]
    gw = Gateway(gateway_config(ups, auth=auth))
    try:
        with Client(gw.url, token=user, trust_env=False) as c:
            assert c.ocr(png()).pages == 1
        with Client(gw.url, token="", trust_env=False) as c, pytest.raises(AuthError) as ei:
            c.ocr(png())
        assert ei.value.status == 401 and "set --token or PADDLEOCR_FLEET_TOKEN" in str(ei.value)

        topo = one_card_topology(
            [
                {
                    "port": free_port(),  # no vLLM: the selections below leave it out
                    "paddlex": [
                        {"port": d.port, "url": d.url, "container": f"paddle-{d.port}-sim-0"}
                        for d in doubles
                    ],
                }
            ],
            gateway={"host": "local", "port": gw.server.port, "url": gw.url},
        )
        outputs = tmp_path / "outputs.json"
        outputs.write_text(json.dumps({"gateway_url": gw.url, "topology": topo}))
        fake_docker.set_states({f"paddle-{d.port}-sim-0": "running" for d in doubles})
        sel = ["--outputs", str(outputs), "--kind", "paddlex"]
        monkeypatch.setenv("PADDLEOCR_FLEET_TOKEN", user)
        assert main(["status", *sel, "--json"]) == 1  # a user token is no admin token
        data = json.loads(capsys.readouterr().out)
        assert "HTTP 403" in data["gateway_error"] and "--admin-token" in data["gateway_error"]
        monkeypatch.setenv("PADDLEOCR_FLEET_ADMIN_TOKEN", admin)
        assert main(["status", *sel, "--json"]) == 0
        rows = json.loads(capsys.readouterr().out)["instances"]
        assert [r["gateway"] for r in rows] == ["healthy", "healthy"]
        assert main(["verify", "--outputs", str(outputs), "--kind", "gateway"]) == 0
        assert main(["ports", "--outputs", str(outputs), "--kind", "gateway", "--json"]) == 0
        out, err = capsys.readouterr()
        assert "1/1 passed" in out and '"gateway answers"' in out
        assert user not in out + err and admin not in out + err
    finally:
        gw.stop()
