"""Failover, all-fail 502, the native PaddleX routes, queue 503, ejection, panic, retry budget,
health probes, /upstreams and /metrics, over real HTTP."""

from __future__ import annotations

import concurrent.futures
import json
import time

from tests.doubles.paddlex_double import DoubleFleet
from tests.gateway.conftest import gateway_config
from tests.gateway.samples import b64, png_bytes
from tests.waiting import wait_for

PNG = b64(png_bytes())


def test_failover_on_500_connect_error_and_drop(start_gateway):
    with DoubleFleet(4) as fleet:
        fleet[0].knobs.always_500 = True
        fleet[1].stop()  # connection refused
        fleet[2].knobs.always_drop = True  # connection closed without an answer
        gw = start_gateway(gateway_config(fleet.urls, health={"enabled": False}))
        r = gw.client.post("/ocr", json={"base64": PNG})
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["upstream"] == fleet.urls[3] and body["attempts"] == 4
        outcomes = [(a["upstream"], a["outcome"]) for a in body["failed_attempts"]]
        assert outcomes == [
            (fleet.urls[0], "server_error"),
            (fleet.urls[1], "connect_error"),
            (fleet.urls[2], "reset"),
        ]
        assert "Internal server error" in body["failed_attempts"][0]["reason"]


def test_all_fail_502_lists_each_upstream_and_reason(start_gateway):
    with DoubleFleet(3, always_500=True) as fleet:
        fleet[2].stop()
        gw = start_gateway(gateway_config(fleet.urls, health={"enabled": False}))
        r = gw.client.post("/ocr", json={"base64": PNG})
        assert r.status_code == 502
        err = r.json()["error"]
        assert err["code"] == "all_upstreams_failed"
        tried = [a["upstream"] for a in err["attempts"]]
        assert sorted(tried) == sorted(fleet.urls)  # each distinct upstream exactly once
        for url in fleet.urls:
            assert url in err["message"]
        assert "HTTP 500: Internal server error" in err["message"]
        assert "connect error" in err["message"]
        # never the same upstream twice in one request
        assert [len(d.layout_requests()) for d in fleet.doubles[:2]] == [1, 1]


def test_max_attempts_bounds_failover(start_gateway):
    with DoubleFleet(4, always_500=True) as fleet:
        gw = start_gateway(
            gateway_config(fleet.urls, health={"enabled": False}, load_balance={"max_attempts": 2})
        )
        r = gw.client.post("/ocr", json={"base64": PNG})
        assert r.status_code == 502 and len(r.json()["error"]["attempts"]) == 2
        assert "max_attempts=2" in r.json()["error"]["message"]


def test_attempt_timeout_fails_over(start_gateway):
    with DoubleFleet(2) as fleet:
        # fleet[0] never answers; http.timeout_s also bounds the good attempt on fleet[1], so
        # it leaves room for a loaded machine (a good attempt can take a few hundred ms)
        fleet[0].knobs.hang = True
        try:
            gw = start_gateway(
                gateway_config(fleet.urls, health={"enabled": False}, http={"timeout_s": 2})
            )
            r = gw.client.post("/ocr", json={"base64": PNG})
            assert r.status_code == 200 and r.json()["upstream"] == fleet.urls[1]
            assert r.json()["failed_attempts"][0]["outcome"] == "timeout"
            assert fleet[0].stats.hung == 1  # the attempt did reach it
        finally:
            fleet[0].knobs.hang = False


def test_deadline_504(start_gateway):
    with DoubleFleet(2, service_time_s=2) as fleet:
        gw = start_gateway(
            gateway_config(fleet.urls, health={"enabled": False}, http={"request_deadline_s": 0.3})
        )
        r = gw.client.post("/ocr", json={"base64": PNG})
        assert r.status_code == 504 and r.json()["error"]["code"] == "deadline_exceeded"


def test_native_routes_pass_through(start_gateway):
    with DoubleFleet(2) as fleet:
        fleet[0].knobs.fail_next = 1
        gw = start_gateway(gateway_config(fleet.urls, health={"enabled": False}))
        req = {"file": PNG, "fileType": 1, "visualize": False, "logId": "my-log"}
        r = gw.client.post("/layout-parsing", json=req)
        assert r.status_code == 200
        env = r.json()
        assert env["errorCode"] == 0 and env["errorMsg"] == "Success" and env["logId"] == "my-log"
        assert r.headers["x-gateway-upstream"] == fleet.urls[1]  # failed over from the 500
        assert r.headers["x-gateway-attempts"] == "2"
        assert fleet[1].layout_requests()[-1].body == {
            **req,
            "prettifyMarkdown": True,
            "restructurePages": False,
        }
        page = env["result"]["layoutParsingResults"][0]
        assert "outputImages" not in page and "inputImage" not in page
        pages = [{"prunedResult": page["prunedResult"], "markdownImages": {}}]
        r = gw.client.post("/restructure-pages", json={"pages": pages, "concatenatePages": True})
        assert r.status_code == 200
        assert r.json()["result"]["layoutParsingResults"][0]["markdown"]["text"].startswith(
            "double-"
        )
        # upstream 4xx: returned unchanged, not retried
        before = sum(len(d.layout_requests()) for d in fleet.doubles)
        r = gw.client.post("/layout-parsing", json={"file": PNG})
        assert r.status_code == 422
        assert r.json()["errorMsg"] == "File type cannot be determined"
        assert sum(len(d.layout_requests()) for d in fleet.doubles) == before + 1
        r = gw.client.post("/restructure-pages", json={"concatenatePages": True})
        assert r.status_code == 422
        errors = json.loads(r.json()["errorMsg"])  # the JSON-string error list, unchanged
        assert errors[0]["loc"] == ["body", "pages"]


def test_native_route_all_fail_keeps_paddlex_envelope(start_gateway):
    with DoubleFleet(2, always_500=True) as fleet:
        gw = start_gateway(gateway_config(fleet.urls, health={"enabled": False}))
        r = gw.client.post("/layout-parsing", json={"file": PNG, "fileType": 1})
        assert r.status_code == 502
        body = r.json()
        assert body["errorCode"] == 502 and "all 2 upstream attempts failed" in body["errorMsg"]
        assert body["error"]["code"] == "all_upstreams_failed"


def test_restructure_null_images_pitfall_in_double(fleet):
    import httpx

    r = httpx.post(
        fleet.urls[0] + "/restructure-pages",
        json={
            "pages": [{"prunedResult": {"parsing_res_list": []}, "markdownImages": None}],
            "concatenatePages": True,
        },
        trust_env=False,
    )
    assert r.status_code == 500 and r.json()["errorMsg"] == "Internal server error"


def queue_depth(gw) -> int:
    return gw.client.get("/upstreams").json()["queue_depth"]


def test_queue_full_503_with_retry_after(start_gateway):
    with DoubleFleet(1) as fleet:
        gw = start_gateway(
            gateway_config(
                fleet.urls,
                load_balance={"mode": "queue", "queue_max_depth": 1, "queue_timeout_s": 30},
                http={"timeout_s": 60},
                health={"enabled": False},  # the held instance would fail its probes
            )
        )
        # step by step, each on observable state, so no step depends on timing: one request
        # held at the instance, one waiting in the queue, then two more that find it full
        fleet[0].knobs.hang = True
        try:
            with concurrent.futures.ThreadPoolExecutor(4) as pool:

                def post() -> concurrent.futures.Future:
                    return pool.submit(gw.client.post, "/ocr", json={"base64": PNG})

                served = post()
                assert wait_for(lambda: fleet[0].stats.hung == 1)
                queued = post()
                assert wait_for(lambda: queue_depth(gw) == 1)
                refused = [post(), post()]
                for r in (f.result(timeout=60) for f in refused):
                    assert r.status_code == 503
                    assert int(r.headers["retry-after"]) >= 1
                    assert r.json()["error"]["code"] == "queue_full"
                assert not queued.done() and queue_depth(gw) == 1
                fleet[0].knobs.hang = False
                assert served.result(timeout=60).status_code == 200
                assert queued.result(timeout=60).status_code == 200
        finally:
            fleet[0].knobs.hang = False
        assert len(fleet[0].layout_requests()) == 2  # the refused ones never reached it
        assert fleet[0].stats.max_pending == 1  # the instance never had a backlog


def test_queue_timeout_503(start_gateway):
    with DoubleFleet(1) as fleet:
        gw = start_gateway(
            gateway_config(
                fleet.urls,
                load_balance={"mode": "queue", "queue_timeout_s": 0.1},
                http={"timeout_s": 60},
                health={"enabled": False},  # the held instance would fail its probes
            )
        )
        fleet[0].knobs.hang = True  # the first request is held there until released
        try:
            with concurrent.futures.ThreadPoolExecutor(2) as pool:
                first = pool.submit(gw.client.post, "/ocr", json={"base64": PNG})
                assert wait_for(lambda: fleet[0].stats.hung == 1)
                sent = time.monotonic()
                late = pool.submit(gw.client.post, "/ocr", json={"base64": PNG}).result(60)
                assert time.monotonic() - sent < 10  # queue_timeout_s, not the held request
                assert late.status_code == 503
                assert late.json()["error"]["code"] == "queue_timeout"
                assert "retry-after" in late.headers
                assert not first.done()
                fleet[0].knobs.hang = False
                assert first.result(timeout=60).status_code == 200
        finally:
            fleet[0].knobs.hang = False
        assert len(fleet[0].layout_requests()) == 1  # the late one never reached it


def test_queue_mode_dispatches_to_idle_instances(start_gateway):
    with DoubleFleet(3, service_time_s=0.15) as fleet:
        # a slow instance: 10x, so the per-request overhead of a loaded machine (a few hundred
        # ms on every attempt) does not blur the difference
        fleet[0].knobs.service_time_s = 1.5
        gw = start_gateway(
            gateway_config(fleet.urls, load_balance={"mode": "queue"}, health={"enabled": False})
        )
        with concurrent.futures.ThreadPoolExecutor(6) as pool:
            results = [
                f.result()
                for f in [
                    pool.submit(gw.client.post, "/ocr", json={"base64": PNG}) for _ in range(9)
                ]
            ]
        assert all(r.status_code == 200 for r in results)
        assert all(d.stats.max_pending == 1 for d in fleet.doubles)  # one at a time each
        counts = [len(d.layout_requests()) for d in fleet.doubles]
        # the slow one got less than its fair share of 3 (with the first wave of 6 concurrent
        # requests it gets one, at most one more before the fast two have served the rest)
        assert sum(counts) == 9 and counts[0] <= 2, counts


def test_ejection_visible_and_panic(start_gateway):
    with DoubleFleet(3) as fleet:
        fleet[0].knobs.always_500 = True
        gw = start_gateway(
            gateway_config(
                fleet.urls,
                health={"enabled": False},
                outlier={"consecutive_failures": 2, "base_ejection_s": 30},
            )
        )
        for _ in range(6):
            assert gw.client.post("/ocr", json={"base64": PNG}).status_code == 200
        ups = {u["url"]: u for u in gw.client.get("/upstreams").json()["upstreams"]}
        bad = ups[fleet.urls[0]]
        assert bad["state"] == "ejected" and bad["ejections"] == 1
        assert bad["requests"]["server_error"] == 2
        assert "Internal server error" in bad["last_error"]
        calls = len(fleet[0].layout_requests())
        for _ in range(4):
            gw.client.post("/ocr", json={"base64": PNG})
        assert len(fleet[0].layout_requests()) == calls  # ejected: no more traffic
        # the two others fail too: at most 50% may be ejected, the rest is panic routing
        fleet[1].knobs.always_500 = True
        fleet[2].knobs.always_500 = True
        for _ in range(4):
            gw.client.post("/ocr", json={"base64": PNG})
        doc = gw.client.get("/upstreams").json()
        states = [u["state"] for u in doc["upstreams"]]
        assert states.count("ejected") == 1  # never more than the cap
        fleet[2].knobs.always_500 = False
        assert gw.client.post("/ocr", json={"base64": PNG}).status_code == 200


def test_health_probes_mark_unhealthy_and_recover(start_gateway):
    with DoubleFleet(2) as fleet:
        gw = start_gateway(
            gateway_config(
                fleet.urls,
                health={"interval_s": 0.05, "unhealthy_threshold": 2, "healthy_threshold": 2},
            )
        )
        fleet[0].knobs.health_status = 503

        def state(i):
            return gw.client.get("/upstreams").json()["upstreams"][i]["state"]

        assert wait_for(lambda: state(0) == "unhealthy")
        for _ in range(4):
            assert gw.client.post("/ocr", json={"base64": PNG}).json()["upstream"] == fleet.urls[1]
        assert gw.client.get("/ready").status_code == 200
        fleet[1].stop()
        assert wait_for(lambda: state(1) == "unhealthy")
        r = gw.client.get("/ready")
        assert r.status_code == 503 and r.json()["healthy"] == 0
        # panic: nothing healthy, health is ignored and the instance that works still serves
        assert gw.client.post("/ocr", json={"base64": PNG}).status_code == 200
        fleet[0].knobs.health_status = 200
        assert wait_for(lambda: state(0) == "healthy")
        assert gw.client.get("/health").json() == {"status": "ok"}


def test_retry_budget_stops_failover(start_gateway):
    with DoubleFleet(3, always_500=True) as fleet:
        gw = start_gateway(
            gateway_config(
                fleet.urls,
                health={"enabled": False},
                retry_budget={"budget_percent": 0, "min_retry_concurrency": 0},
            )
        )
        r = gw.client.post("/ocr", json={"base64": PNG})
        assert r.status_code == 502
        assert len(r.json()["error"]["attempts"]) == 1
        assert "retry budget exhausted" in r.json()["error"]["message"]
        metrics = gw.client.get("/metrics").text
        assert "gateway_retry_overflow_total 1.0" in metrics


def test_metrics_names(start_gateway):
    with DoubleFleet(2) as fleet:
        fleet[0].knobs.fail_next = 1
        gw = start_gateway(
            gateway_config(
                fleet.urls, load_balance={"mode": "round_robin"}, health={"enabled": False}
            )
        )
        assert gw.client.post("/ocr", json={"base64": PNG}).status_code == 200
        r = gw.client.get("/metrics")
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
        text = r.text
        u0, u1 = fleet.urls
        for line in (
            f'gateway_upstream_rq_total{{outcome="server_error",upstream="{u0}"}} 1.0',
            f'gateway_upstream_rq_total{{outcome="success",upstream="{u1}"}} 1.0',
            f'gateway_upstream_rq_active{{upstream="{u0}"}} 0.0',
            f'gateway_upstream_healthy{{upstream="{u1}"}} 1.0',
            "gateway_queue_depth 0.0",
            "gateway_retries_total 1.0",
            "gateway_retry_overflow_total 0.0",
            'gateway_requests_total{code="200",route="/ocr",token="-"} 1.0',
        ):
            assert line in text, line
        for name in (
            "gateway_upstream_rq_duration_seconds_bucket",
            "gateway_upstream_ejections_total",
            "gateway_queue_wait_seconds",
            "gateway_lb_panic",
            "gateway_health_checks_total",
        ):
            assert name in text, name
        doc = gw.client.get("/upstreams").json()
        assert doc["mode"] == "round_robin" and doc["queue_depth"] == 0
        entry = doc["upstreams"][1]
        assert set(entry) >= {
            "url",
            "host",
            "card",
            "vllm",
            "container",
            "state",
            "in_flight",
            "requests",
            "ejections",
            "consecutive_failures",
            "last_error",
            "latency_ms",
        }
        assert entry["latency_ms"]["p50"] is not None
