"""The slice keeper over real loopback HTTP, in front of PaddleX doubles: a slice's answer is
kept past its caller's disconnect, the same key is parsed once, bad requests get a JSON 4xx."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from gateway.config.settings import UpstreamSpec
from gateway.dispatch.upstreams import Upstream
from gateway.keeper.server import KeeperApp, KeeperConfig, Upstreams
from gateway.keeper.store import Answer, KeeperStore
from gateway.upstream.keeper_client import Found, find_slice, post_slice
from gateway.wire.upstream_http import UpstreamClient
from tests.doubles.paddlex_double import DoubleFleet
from tests.doubles.servers import ServerThread
from tests.gateway.jobs_helpers import numbered_pdf

METADATA = "http://169.254.169.254"


@pytest.fixture
def fleet() -> Iterator[DoubleFleet]:
    with DoubleFleet(2, service_time_s=0.3) as doubles:
        yield doubles


@pytest.fixture
def keeper(fleet: DoubleFleet) -> Iterator[ServerThread]:
    server = ServerThread(KeeperApp(KeeperConfig(upstreams=Upstreams(fleet.urls)))).start()
    yield server
    server.stop()


def _body(log_id: str) -> dict[str, Any]:
    pdf = base64.b64encode(numbered_pdf(2)).decode()
    return {"file": pdf, "fileType": 0, "logId": log_id}


def _post(url: str, upstream: str, key: str, timeout: float = 30) -> httpx.Response:
    headers = {"Idempotency-Key": key, "X-Keeper-Upstream": upstream}
    return httpx.post(
        url + "/layout-parsing", json=_body(key), headers=headers, timeout=timeout, trust_env=False
    )


def test_same_key_is_parsed_once_and_kept(fleet: DoubleFleet, keeper: ServerThread) -> None:
    first = _post(keeper.url, fleet.urls[0], "job-a:0:2")
    again = _post(keeper.url, fleet.urls[0], "job-a:0:2")
    assert first.status_code == again.status_code == 200
    assert first.headers["x-keeper"] == "fresh" and again.headers["x-keeper"] == "kept"
    assert first.json() == again.json()
    assert len(first.json()["result"]["layoutParsingResults"]) == 2
    assert len(fleet[0].layout_requests()) == 1
    # another instance is another parse (a failover must not get the first one's answer)
    assert _post(keeper.url, fleet.urls[1], "job-a:0:2").headers["x-keeper"] == "fresh"


def test_concurrent_calls_attach_to_one_parse(fleet: DoubleFleet, keeper: ServerThread) -> None:
    answers: list[httpx.Response] = []
    threads = [
        threading.Thread(target=lambda: answers.append(_post(keeper.url, fleet.urls[0], "k:1:1")))
        for _ in range(3)
    ]
    for thread in threads:
        thread.start()
        time.sleep(0.05)
    for thread in threads:
        thread.join()
    assert sorted(a.headers["x-keeper"] for a in answers) == ["attached", "attached", "fresh"]
    assert len(fleet[0].layout_requests()) == 1


def test_answer_outlives_its_caller(fleet: DoubleFleet, keeper: ServerThread) -> None:
    with pytest.raises(httpx.ReadTimeout):
        _post(keeper.url, fleet.urls[0], "gone:0:2", timeout=0.1)
    running = httpx.get(keeper.url + "/answers/gone:0:2", trust_env=False)
    assert running.status_code == 202
    assert running.json() == {"state": "running", "upstream": fleet.urls[0]}
    deadline = time.monotonic() + 10
    while (kept := httpx.get(keeper.url + "/answers/gone:0:2", trust_env=False)).status_code == 202:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert kept.status_code == 200 and kept.headers["x-keeper-upstream"] == fleet.urls[0]
    assert kept.json()["result"]["layoutParsingResults"][0]["prunedResult"]
    assert len(fleet[0].layout_requests()) == 1


def test_an_error_is_not_kept(fleet: DoubleFleet, keeper: ServerThread) -> None:
    fleet[0].knobs.fail_next = 1
    assert _post(keeper.url, fleet.urls[0], "err:0:2").status_code == 500
    assert httpx.get(keeper.url + "/answers/err:0:2", trust_env=False).status_code == 404
    retried = _post(keeper.url, fleet.urls[0], "err:0:2")
    assert retried.status_code == 200 and retried.headers["x-keeper"] == "fresh"


def test_a_dead_instance_is_a_502_named(keeper: ServerThread, fleet: DoubleFleet) -> None:
    fleet[1].stop()
    answer = _post(keeper.url, fleet.urls[1], "dead:0:2")
    assert answer.status_code == 502 and fleet.urls[1] in answer.json()["error"]


@pytest.mark.parametrize(
    ("headers", "status", "problem"),
    [
        ({}, 400, "idempotency-key header is missing"),
        ({"Idempotency-Key": "a/b"}, 400, "must be printable ASCII"),
        ({"Idempotency-Key": "x" * 201}, 400, "longer than 200"),
        # never contacted: the keeper forwards to its configured instances only
        ({"Idempotency-Key": "k", "X-Keeper-Upstream": METADATA}, 421, "not an instance"),
        ({"Idempotency-Key": "k"}, 421, "not an instance"),
    ],
)
def test_bad_requests_are_json_4xx(
    keeper: ServerThread, fleet: DoubleFleet, headers: dict[str, str], status: int, problem: str
) -> None:
    answer = httpx.post(keeper.url + "/layout-parsing", json={}, headers=headers, trust_env=False)
    assert answer.status_code == status and problem in answer.json()["error"]
    assert not fleet[0].layout_requests() and not fleet[1].layout_requests()


def test_too_large_unknown_routes_and_health(fleet: DoubleFleet) -> None:
    config = KeeperConfig(upstreams=Upstreams(fleet.urls), max_body_bytes=100)
    server = ServerThread(KeeperApp(config)).start()
    try:
        big = _post(server.url, fleet.urls[0], "big:0:2")
        assert big.status_code == 413 and "100 bytes" in big.json()["error"]
        assert httpx.get(server.url + "/nope", trust_env=False).status_code == 404
        assert httpx.get(server.url + "/layout-parsing", trust_env=False).status_code == 405
        assert httpx.get(server.url + "/answers/none", trust_env=False).status_code == 404
        health = httpx.get(server.url + "/health", trust_env=False).json()
        assert health["status"] == "ok" and health["running"] == 0
        metrics = httpx.get(server.url + "/metrics", trust_env=False)
        assert metrics.status_code == 200 and "text/plain" in metrics.headers["content-type"]
        assert "keeper_slices_running 0.0" in metrics.text
        assert "process_resident_memory_bytes" in metrics.text
    finally:
        server.stop()
    assert not fleet[0].layout_requests()


def test_answers_expire_and_the_oldest_go_over_the_cap() -> None:
    now = [0.0]

    async def send(upstream: str, body: bytes, content_type: str | None) -> Answer:
        return Answer(200, body, content_type)

    async def scenario() -> None:
        store = KeeperStore(send, keep_s=10, max_bytes=10, clock=lambda: now[0])
        await store.call("a", "u", b"12345", None)
        now[0] = 1
        await store.call("b", "u", b"12345", None)
        assert store.lookup("a") and store.lookup("b")
        now[0] = 2
        await store.call("c", "u", b"123", None)  # 13 bytes: the oldest goes
        assert store.lookup("a") is None and store.lookup("b") and store.lookup("c")
        now[0] = 11.5
        assert store.lookup("b") is None and store.lookup("c") is not None
        assert store.stats()["calls_evicted"] == 1 and store.kept_bytes == 3

    asyncio.run(scenario())


def test_a_config_file_is_read_again_when_it_changes(tmp_path: Path, fleet: DoubleFleet) -> None:
    path = tmp_path / "keeper.json"
    path.write_text(json.dumps({"upstreams": [{"url": fleet.urls[0], "card": 0}]}))
    upstreams = Upstreams(path=path)
    assert upstreams.allows(fleet.urls[0]) and not upstreams.allows(fleet.urls[1])
    path.write_text(json.dumps({"upstreams": fleet.urls}))
    os.utime(path, ns=(time.time_ns(), time.time_ns() + 10**9))
    assert upstreams.allows(fleet.urls[1])
    path.write_text("{")  # half-written: the list it had stays
    os.utime(path, ns=(time.time_ns(), time.time_ns() + 2 * 10**9))
    assert upstreams.allows(fleet.urls[1]) and not upstreams.allows(METADATA)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"upstreams": [{"url": "ftp://x"}]}))
    with pytest.raises(ValueError, match=r"upstreams\[0\]\.url.*must start with http"):
        Upstreams(path=bad)
    bad.write_text(json.dumps({"instances": fleet.urls}))
    with pytest.raises(ValueError, match="no 'upstreams' list"):
        Upstreams(path=bad)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--config", "/nonexistent/keeper.json"], "--config: [Errno 2]"),
        (["--upstreams", "ftp://x"], "must start with http"),
        (["--upstreams", ","], "at least one instance"),
        (["--upstreams", "http://127.0.0.1:1", "--keep-s", "0"], "positive number"),
        ([], "--config PATH or --upstreams URL"),
    ],
)
def test_bad_arguments_are_usage_errors(args: list[str], message: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "gateway.keeper", *args],
        capture_output=True,
        text=True,
        timeout=30,
        env={"PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 2 and message in done.stderr


def _closed_port_url() -> str:
    """A loopback URL nothing listens on (connections are refused)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}"


@pytest.mark.parametrize("keeper_state", ["down", "does not serve it"])
def test_a_slice_goes_straight_to_its_instance_when_the_keeper_cannot_take_it(
    fleet: DoubleFleet, keeper_state: str
) -> None:
    # a keeper that serves only fleet[1] does not know fleet[0]: a 421, then directly
    served = ServerThread(KeeperApp(KeeperConfig(upstreams=Upstreams([fleet.urls[1]])))).start()
    try:
        url = _closed_port_url() if keeper_state == "down" else served.url
        upstream = Upstream(spec=UpstreamSpec(url=fleet.urls[0], keeper=url))

        async def send() -> tuple[int, Found]:
            client = UpstreamClient()
            try:
                reply = await post_slice(client, upstream, _body("direct:0:2"), "direct:0:2", 30)
                found = await find_slice(client, [url], "direct:0:2", 2)
                return reply.status_code, found
            finally:
                await client.aclose()

        status, found = asyncio.run(send())
    finally:
        served.stop()
    assert status == 200 and len(fleet[0].layout_requests()) == 1
    assert found == Found()  # nothing kept, and an unreachable keeper is no error
