"""Drain and undrain (``POST /admin/drain``, ``/admin/undrain``) and "no capacity is a wait",
over real HTTP with PaddleX doubles.

- A drain waits for the attempt in flight, sends no new work there, answers when it is done.
- A drain ends by itself after ``ttl_s``; it survives a config reload; it holds in every worker.
- All drained: a request waits and is served once one is undrained; job slices wait too.
- All down: 503 ``no_capacity`` with ``Retry-After`` after ``queue_timeout_s``; an instance
  that comes up serves the waiting request.
- Selection by card, unknown URLs (404), bad bodies (400), admin tokens only.
"""

from __future__ import annotations

import json
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

from tests.doubles.paddlex_double import DoubleFleet
from tests.gateway.conftest import gateway_config
from tests.gateway.jobs_helpers import AUTH, jobs_config, numbered_pdf, sha, wait_job
from tests.gateway.multiworker_helpers import GatewayProcess
from tests.gateway.samples import b64, png_bytes
from tests.waiting import wait_for

PNG = b64(png_bytes())
ADMIN = "admin-secret"
ADMIN_AUTH = {"Authorization": f"Bearer {ADMIN}"}


def states(client: httpx.Client, headers: dict[str, str] | None = None) -> dict[str, str]:
    doc = client.get("/upstreams", headers=headers or {}).json()
    return {u["url"]: u["state"] for u in doc["upstreams"]}


def queue_depth(client: httpx.Client) -> int:
    return client.get("/upstreams").json()["queue_depth"]


def ocr(client: httpx.Client) -> httpx.Response:
    return client.post("/ocr", json={"base64": PNG})


def test_drain_waits_for_the_attempt_in_flight_and_sends_no_new_work(start_gateway):
    with DoubleFleet(2) as fleet:
        busy, other = fleet.urls
        gw = start_gateway(gateway_config(fleet.urls, health={"enabled": False}))
        fleet[0].knobs.hang = True  # a request that reaches it is held there
        try:
            with ThreadPoolExecutor(4) as pool:
                held: Future[httpx.Response] | None = None
                while held is None:  # round robin: the first or second request gets there
                    sent = pool.submit(ocr, gw.client)
                    if wait_for(lambda: fleet[0].stats.hung == 1, timeout=2):
                        held = sent
                    else:
                        assert sent.result(30).status_code == 200
                drain = pool.submit(
                    gw.client.post, "/admin/drain", json={"upstreams": [busy], "wait_s": 30}
                )
                assert wait_for(lambda: states(gw.client)[busy] == "draining")
                for _ in range(4):  # no new work for the drained instance
                    r = ocr(gw.client)
                    assert r.status_code == 200 and r.json()["upstream"] == other
                assert not drain.done()  # it waits for the attempt in flight
                fleet[0].knobs.hang = False
                assert held.result(30).status_code == 200  # the attempt in flight completes
                answer = drain.result(30)
        finally:
            fleet[0].knobs.hang = False
        assert answer.status_code == 200, answer.text
        body = answer.json()
        assert body["drained"] is True and body["in_flight"] == 0
        assert body["upstreams"][0]["url"] == busy
        assert body["upstreams"][0]["state"] == "drained"
        assert 3000 < body["upstreams"][0]["drained_for_s"] <= 3600  # the default ttl_s
        assert len(fleet[0].layout_requests()) == 1  # the held one (recorded once released)
        metrics = gw.client.get("/metrics").text
        assert f'gateway_upstream_drained{{upstream="{busy}"}} 1.0' in metrics
        assert f'gateway_upstream_drained{{upstream="{other}"}} 0.0' in metrics
        # idempotent: again, and an undrain of one that is not drained
        again = gw.client.post("/admin/drain", json={"upstreams": [busy], "wait_s": 0})
        assert again.json()["drained"] is True
        r = gw.client.post("/admin/undrain", json={"upstreams": [busy, other]})
        assert r.status_code == 200
        assert [u["state"] for u in r.json()["upstreams"]] == ["healthy", "healthy"]
        assert r.json()["upstreams"][0]["drained_for_s"] is None
        served = {ocr(gw.client).json()["upstream"] for _ in range(4)}
        assert served == {busy, other}


def test_drain_answers_with_what_is_still_in_flight_after_wait_s(start_gateway):
    with DoubleFleet(1) as fleet:
        gw = start_gateway(gateway_config(fleet.urls, health={"enabled": False}))
        fleet[0].knobs.hang = True
        try:
            with ThreadPoolExecutor(1) as pool:
                held = pool.submit(ocr, gw.client)
                assert wait_for(lambda: fleet[0].stats.hung == 1)
                r = gw.client.post("/admin/drain", json={"upstreams": fleet.urls, "wait_s": 0.3})
                body = r.json()
                assert body["drained"] is False and body["in_flight"] == 1
                assert body["waited_s"] >= 0.3
                assert body["upstreams"][0]["state"] == "draining"
                fleet[0].knobs.hang = False
                assert held.result(30).status_code == 200
        finally:
            fleet[0].knobs.hang = False


def test_a_drain_ends_by_itself_after_ttl_s_and_the_waiting_request_is_served(start_gateway):
    with DoubleFleet(1) as fleet:
        gw = start_gateway(gateway_config(fleet.urls))
        r = gw.client.post(
            "/admin/drain", json={"upstreams": fleet.urls, "wait_s": 0, "ttl_s": 1.5}
        )
        assert r.status_code == 200 and r.json()["upstreams"][0]["state"] == "drained"
        started = time.monotonic()
        with ThreadPoolExecutor(1) as pool:
            waiting = pool.submit(ocr, gw.client)
            assert wait_for(lambda: queue_depth(gw.client) == 1)
            r = waiting.result(30)  # as a caller killed between drain and undrain leaves it
        assert r.status_code == 200, r.text
        assert time.monotonic() - started >= 1.4
        assert states(gw.client)[fleet.urls[0]] == "healthy"


def test_a_config_reload_keeps_the_drain(start_gateway):
    with DoubleFleet(2) as fleet:
        config = gateway_config(fleet.urls)
        gw = start_gateway(config, file=True)
        gw.client.post("/admin/drain", json={"upstreams": [fleet.urls[0]], "wait_s": 0})
        path = gw.runtime.config_path
        path.write_text(json.dumps({**config, "load_balance": {"max_attempts": 7}}))
        assert wait_for(lambda: gw.runtime.settings.load_balance.max_attempts == 7)
        assert states(gw.client)[fleet.urls[0]] == "drained"
        for _ in range(3):
            assert ocr(gw.client).json()["upstream"] == fleet.urls[1]


def test_all_drained_a_request_waits_and_is_served_after_undrain(start_gateway):
    with DoubleFleet(2) as fleet:
        gw = start_gateway(gateway_config(fleet.urls, load_balance={"queue_timeout_s": 30}))
        r = gw.client.post("/admin/drain", json={"upstreams": fleet.urls, "wait_s": 0})
        assert r.json()["drained"] is True
        assert gw.client.get("/ready").status_code == 503  # the balancer sends elsewhere
        with ThreadPoolExecutor(1) as pool:
            waiting = pool.submit(ocr, gw.client)
            assert wait_for(lambda: queue_depth(gw.client) == 1)
            time.sleep(0.3)
            assert not waiting.done()
            undrained = time.monotonic()
            gw.client.post("/admin/undrain", json={"upstreams": [fleet.urls[1]]})
            r = waiting.result(30)
        assert r.status_code == 200 and r.json()["upstream"] == fleet.urls[1]
        assert time.monotonic() - undrained < 2  # at once, not at the next poll
        assert fleet[0].layout_requests() == []


def test_all_down_503_no_capacity_with_retry_after_after_queue_timeout_s(start_gateway):
    with DoubleFleet(2) as fleet:
        fleet[0].stop()
        fleet[1].stop()
        gw = start_gateway(gateway_config(fleet.urls, load_balance={"queue_timeout_s": 0.5}))
        sent = time.monotonic()
        r = ocr(gw.client)
        elapsed = time.monotonic() - sent
        assert r.status_code == 503, r.text
        assert int(r.headers["retry-after"]) >= 1
        error = r.json()["error"]
        assert error["code"] == "no_capacity"
        assert "no upstream can take requests: 2 unreachable of 2" in error["message"]
        assert 0.5 <= elapsed < 10
        # a later request does not touch them again: it waits from the start
        assert all(a["outcome"] == "connect_error" for a in error["attempts"])


def test_a_request_waits_for_an_instance_that_comes_up(start_gateway):
    """The first deploy, or a container replaced without a drain: no 502 while it starts."""
    with DoubleFleet(1) as fleet:
        fleet[0].stop()
        gw = start_gateway(gateway_config(fleet.urls, load_balance={"queue_timeout_s": 30}))
        with ThreadPoolExecutor(1) as pool:
            waiting = pool.submit(ocr, gw.client)
            assert wait_for(lambda: queue_depth(gw.client) == 1)
            time.sleep(0.5)
            assert not waiting.done()
            fleet[0].start()
            r = waiting.result(30)
        assert r.status_code == 200, r.text
        assert r.json()["upstream"] == fleet.urls[0]


def test_job_slices_wait_while_every_instance_is_drained(start_gateway, tmp_path: Path):
    with DoubleFleet(2) as fleet:
        config = jobs_config(
            fleet.urls,
            tmp_path / "jobs",
            auth={
                "tokens": [{"name": "team-a", "sha256": sha("team-a-secret")}],
                "admin_tokens": [{"name": "ops", "sha256": sha(ADMIN)}],
            },
            load_balance={"mode": "queue", "queue_timeout_s": 0.3},
        )
        gw = start_gateway(config)
        r = gw.client.post(
            "/admin/drain", json={"upstreams": fleet.urls, "wait_s": 0}, headers=ADMIN_AUTH
        )
        assert r.status_code == 200, r.text
        answer = gw.client.post(
            "/api/v2/ocr/jobs", headers=AUTH, files={"file": ("d.pdf", numbered_pdf(6))}
        )
        job_id = answer.json()["data"]["jobId"]
        time.sleep(2.0)  # several queue_timeout_s: the slices wait, the job does not fail
        data = wait_job(gw.client, job_id, states=("pending", "running", "done", "failed"))
        assert data["state"] in ("pending", "running"), data
        assert [d.layout_requests() for d in fleet] == [[], []]
        gw.client.post("/admin/undrain", json={"upstreams": fleet.urls}, headers=ADMIN_AUTH)
        assert wait_job(gw.client, job_id)["state"] == "done"


def test_selection_by_card_unknown_urls_and_bad_bodies(start_gateway):
    with DoubleFleet(3) as fleet:
        specs: list[Any] = [
            {"url": fleet.urls[0], "host": "n1", "card": 0, "vllm": "http://v:1"},
            {"url": fleet.urls[1], "host": "n1", "card": 0, "vllm": "http://v:2"},
            {"url": fleet.urls[2], "host": "n1", "card": 1, "vllm": "http://v:3"},
        ]
        gw = start_gateway(gateway_config(specs))
        r = gw.client.post("/admin/drain", json={"card": 0, "host": "n1", "wait_s": 0})
        assert [u["url"] for u in r.json()["upstreams"]] == fleet.urls[:2]
        assert list(states(gw.client).values()) == ["drained", "drained", "healthy"]
        r = gw.client.post("/admin/undrain", json={"vllm": "http://v:2"})
        assert list(states(gw.client).values()) == ["drained", "healthy", "healthy"]
        missing = "http://127.0.0.1:1"
        r = gw.client.post("/admin/drain", json={"upstreams": [fleet.urls[0], missing]})
        assert r.status_code == 404
        assert r.json()["error"]["code"] == "unknown_upstream"
        assert missing in r.json()["error"]["message"]
        assert r.json()["error"]["unknown"] == [missing]
        r = gw.client.post("/admin/undrain", json={"card": 7})
        assert r.status_code == 404 and "card 7" in r.json()["error"]["message"]
        for bad, why in (
            ({}, "name the upstreams"),
            ({"upstreams": fleet.urls, "wait_s": 60, "ttl_s": 10}, "must be at least wait_s"),
            ({"upstreams": fleet.urls, "ttl_s": 0}, "ttl_s"),
            ({"upstreams": fleet.urls, "bogus": 1}, "bogus"),
        ):
            r = gw.client.post("/admin/drain", json=bad)
            assert r.status_code == 400 and why in r.json()["error"]["message"], r.text


def test_drain_needs_an_admin_token(start_gateway):
    with DoubleFleet(1) as fleet:
        config = gateway_config(
            fleet.urls,
            auth={
                "tokens": [{"name": "user", "sha256": sha("user-secret")}],
                "admin_tokens": [{"name": "ops", "sha256": sha(ADMIN)}],
            },
        )
        gw = start_gateway(config)
        body = {"upstreams": fleet.urls, "wait_s": 0}
        assert gw.client.post("/admin/drain", json=body).status_code == 401
        user = {"Authorization": "Bearer user-secret"}
        assert gw.client.post("/admin/drain", json=body, headers=user).status_code == 403
        assert gw.client.post("/admin/undrain", json=body, headers=user).status_code == 403
        r = gw.client.post("/admin/drain", json=body, headers=ADMIN_AUTH)
        assert r.status_code == 200 and r.json()["drained"] is True


def test_a_drain_holds_in_every_worker(tmp_path: Path):
    with DoubleFleet(2) as fleet:
        path = tmp_path / "gateway.json"
        config = gateway_config(fleet.urls, load_balance={"mode": "queue"})
        path.write_text(json.dumps(config))
        with GatewayProcess(path, tmp_path / "gw.log", workers=2) as gw:
            r = gw.client.post("/admin/drain", json={"upstreams": [fleet.urls[0]], "wait_s": 0})
            assert r.status_code == 200, r.text
            for doc in gw.answers_from_every_worker(2).values():
                assert doc["upstreams"][0]["state"] == "drained"
            for _ in range(6):  # new connections: both workers serve
                with httpx.Client(base_url=gw.url, timeout=30, trust_env=False) as client:
                    assert ocr(client).json()["upstream"] == fleet.urls[1]
            # a reload (SIGHUP to every worker) keeps it
            path.write_text(json.dumps({**config, "load_balance": {"max_attempts": 5}}))
            gw.proc.send_signal(1)
            time.sleep(0.5)
            for doc in gw.answers_from_every_worker(2).values():
                assert doc["upstreams"][0]["state"] == "drained"
            # everything drained: a request waits in any worker, served after the undrain
            gw.client.post("/admin/drain", json={"upstreams": [fleet.urls[1]], "wait_s": 0})
            with ThreadPoolExecutor(4) as pool:

                def fresh_ocr() -> httpx.Response:
                    with httpx.Client(base_url=gw.url, timeout=30, trust_env=False) as client:
                        return ocr(client)

                waiting = [pool.submit(fresh_ocr) for _ in range(4)]
                time.sleep(0.5)
                assert not any(f.done() for f in waiting)
                with httpx.Client(base_url=gw.url, timeout=30, trust_env=False) as client:
                    client.post("/admin/undrain", json={"upstreams": fleet.urls})
                assert [f.result(30).status_code for f in waiting] == [200] * 4
            for doc in gw.answers_from_every_worker(2).values():
                assert [u["state"] for u in doc["upstreams"]] == ["healthy", "healthy"]


def test_an_instance_restarted_while_drained_serves_as_soon_as_it_is_undrained(start_gateway):
    """A rollout restarts a drained instance (its probes fail meanwhile) and undrains it once
    ready: it takes work again at once, not after `healthy_threshold` probes `interval_s`
    apart."""
    health = {"interval_s": 1, "unhealthy_threshold": 1, "healthy_threshold": 5}
    with DoubleFleet(2) as fleet:
        restarted, other = fleet.urls
        gw = start_gateway(gateway_config(fleet.urls, health=health))
        assert gw.client.post("/admin/drain", json={"upstreams": [restarted]}).status_code == 200
        fleet[0].stop()

        def probed_down() -> bool:
            doc = gw.client.get("/upstreams").json()["upstreams"]
            entry = next(u for u in doc if u["url"] == restarted)
            return (entry["last_error"] or "").startswith("health probe")

        assert wait_for(probed_down)
        fleet[0].start()
        answer = gw.client.post("/admin/undrain", json={"upstreams": [restarted]})
        assert answer.status_code == 200, answer.text
        assert answer.json()["upstreams"][0]["state"] == "healthy"
        served = {ocr(gw.client).json()["upstream"] for _ in range(6)}
        assert served == {restarted, other}
