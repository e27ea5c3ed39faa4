"""The uvicorn adapter (gateway/wire/uvicorn_adapter.py): the installed uvicorn and Starlette
pass its check; a changed private hook is named and turns off what needs it; ``GATEWAY_FAST_PATH=0``
serves every route through FastAPI's routing; the fast path keeps uvicorn's
``reset_contextvars``; and a real ``python -m gateway`` in fallback mode serves ``/ocr``."""

from __future__ import annotations

import base64
import contextvars
import json
import logging
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
import uvicorn.protocols.http.httptools_impl as httptools_impl
from starlette.requests import Request
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from gateway.config.settings import ServerSettings, parse_settings
from gateway.server.app import create_app
from gateway.server.connections import (
    BoundedHttpToolsProtocol,
    GatewayHttpToolsProtocol,
    protocol_class,
)
from gateway.wire import uvicorn_adapter as adapter
from tests.doubles.paddlex_double import PaddlexDouble
from tests.doubles.servers import bind_loopback
from tests.gateway.conftest import gateway_config
from tests.gateway.samples import png_bytes

ROOT = Path(__file__).resolve().parents[2]


def test_the_installed_uvicorn_and_starlette_pass_the_check():
    adapter.require()
    assert adapter.installed_versions() == adapter.WRITTEN_FOR  # the pins and the adapter agree


class NoShouldUpgrade(HttpToolsProtocol):
    _should_upgrade = None


class OldStartTask(HttpToolsProtocol):
    def _start_asgi_task(self, cycle: Any) -> None:  # type: ignore[override]
        raise AssertionError("not called with two arguments")


class NoKeepaliveHook(H11Protocol):
    _unset_keepalive_if_required = None


class IgnoresBody(Request):
    async def body(self) -> bytes:
        return b"read again"


class NoResetContextvars(uvicorn.Config):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        del self.reset_contextvars


@pytest.mark.parametrize(
    ("classes", "named", "tier"),
    [
        ({"HttpToolsProtocol": NoShouldUpgrade}, "HttpToolsProtocol._should_upgrade", "fast"),
        ({"HttpToolsProtocol": OldStartTask}, "HttpToolsProtocol._start_asgi_task", "fast"),
        ({"H11Protocol": NoKeepaliveHook}, "H11Protocol._unset_keepalive_if_required", "bounds"),
        ({"Request": IgnoresBody}, "Request._body", "fast"),
        ({"Config": NoResetContextvars}, "Config.reset_contextvars", "fast"),
    ],
    ids=["_should_upgrade", "_start_asgi_task", "_unset_keepalive", "_body", "reset_contextvars"],
)
def test_a_changed_hook_is_named_and_turns_off_what_needs_it(classes, named, tier, caplog):
    fake = adapter.Classes(**classes)
    with pytest.raises(adapter.AdapterMismatch, match=re.escape(named)):
        adapter.require(fake)
    with caplog.at_level(logging.WARNING, logger="gateway.wire.uvicorn_adapter"):
        plan = adapter.serving_plan(fake)
    assert not plan.fast and plan.bounds == (tier == "fast")
    assert any(named in reason for reason in plan.reasons)
    assert any(named in record.getMessage() for record in caplog.records)
    if tier == "bounds":  # uvicorn's stock protocol, by name
        assert protocol_class(ServerSettings, "httptools", None, plan) == "httptools"


def test_a_cycle_field_uvicorn_stopped_setting_is_named(monkeypatch):
    """An attribute is seen on a live request cycle, not read from the source."""

    class Cycle(httptools_impl.RequestResponseCycle):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.response_begun = self.__dict__.pop("response_started")

    monkeypatch.setattr(httptools_impl, "RequestResponseCycle", Cycle)
    problems = adapter.check()
    assert problems["bounds"] == []
    assert problems["fast"] == [
        "RequestResponseCycle.response_started (attribute, fast): not found on a live instance"
    ]


def test_the_env_switch_serves_every_route_through_fastapi(monkeypatch):
    monkeypatch.setenv(adapter.FAST_PATH_ENV, "0")
    app = create_app(parse_settings(gateway_config(["http://127.0.0.1:9"])))
    assert app.hot == {} and app.state.hot is None
    assert not app.state.serving_plan.fast and app.state.serving_plan.bounds
    served_by = protocol_class(ServerSettings, "httptools", None, app.state.serving_plan)
    assert isinstance(served_by, type) and issubclass(served_by, BoundedHttpToolsProtocol)
    assert not issubclass(served_by, GatewayHttpToolsProtocol)  # the bounds stay, not the rest
    monkeypatch.setenv(adapter.FAST_PATH_ENV, "1")
    assert create_app(parse_settings(gateway_config(["http://127.0.0.1:9"]))).hot


MARK: contextvars.ContextVar[str] = contextvars.ContextVar("mark", default="fresh")


class Claiming(adapter.HttpToolsBase):
    """Serves ``/claimed`` from the cycle (as the hot path does), anything else through ASGI."""

    def claim(self, exchange: adapter.Exchange) -> Any:
        if exchange.scope["path"] != "/claimed":
            return None

        async def serve() -> None:
            body = MARK.get().encode()
            head = b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % len(body)
            exchange.write_whole(head, body)

        return serve()


async def asgi_mark(scope: Any, receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    body = MARK.get().encode()
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": body})


@pytest.mark.parametrize("reset", [False, True], ids=["kept", "reset"])
def test_a_claimed_request_sees_the_context_uvicorn_gives_an_asgi_request(reset):
    """uvicorn 0.54 runs each request in an empty context under ``reset_contextvars``; a
    request the fast path claims must too (and keep the server's context otherwise)."""
    sock = bind_loopback()
    config = uvicorn.Config(
        asgi_mark, http=Claiming, lifespan="off", log_level="critical", reset_contextvars=reset
    )
    server = uvicorn.Server(config)

    def run() -> None:
        MARK.set("server")  # the context the server's tasks start from
        server.run(sockets=[sock])

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        with httpx.Client(base_url=url, trust_env=False, timeout=10) as client:
            deadline = time.monotonic() + 10
            while not server.started:
                assert time.monotonic() < deadline
                time.sleep(0.01)
            claimed, asgi = client.get("/claimed").text, client.get("/other").text
    finally:
        server.should_exit = True
        thread.join(10)
    assert claimed == asgi == ("fresh" if reset else "server")


def test_a_real_gateway_in_fallback_mode_serves_ocr(tmp_path):
    """``python -m gateway`` with GATEWAY_FAST_PATH=0, in front of a PaddleX double."""
    double = PaddlexDouble().start()
    config = tmp_path / "gateway.json"
    config.write_text(json.dumps({**gateway_config([double.url]), "reload": {"enabled": False}}))
    env = {**os.environ, adapter.FAST_PATH_ENV: "0", "PYTHONPATH": str(ROOT)}
    # port 0: the process binds a free port and logs it ("Uvicorn running on"), no race
    command = [sys.executable, "-m", "gateway", "--config", str(config)]
    command += ["--host", "127.0.0.1", "--port", "0", "--log-level", "info"]
    log = tmp_path / "gateway.log"
    with log.open("w") as out:
        proc = subprocess.Popen(command, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while not (found := re.search(r"running on http://127\.0\.0\.1:(\d+)", log.read_text())):
            assert proc.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.05)
        url = f"http://127.0.0.1:{found.group(1)}"
        with httpx.Client(base_url=url, trust_env=False, timeout=30) as client:
            while client.get("/ready").status_code != 200:
                assert time.monotonic() < deadline, log.read_text()
                time.sleep(0.05)
            document = base64.b64encode(png_bytes()).decode()
            answer = client.post("/ocr", json={"base64": document})
            unknown = client.post("/ocr", content=b"{", headers={"content-type": "x/y"})
    finally:
        proc.terminate()
        proc.wait(30)
        double.stop()
    assert answer.status_code == 200, answer.text
    assert answer.json()["text"] == f"double-{double.port} page 1/1"
    assert answer.json()["upstream"] == double.url and answer.headers["x-request-id"]
    assert unknown.status_code == 400 and unknown.json()["error"]["code"] == "invalid_json"
    assert len(double.layout_requests()) == 1
    assert f"{adapter.FAST_PATH_ENV}=0: every route is served through FastAPI" in log.read_text()
