"""One connection pool per upstream, crashed and hung upstreams under load, and the speed-aware
choice of ``queue`` mode, over real HTTP against PaddleX doubles."""

from __future__ import annotations

import concurrent.futures
import json
import threading
import time
from typing import Any

import httpx
import pytest

from gateway.config.settings import HttpSettings, parse_settings
from gateway.runtime import make_client, upstream_origin
from gateway.wire.upstream_http import UpstreamClient
from tests.doubles.paddlex_double import DoubleFleet
from tests.gateway.conftest import RunningGateway, gateway_config
from tests.gateway.samples import b64, png_bytes
from tests.waiting import wait_for

PNG = b64(png_bytes())


def pools_by_origin(client: UpstreamClient) -> dict[str, Any]:
    """origin -> the client's keep-alive pool for it."""
    return {
        f"{scheme}://{host}:{port}": pool for (scheme, host, port), pool in client.pools.items()
    }


def upstream_doc(gw: RunningGateway, url: str) -> dict[str, Any]:
    return next(u for u in gw.client.get("/upstreams").json()["upstreams"] if u["url"] == url)


class Load:
    """``n`` client threads posting /ocr in a loop until stopped; every response is kept."""

    def __init__(self, gw: RunningGateway, n: int) -> None:
        self.gw = gw
        self.results: list[tuple[int, dict[str, Any], float]] = []
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._loop) for _ in range(n)]

    def _loop(self) -> None:
        with httpx.Client(base_url=self.gw.url, timeout=60, trust_env=False) as client:
            while not self._stop.is_set():
                started = time.monotonic()
                r = client.post("/ocr", json={"base64": PNG})
                self.results.append((r.status_code, r.json(), time.monotonic() - started))

    def __enter__(self) -> Load:
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(60)

    def failures(self) -> list[Any]:
        return [(code, body) for code, body, _ in self.results if code != 200]


def test_make_client_applies_the_http_settings():
    http = {"pool_max_connections": 7, "pool_max_keepalive_connections": 3}
    keeper = "http://127.0.0.1:9102"
    upstreams = [{"url": f"http://127.0.0.1:{9120 + i}", "keeper": keeper} for i in range(9)]
    client = make_client(parse_settings({"upstreams": upstreams, "http": http}))
    assert (client.max_connections, client.max_idle) == (7, 3)
    assert client.keepalive_s == HttpSettings().pool_keepalive_s
    assert upstream_origin("http://127.0.0.1:9126/some/prefix") == "http://127.0.0.1:9126"
    # a keeper in front of 9 upstreams may hold a job slice for each at once
    assert client._pool("http", "127.0.0.1", 9102).limit == 9
    assert client._pool("http", "127.0.0.1", 9120).limit == 7


def test_upstream_client_uses_one_pool_per_upstream(start_gateway, tmp_path):
    with DoubleFleet(4) as fleet:
        config = gateway_config(fleet.urls[:3], load_balance={"mode": "round_robin"})
        gw = start_gateway(config, file=True)
        for _ in range(6):
            assert gw.client.post("/ocr", json={"base64": PNG}).status_code == 200
        assert all(len(d.layout_requests()) == 2 for d in fleet.doubles[:3])
        client = gw.runtime.client
        pools = pools_by_origin(client)
        assert sorted(pools) == sorted(fleet.urls[:3])
        for pool in pools.values():  # connections are kept alive and reused
            assert pool.open == 1 and len(pool.idle) == 1
        # a reload that adds an upstream builds a client with a pool for it too
        (tmp_path / "gateway.json").write_text(json.dumps(gateway_config(fleet.urls)))
        assert wait_for(lambda: gw.runtime.client is not client)
        for _ in range(8):
            assert gw.client.post("/ocr", json={"base64": PNG}).status_code == 200
        assert len(fleet[3].layout_requests()) >= 1
        assert sorted(pools_by_origin(gw.runtime.client)) == sorted(fleet.urls)


@pytest.mark.parametrize(
    ("mode", "budget_percent"), [("queue", 0), ("least_inflight", 0), ("round_robin", 20)]
)
def test_killed_upstream_fails_no_request(start_gateway, mode, budget_percent):
    with DoubleFleet(4, service_time_s=0.03) as fleet:
        gw = start_gateway(
            gateway_config(
                fleet.urls,
                load_balance={"mode": mode},
                # probes are too slow to help here: only the connect error can take it out
                health={"interval_s": 60},
                retry_budget={"budget_percent": budget_percent, "min_retry_concurrency": 0},
            )
        )
        dead = fleet[0]
        with Load(gw, 6) as load:
            assert wait_for(lambda: len(dead.layout_requests()) >= 2)
            dead.stop()  # the port is closed: connections are refused
            killed_at = len(load.results)
            assert wait_for(lambda: len(load.results) >= killed_at + 60, timeout=20)
        assert load.failures() == []
        doc = upstream_doc(gw, dead.url)
        assert doc["state"] == "unhealthy" and "connect error" in doc["last_error"]
        # taken out of dispatch at its first refused connect (one per concurrent dispatch), or
        # before any: an attempt in flight at the kill is reset and the port then refuses
        refused = doc["requests"]["connect_error"]
        if refused == 0:
            assert doc["requests"]["reset"] >= 1 and "after a reset" in doc["last_error"]
        assert refused <= 6
        assert doc["ejections"] == 0  # not after outlier.consecutive_failures, before it
        rescued = [b for _, b, _ in load.results if b.get("failed_attempts")]
        assert rescued and all(
            a["upstream"] == dead.url for b in rescued for a in b["failed_attempts"]
        )


def test_hung_upstream_requests_are_redispatched(start_gateway):
    with DoubleFleet(3, service_time_s=0.05) as fleet:
        gw = start_gateway(
            gateway_config(
                fleet.urls,
                load_balance={"mode": "queue"},
                http={"timeout_s": 60, "request_deadline_s": 120},
                # 1 s: long enough that a busy live double answers its probes on a loaded
                # machine, short enough that the hung one is found in about
                # interval_s + 2 x timeout_s = 2.2 s, well inside the 10 s bound below
                health={"interval_s": 0.2, "timeout_s": 1.0, "unhealthy_threshold": 3},
                retry_budget={"budget_percent": 0, "min_retry_concurrency": 0},
            )
        )
        hung = fleet[0]
        try:
            with Load(gw, 6) as load:
                assert wait_for(lambda: len(hung.layout_requests()) >= 2)
                hung.knobs.hang = True  # accepts, never answers, /health included
                assert wait_for(lambda: hung.stats.hung >= 3)  # requests and probes stuck
                done = len(load.results)
                assert wait_for(lambda: len(load.results) >= done + 40, timeout=60)
            # still hung here: once it answers again, probes may bring it back to healthy
            doc = upstream_doc(gw, hung.url)
        finally:
            hung.knobs.hang = False
        assert load.failures() == []
        rescued = [
            (b, elapsed)
            for _, b, elapsed in load.results
            if any(
                a["upstream"] == hung.url and "is stuck" in (a["reason"] or "")
                for a in b["failed_attempts"]
            )
        ]
        assert rescued, "no request was in flight on the hung upstream"
        for body, elapsed in rescued:
            assert body["upstream"] != hung.url
            assert elapsed < 10  # a few probe intervals, not http.timeout_s = 60 s
        assert doc["state"] == "unhealthy" and "timeout" in doc["last_error"]
        assert doc["requests"]["timeout"] == len(rescued)  # each cancelled once, at detection


def test_queue_mode_prefers_the_faster_idle_upstream(start_gateway):
    with DoubleFleet(2) as fleet:
        fast, slow = fleet[0], fleet[1]
        # classes are round(log2(service / average)), a factor of 2 wide: with 1 s against
        # 0.02 s the two stay in different classes with up to ~1 s of per-request overhead
        # (a loaded machine adds a few hundred ms to every attempt)
        fast.knobs.service_time_s, slow.knobs.service_time_s = 0.02, 1.0
        gw = start_gateway(gateway_config(fleet.urls, load_balance={"mode": "queue"}))

        def known() -> bool:  # the service time is a median: a few samples each, not one
            docs = gw.client.get("/upstreams").json()["upstreams"]
            return all(u["latency_ms"]["count"] >= 3 for u in docs)

        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            for _ in range(30):  # two at a time: both instances serve and get measured
                if known():
                    break
                futures = [pool.submit(gw.client.post, "/ocr", json={"base64": PNG})]
                futures.append(pool.submit(gw.client.post, "/ocr", json={"base64": PNG}))
                assert all(f.result().status_code == 200 for f in futures)
        assert known()
        before = len(slow.layout_requests())
        for _ in range(12):  # one at a time: both are idle at every choice
            r = gw.client.post("/ocr", json={"base64": PNG})
            assert r.status_code == 200 and r.json()["upstream"] == fast.url
        assert len(slow.layout_requests()) == before
