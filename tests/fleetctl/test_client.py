"""The Python API against a real HTTP server on loopback (the fake gateway)."""

from __future__ import annotations

import asyncio
import base64
import threading
import time
from pathlib import Path

import pytest

from fleetctl.client import AsyncClient, Client, OcrError, RetryPolicy, parse_retry_after, sniff
from tests.doubles.servers import ServerThread, bind_loopback
from tests.fleetctl.conftest import JPEG, PDF, PNG, doc
from tests.fleetctl.fakes import expected_text, fake_gateway

FAST = RetryPolicy(max_attempts=4, backoff_base=0.05, backoff_max=0.2)


def test_ocr_path_bytes_and_url(gateway: ServerThread, tmp_path: Path) -> None:
    data = doc(PNG, "hello")
    f = tmp_path / "scan.png"
    f.write_bytes(data)
    with Client(gateway.url) as c:
        r = c.ocr(f)
        assert r.text == expected_text("scan.png", data)
        assert r.pages == 1 and r.upstream == "http://fake:1" and r.request_id
        assert r.client_attempts == 1
        assert c.ocr(data, filename="x.png").text == expected_text("x.png", data)
        assert c.ocr(data).text == expected_text("upload.png", data)
        assert c.ocr(url="https://example.test/a.png").text.startswith("# url")
        assert c.ocr(server_path="/data/a.png").text.startswith("# local_path")
        with pytest.raises(ValueError):
            c.ocr(f, url="https://example.test/a.png")
    endpoints = [e for e, _, _ in gateway.app.state.requests]
    assert endpoints == ["/ocr-file"] * 3 + ["/ocr"] * 2


def test_4xx_is_final_and_carries_the_error_envelope(gateway: ServerThread) -> None:
    with Client(gateway.url, retry=FAST) as c, pytest.raises(OcrError) as ei:
        c.ocr(doc(PNG, "FAIL400"))
    e = ei.value
    assert (e.status, e.code, e.attempts) == (400, "bad_input", 1)
    assert e.request_id and "cannot decode" in str(e)
    assert len(gateway.app.state.requests) == 1


def test_500_is_not_retried(gateway: ServerThread) -> None:
    with Client(gateway.url, retry=FAST) as c, pytest.raises(OcrError) as ei:
        c.ocr(doc(PDF, "FAIL500"))
    assert ei.value.status == 500 and len(gateway.app.state.requests) == 1


def test_503_waits_for_retry_after(gateway: ServerThread) -> None:
    retries: list[tuple[int, float, str]] = []
    data = doc(JPEG, "BUSY1")
    with Client(gateway.url, retry=FAST, on_retry=lambda *a: retries.append(a)) as c:
        t0 = time.monotonic()
        r = c.ocr(data)
        took = time.monotonic() - t0
    assert r.client_attempts == 2 and r.text == expected_text("upload.jpeg", data)
    assert took >= 1.0  # Retry-After: 1 honoured, not the 0.05 s back-off
    assert len(retries) == 1 and 1.0 <= retries[0][1] <= 1.1 and "503" in retries[0][2]


def test_503_gives_up_after_max_attempts(gateway: ServerThread) -> None:
    policy = RetryPolicy(max_attempts=2, max_retry_after=0.1)
    with Client(gateway.url, retry=policy) as c, pytest.raises(OcrError) as ei:
        c.ocr(doc(PNG, "BUSY9"))
    assert ei.value.status == 503 and ei.value.attempts == 2
    assert len(gateway.app.state.requests) == 2


def test_transport_errors_back_off_until_the_server_comes_up() -> None:
    # The port stays ours (bound, not listening: connections are refused) until the server
    # starts listening on that very socket, so nothing else can take it in between.
    sock = bind_loopback()
    port = sock.getsockname()[1]
    box: dict[str, ServerThread] = {}

    def later() -> None:
        time.sleep(0.5)
        box["s"] = ServerThread(fake_gateway(), sock=sock).start()

    starter = threading.Thread(target=later, daemon=True)
    starter.start()
    retries: list[tuple[int, float, str]] = []
    # Enough attempts to outlast a slow server start on a busy 2-core machine (about 12 s).
    policy = RetryPolicy(max_attempts=30, backoff_base=0.1, backoff_max=0.4)
    try:
        with Client(
            f"http://127.0.0.1:{port}", retry=policy, on_retry=lambda *a: retries.append(a)
        ) as c:
            r = c.ocr(doc(PNG))
        assert r.client_attempts >= 2 and retries
        assert all("transport error" in m for _, _, m in retries)
        delays = [d for _, d, _ in retries]
        assert all(0.05 <= d <= 0.4 for d in delays)
    finally:
        starter.join(timeout=60)
        if "s" in box:
            box["s"].stop()
        sock.close()


def test_transport_error_is_bounded() -> None:
    policy = RetryPolicy(max_attempts=3, backoff_base=0.01, backoff_max=0.02)
    with bind_loopback() as sock:  # bound, never listening: every connection is refused
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        with Client(url, retry=policy) as c, pytest.raises(OcrError) as ei:
            c.ocr(doc(PNG))
    assert ei.value.status is None and ei.value.attempts == 3 and ei.value.code == "transport"


def test_ocr_many_sync_and_async(gateway: ServerThread, tmp_path: Path) -> None:
    files = []
    for i in range(6):
        f = tmp_path / f"{i}.png"
        f.write_bytes(doc(PNG, "FAIL400" if i == 3 else f"n{i}"))
        files.append(f)
    with Client(gateway.url, retry=FAST) as c:
        outs = c.ocr_many(files, concurrency=3)
    assert [o.source for o in outs] == files
    assert [o.ok for o in outs] == [True, True, True, False, True, True]
    assert isinstance(outs[3].error, OcrError) and outs[3].error.status == 400

    async def go() -> list:
        done = []
        async with AsyncClient(gateway.url, retry=FAST) as ac:
            res = await ac.ocr_many(files, concurrency=2, on_done=done.append)
            one = await ac.ocr(files[0])
        assert len(done) == 6 and one.text == expected_text("0.png", files[0].read_bytes())
        return res

    aouts = asyncio.run(go())
    assert [o.ok for o in aouts] == [o.ok for o in outs]


def test_sniff_and_retry_after() -> None:
    assert sniff(PNG)[0] == "png" and sniff(PDF)[0] == "pdf" and sniff(JPEG)[0] == "jpeg"
    assert sniff(b"RIFF\0\0\0\0WEBPVP8 ")[0] == "webp"
    assert sniff(b"hello") is None
    assert parse_retry_after("3") == 3.0 and parse_retry_after(None) is None
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT") == 0.0
    assert parse_retry_after("garbage") is None
    assert base64.b64decode(base64.b64encode(PNG)) == PNG
