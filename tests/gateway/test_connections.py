"""Slow and greedy clients: header and body deadlines, connection caps and malformed requests,
each answered with the JSON error body, over raw loopback sockets."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
import time

import pytest

from gateway.config.settings import ServerSettings
from gateway.server.connections import BODY_HANDOFF_BYTES, protocol_class
from tests.doubles.servers import ServerThread
from tests.gateway.conftest import fast_path_only, gateway_config
from tests.gateway.samples import b64, png_bytes
from tests.waiting import wait_for

PNG = b64(png_bytes())


@pytest.fixture(params=["httptools", "h11"])
def http_impl(request: pytest.FixtureRequest) -> str:
    """Both uvicorn protocols carry the bounds (server.http)."""
    return request.param


def connect(port: int, source: str = "127.0.0.1") -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=60, source_address=(source, 0))
    return sock


def read_all(sock: socket.socket) -> bytes:
    """Everything until the gateway closes the connection (bounded by the socket timeout)."""
    data = b""
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except (ConnectionResetError, TimeoutError):
        pass
    return data


def parse(raw: bytes) -> tuple[int, dict[str, str], dict]:
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = dict(line.split(": ", 1) for line in lines[1:])
    headers = {k.lower(): v for k, v in headers.items()}
    return int(lines[0].split()[1]), headers, json.loads(body)


def test_slow_headers_and_idle_connections_are_cut(fleet, start_gateway, http_impl):
    gw = start_gateway(
        gateway_config(fleet.urls, server={"header_timeout_s": 1, "http": http_impl})
    )
    slow = connect(gw.server.port)
    slow.sendall(b"POST /ocr HTTP/1.1\r\nHost: x\r\nContent-Type: appl")
    idle = connect(gw.server.port)
    status, headers, body = parse(read_all(slow))
    assert status == 408 and body["error"]["code"] == "header_timeout"
    assert "server.header_timeout_s" in body["error"]["message"] and body["request_id"]
    assert headers["connection"] == "close"
    assert read_all(idle) == b""  # never sent a byte: closed without an answer
    assert gw.client.post("/ocr", json={"base64": PNG}).status_code == 200


def dribble(sock: socket.socket, stop: threading.Event) -> threading.Thread:
    """Send one byte every 0.1 s until the gateway closes the connection or ``stop``."""

    def run() -> None:
        try:
            while not stop.wait(0.1):
                sock.sendall(b"x")
        except OSError:
            pass

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_a_dribbling_body_is_cut_with_408(fleet, start_gateway, http_impl):
    gw = start_gateway(gateway_config(fleet.urls, server={"body_timeout_s": 1, "http": http_impl}))
    sock = connect(gw.server.port)
    sock.sendall(
        b"POST /ocr HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b'Content-Length: 100000\r\n\r\n{"base64": "'
    )
    stop = threading.Event()
    dribble(sock, stop)
    try:
        status, headers, body = parse(read_all(sock))
    finally:
        stop.set()
    assert status == 408 and body["error"]["code"] == "body_timeout"
    assert "server.body_timeout_s" in body["error"]["message"]
    assert headers["connection"] == "close"
    assert all(not d.requests for d in fleet.doubles)


def test_a_body_dribbling_after_an_early_answer_is_cut(fleet, start_gateway, http_impl):
    token = {"name": "t", "sha256": "0" * 64}
    gw = start_gateway(
        gateway_config(
            fleet.urls, server={"body_timeout_s": 1, "http": http_impl}, auth={"tokens": [token]}
        )
    )
    sock = connect(gw.server.port)
    sock.sendall(b"POST /ocr HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n{")
    stop = threading.Event()
    dribble(sock, stop)
    try:
        raw = read_all(sock)  # the 401 comes at once; the connection closes some seconds later
    finally:
        stop.set()
    assert raw.startswith(b"HTTP/1.1 401")


def test_many_dribbling_connections_do_not_stop_normal_requests(fleet, start_gateway, http_impl):
    gw = start_gateway(
        gateway_config(fleet.urls, server={"header_timeout_s": 3, "http": http_impl})
    )
    stop = threading.Event()
    dribblers = []
    for _ in range(40):
        sock = connect(gw.server.port, source="127.0.0.2")
        sock.sendall(b"GET /health HTTP/1.1\r\n")
        dribble(sock, stop)
        dribblers.append(sock)
    try:
        for _ in range(5):
            assert gw.client.post("/ocr", json={"base64": PNG}).status_code == 200
        answers = [read_all(sock) for sock in dribblers]  # each cut at its deadline
    finally:
        stop.set()
        for sock in dribblers:
            sock.close()
    assert all(a.startswith(b"HTTP/1.1 408") for a in answers)


def test_connection_caps(fleet, start_gateway, http_impl):
    gw = start_gateway(
        gateway_config(
            fleet.urls,
            server={"max_connections_per_client": 3, "max_connections": 8, "http": http_impl},
        )
    )
    held = [connect(gw.server.port, source="127.0.0.2") for _ in range(3)]
    assert wait_for(lambda: len(gw.server.server.server_state.connections) >= 3)
    extra = connect(gw.server.port, source="127.0.0.2")
    status, headers, body = parse(read_all(extra))
    assert status == 429 and body["error"]["code"] == "too_many_connections"
    assert "server.max_connections_per_client" in body["error"]["message"]
    assert headers["retry-after"] == "1"
    # another client is served meanwhile
    assert gw.client.post("/ocr", json={"base64": PNG}).status_code == 200
    more = [connect(gw.server.port, source=f"127.0.0.{n}") for n in (3, 4, 5, 6)]
    assert wait_for(lambda: len(gw.server.server.server_state.connections) >= 8)
    over = connect(gw.server.port, source="127.0.0.7")
    status, _, body = parse(read_all(over))
    assert status == 503 and "server.max_connections" in body["error"]["message"]
    for sock in held + more:
        sock.close()


def test_malformed_and_oversized_requests_get_the_json_body(fleet, start_gateway, http_impl):
    gw = start_gateway(
        gateway_config(fleet.urls, server={"max_header_bytes": 4096, "http": http_impl})
    )
    big = b"GET /health HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 10000 + b"\r\n\r\n"
    for raw, status, code in (
        (b"GARBAGE\r\n\r\n", 400, "bad_http_request"),
        (big, 431, "headers_too_large"),  # in one piece
        (big[:3000], 431, "headers_too_large"),  # then the rest below
    ):
        sock = connect(gw.server.port)
        sock.sendall(raw)
        if len(raw) == 3000:  # whether the parts arrive apart or together: 431 either way
            with contextlib.suppress(OSError):
                sock.sendall(big[3000:])
        answer = parse(read_all(sock))
        assert (answer[0], answer[2]["error"]["code"]) == (status, code)
        assert "server.max_header_bytes" in answer[2]["error"]["message"] or status == 400
    for path, method in (("/nowhere", "GET"), ("/ocr", "GET")):
        r = gw.client.request(method, path)
        assert r.status_code in (404, 405) and r.json()["error"]["code"] in (
            "not_found",
            "method_not_allowed",
        )


class BodyRecorder:
    """An ASGI app that answers 200 after reading the whole body, noting each piece's size."""

    def __init__(self) -> None:
        self.pieces: list[list[int]] = []

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return
        sizes: list[int] = []
        more = True
        while more:
            message = await receive()
            sizes.append(len(message.get("body", b"")))
            more = message.get("more_body", False)
        self.pieces.append(sizes)
        answer = str(sum(sizes)).encode()
        headers = [(b"content-length", str(len(answer)).encode())]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": answer})


def send_in_pieces(port: int, body: bytes, piece: int, pause_s: float) -> bytes:
    sock = connect(port)
    with sock:
        sock.sendall(b"POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(body))
        for at in range(0, len(body), piece):
            sock.sendall(body[at : at + piece])
            time.sleep(pause_s)
        sock.shutdown(socket.SHUT_WR)
        return read_all(sock)


@fast_path_only
def test_the_body_reaches_the_app_in_one_piece_up_to_the_handoff_size():
    app = BodyRecorder()
    server = ServerThread(app, http=protocol_class(ServerSettings)).start()
    try:
        small = os.urandom(600_000)  # sent in 30 pieces with pauses: uvicorn hands over 30
        assert send_in_pieces(server.port, small, 20_000, 0.002).endswith(b"600000")
        large = os.urandom(BODY_HANDOFF_BYTES * 2 + 1000)
        assert send_in_pieces(server.port, large, 1 << 20, 0).endswith(b"%d" % len(large))
    finally:
        server.stop()
    assert app.pieces[0] == [600_000]
    assert sum(app.pieces[1]) == len(large) and 2 <= len(app.pieces[1]) <= 3
    assert all(size < BODY_HANDOFF_BYTES + (1 << 20) for size in app.pieces[1])
