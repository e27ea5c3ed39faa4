"""The hot routes served from uvicorn's request cycle (gateway/server/hot_path.py ``HotServer``),
over raw loopback sockets: the same answers as the ASGI way, keep-alive, pipelining, ``Expect:
100-continue``, ``Connection: close`` and a failing handler."""

from __future__ import annotations

import json
import socket
from typing import Any

from gateway.server.hot_path import GatewayApp
from tests.gateway.conftest import fast_path_only, gateway_config
from tests.gateway.samples import b64, png_bytes

BODY = json.dumps({"file": b64(png_bytes()), "fileType": 1}).encode()
OCR_BODY = json.dumps({"base64": b64(png_bytes())}).encode()


def post(path: str, body: bytes = BODY, *extra: str) -> bytes:
    head = [f"POST {path} HTTP/1.1", "Host: gw", "Content-Type: application/json"]
    head += [f"Content-Length: {len(body)}", *extra]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


class Wire:
    """A raw connection to the gateway that reads whole responses (Content-Length bodies)."""

    def __init__(self, url: str) -> None:
        host, port = url.removeprefix("http://").split(":")
        self.sock = socket.create_connection((host, int(port)), timeout=30)
        self.buffer = b""

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def _fill(self) -> bool:
        chunk = self.sock.recv(65536)
        self.buffer += chunk
        return bool(chunk)

    def response(self) -> tuple[int, dict[str, str], bytes]:
        while b"\r\n\r\n" not in self.buffer:
            assert self._fill(), f"closed before a response: {self.buffer!r}"
        head, _, self.buffer = self.buffer.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        headers = {k.lower(): v for k, v in (line.split(": ", 1) for line in lines[1:])}
        size = int(headers.get("content-length", "0"))
        while len(self.buffer) < size:
            assert self._fill(), "closed inside a body"
        body, self.buffer = self.buffer[:size], self.buffer[size:]
        return int(lines[0].split()[1]), headers, body

    def closed(self) -> bool:
        return not self.buffer and not self._fill()

    def close(self) -> None:
        self.sock.close()


def without_asgi_hot_routes(app: GatewayApp) -> None:
    """Make the ASGI way of the hot routes answer 599, so that a 200 proves the other way."""

    async def refuse(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 599, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    app._hot_app = refuse


@fast_path_only
def test_hot_routes_skip_asgi_and_answer_as_the_asgi_way_does(fleet, start_gateway):
    gw = start_gateway(gateway_config(fleet.urls[:1]))  # one upstream: the same answer twice
    wire = Wire(gw.url)
    wire.send(post("/layout-parsing", BODY, "X-Request-ID: hot-1"))
    hot = wire.response()
    wire.send(post("/layout-parsing", BODY, "X-Request-ID: asgi-1", "X-Forwarded-For: 10.1.2.3"))
    asgi = wire.response()
    assert hot[0] == asgi[0] == 200
    assert hot[1]["x-request-id"] == "hot-1" and asgi[1]["x-request-id"] == "asgi-1"
    assert set(hot[1]) == set(asgi[1])  # the same headers (server, date, x-gateway-*, ...)
    assert json.loads(hot[2])["result"] == json.loads(asgi[2])["result"]

    without_asgi_hot_routes(gw.app)
    wire.send(post("/layout-parsing"))
    assert wire.response()[0] == 200
    wire.send(post("/layout-parsing", BODY, "X-Forwarded-For: 10.1.2.3"))
    assert wire.response()[0] == 599  # a forwarded request takes the ASGI way
    wire.close()
    counted = [
        line
        for line in gw.client.get("/metrics").text.splitlines()
        if line.startswith("gateway_requests_total") and 'route="/layout-parsing"' in line
    ]
    assert len(counted) == 1 and 'code="200"' in counted[0] and counted[0].endswith(" 3.0")


def test_pipelined_requests_are_answered_in_order_on_one_connection(fleet, start_gateway):
    gw = start_gateway(gateway_config(fleet.urls))
    without_asgi_hot_routes(gw.app)
    wire = Wire(gw.url)
    health = b"GET /health HTTP/1.1\r\nHost: gw\r\n\r\n"
    bad = post("/layout-parsing", b'{"file": 12}')
    opening = post("/layout-parsing", BODY, "X-Request-ID: p1")
    wire.send(opening + health + bad + post("/ocr", OCR_BODY))
    first, second, third, fourth = (wire.response() for _ in range(4))
    assert (first[0], first[1]["x-request-id"]) == (200, "p1")
    assert second[0] == 200 and json.loads(second[2])["status"] in ("ok", "degraded")
    assert third[0] == 422  # PaddleX's own answer to a file that is not a string
    assert fourth[0] == 200 and "text" in json.loads(fourth[2])
    wire.close()


def test_expect_100_continue_gets_its_interim_answer(fleet, start_gateway):
    gw = start_gateway(gateway_config(fleet.urls))
    without_asgi_hot_routes(gw.app)
    wire = Wire(gw.url)
    head = post("/layout-parsing", b"", "Expect: 100-continue").replace(
        b"Content-Length: 0", b"Content-Length: %d" % len(BODY)
    )
    wire.send(head)
    while b"\r\n\r\n" not in wire.buffer:
        assert wire._fill()
    assert wire.buffer.startswith(b"HTTP/1.1 100 Continue\r\n\r\n")
    wire.buffer = wire.buffer.removeprefix(b"HTTP/1.1 100 Continue\r\n\r\n")
    wire.send(BODY)
    assert wire.response()[0] == 200
    wire.close()


def test_connection_close_and_http_1_0_end_the_connection_after_the_answer(fleet, start_gateway):
    gw = start_gateway(gateway_config(fleet.urls))
    without_asgi_hot_routes(gw.app)
    for request in (
        post("/layout-parsing", BODY, "Connection: close"),
        post("/layout-parsing").replace(b"HTTP/1.1", b"HTTP/1.0", 1),
    ):
        wire = Wire(gw.url)
        wire.send(request)
        status, headers, _ = wire.response()
        assert (status, headers["connection"]) == (200, "close")
        assert wire.closed()
        wire.close()


def test_a_failing_handler_is_a_json_500_and_the_connection_stays_usable(fleet, start_gateway):
    gw = start_gateway(gateway_config(fleet.urls))

    async def broken(request: Any) -> Any:
        raise ValueError("broken on purpose")

    gw.app.hot["/restructure-pages"] = broken
    wire = Wire(gw.url)
    wire.send(post("/restructure-pages", b'{"pages": []}', "X-Request-ID: boom"))
    status, headers, body = wire.response()
    assert (status, headers["x-request-id"]) == (500, "boom")
    assert json.loads(body)["error"]["code"] == "internal_error"
    wire.send(post("/layout-parsing"))
    assert wire.response()[0] == 200
    wire.close()
