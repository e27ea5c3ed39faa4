"""The status page (gateway.status): login by form and cookie, refusals without a session and
across sites, the state document, and the page itself in headless Chromium."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from sim.vllm.args import parse_serve
from sim.vllm.server import build_app
from tests.doubles.paddlex_double import DoubleFleet
from tests.doubles.servers import ServerThread
from tests.gateway.conftest import gateway_config
from tests.gateway.jobs_helpers import sha
from tests.monitoring.status_page import log_in, save_screenshot, seconds_until_unhealthy

ADMIN = "status-admin-secret"
USER = "team-a-secret"


def status_config(fleet: DoubleFleet, vllm_url: str, tmp_path: Path) -> dict[str, Any]:
    specs = [
        {"url": url, "host": "local", "card": i // 2, "vllm": vllm_url, "container": f"paddle-{i}"}
        for i, url in enumerate(fleet.urls)
    ]
    return gateway_config(
        specs,
        auth={
            "tokens": [{"name": "team-a", "sha256": sha(USER)}],
            "admin_tokens": [{"name": "ops", "sha256": sha(ADMIN)}],
            "local_token_file": str(tmp_path / "run" / "admin.token"),
        },
    )


@pytest.fixture
def vllm_url() -> Any:
    args = parse_serve(["/data/m", "--served-model-name", "m", "--port", "1"])
    server = ServerThread(build_app(args)).start()
    yield server.url
    server.stop()


def login(client: httpx.Client, token: str, **headers: str) -> httpx.Response:
    return client.post("/status/login", data={"token": token}, headers=headers)


def test_refused_without_login_and_with_a_user_token(start_gateway, vllm_url, tmp_path) -> None:
    with DoubleFleet(2) as fleet:
        gw = start_gateway(status_config(fleet, vllm_url, tmp_path))
        api = gw.client.get("/status/api/state")
        assert api.status_code == 401 and "upstreams" not in api.text
        shell = gw.client.get("/status")  # no data in it: its script polls the API
        assert shell.status_code == 200 and "/status/static/status.js" in shell.text
        page = gw.client.get("/status/login")
        assert page.status_code == 200 and 'action="/status/login"' in page.text
        assert 'method="post"' in page.text  # the token goes in a body, never in a URL
        assert "frame-ancestors 'none'" in page.headers["content-security-policy"]
        wrong = login(gw.client, "not-a-token")
        assert wrong.status_code == 401 and "fleet_status" not in wrong.headers.get(
            "set-cookie", ""
        )
        user = login(gw.client, USER)
        assert user.status_code == 403 and "not an admin token" in user.text
        gw.client.cookies.set("fleet_status", "ops.9999999999.00")
        assert gw.client.get("/status/api/state").status_code == 401


def test_login_sets_a_strict_http_only_cookie_and_the_state_names_every_upstream(
    start_gateway, vllm_url, tmp_path
) -> None:
    with DoubleFleet(3) as fleet:
        gw = start_gateway(status_config(fleet, vllm_url, tmp_path))
        answer = login(gw.client, ADMIN, Origin=gw.url)
        assert answer.status_code == 303 and answer.headers["location"] == "/status"
        cookie = answer.headers["set-cookie"].lower()
        for part in ("fleet_status=", "httponly", "samesite=strict", "path=/status"):
            assert part in cookie
        assert ADMIN not in answer.headers["set-cookie"]
        page = gw.client.get("/status")
        assert 'src="/status/static/status.js"' in page.text
        assert gw.client.get("/status/static/status.js").status_code == 200
        assert gw.client.get("/status/static/index.html").status_code == 404

        def state() -> dict[str, Any]:
            doc = gw.client.get("/status/api/state").json()
            return doc if doc["vllm"][vllm_url]["state"] == "healthy" else {}

        deadline = time.monotonic() + 10
        while not (doc := state()) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert [u["url"] for u in doc["upstreams"]] == fleet.urls
        assert {u["state"] for u in doc["upstreams"]} == {"healthy"}
        assert [u["card"] for u in doc["upstreams"]] == [0, 0, 1]
        assert doc["vllm"][vllm_url]["running"] == 0
        assert doc["gateway"]["rss_bytes"] > 10_000_000 and doc["gateway"]["cpu_seconds"] > 0

        gw.client.post("/status/logout", headers={"Origin": gw.url})
        assert gw.client.get("/status/api/state").status_code == 401
        # a program reads the same document with an admin bearer token
        bearer = {"Authorization": f"Bearer {ADMIN}"}
        assert gw.client.get("/status/api/state", headers=bearer).json()["upstreams"]
        user = gw.client.get("/status/api/state", headers={"Authorization": f"Bearer {USER}"})
        assert user.status_code == 403


def test_cross_site_requests_are_refused(start_gateway, vllm_url, tmp_path) -> None:
    with DoubleFleet(1) as fleet:
        gw = start_gateway(status_config(fleet, vllm_url, tmp_path))
        evil = {"Origin": "http://evil.example", "Sec-Fetch-Site": "cross-site"}
        # a link from another site opens the page (it holds no data); a script there cannot
        link = {"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "navigate"}
        assert gw.client.get("/status", headers={**link, "Sec-Fetch-Dest": "document"}).is_success
        script = {
            "Sec-Fetch-Site": "cross-site",
            "Sec-Fetch-Mode": "cors",
            "Sec-Fetch-Dest": "empty",
        }
        assert gw.client.get("/status", headers=script).status_code == 403
        framed = {**link, "Sec-Fetch-Dest": "iframe"}
        assert gw.client.get("/status/login", headers=framed).status_code == 403
        assert login(gw.client, ADMIN, **evil).status_code == 403
        assert login(gw.client, ADMIN, Origin="http://evil.example").status_code == 403
        assert login(gw.client, ADMIN, **{"Sec-Fetch-Site": "same-site"}).status_code == 403
        assert login(gw.client, ADMIN, Origin=gw.url).status_code == 303  # logged in now
        assert gw.client.get("/status/api/state").status_code == 200
        across = gw.client.get("/status/api/state", headers={"Sec-Fetch-Site": "cross-site"})
        assert across.status_code == 403
        assert gw.client.post("/status/logout", headers=evil).status_code == 403
        assert gw.client.get("/status/api/state").status_code == 200  # still logged in


def test_the_page_in_headless_chromium(start_gateway, vllm_url, tmp_path) -> None:
    from tests.monitoring.cdp import Browser

    with DoubleFleet(4) as fleet, Browser() as browser:
        gw = start_gateway(status_config(fleet, vllm_url, tmp_path))
        page = browser.new_page()
        page.goto(f"{gw.url}/status")
        page.wait_for("!!document.querySelector('form[action=\"/status/login\"]')")
        assert page.eval("fetch('/status/api/state').then(r => r.status)") == 401
        log_in(page, ADMIN)
        assert page.eval("document.cookie") == ""  # HttpOnly: no script reads the session
        chips = "[...document.querySelectorAll('.chip.paddlex')].map(c => c.dataset.state)"
        page.wait_for(f"{chips}.length === 4 && {chips}.every(s => s === 'healthy')")
        assert page.eval("document.querySelectorAll('.card').length") == 2
        page.wait_for("document.querySelector('.chip.vllm').dataset.state === 'healthy'")

        fleet[1].stop()
        turned = seconds_until_unhealthy(page, fleet.urls[1], timeout=10)
        shot = save_screenshot(page, "status-page-doubles.png")
        assert shot.stat().st_size > 10_000 and turned < 10


def test_ten_hosts_of_eight_cards_stay_fast(start_gateway, tmp_path) -> None:
    """480 PaddleX behind 160 vLLM: the state document and one redraw of the page."""
    from tests.monitoring.cdp import Browser

    specs = [
        {
            "url": f"http://127.0.0.{h + 2}:{9120 + card + 10 * j}",
            "host": f"npu-{h}",
            "card": card,
            "vllm": f"http://127.0.0.{h + 2}:{9025 + card + 10 * (j // 3)}",
            "container": f"paddle-{9120 + card + 10 * j}-npu-{card}",
        }
        for h in range(10)
        for card in range(8)
        for j in range(6)
    ]
    config = gateway_config(
        specs,
        auth={"admin_tokens": [{"name": "ops", "sha256": sha(ADMIN)}]},
        health={"enabled": False},  # 480 addresses nobody serves: no probe storm
    )
    gw = start_gateway(config)
    bearer = {"Authorization": f"Bearer {ADMIN}"}
    gw.client.get("/status/api/state", headers=bearer)  # the first starts the vLLM probes
    time.sleep(2)  # their round is over (a refused connect each, 1.5 s at most)
    times = []
    for _ in range(5):
        started = time.perf_counter()
        answer = gw.client.get("/status/api/state", headers=bearer)
        times.append(time.perf_counter() - started)
    assert len(answer.json()["upstreams"]) == 480 and len(answer.json()["vllm"]) == 160
    elapsed = sorted(times)[2]
    print(f"state document: {len(answer.content) / 1024:.0f} KiB in {elapsed * 1000:.0f} ms")
    assert elapsed < 0.5
    with Browser() as browser:
        page = browser.new_page()
        page.goto(f"{gw.url}/status")
        log_in(page, ADMIN)
        assert page.eval("document.querySelectorAll('.chip.paddlex').length") == 480
        assert page.eval("document.querySelectorAll('.host').length") == 10
        draw_ms = page.eval(
            "fetch('/status/api/state').then(r => r.json()).then(doc => {"
            " const times = [1, 2, 3].map(() => { const t = performance.now();"
            " drawFleet(doc); drawHeader(doc); return performance.now() - t; });"
            " return times.sort((a, b) => a - b)[1]; })"
        )
        print(f"one redraw of 480 PaddleX: {draw_ms:.0f} ms (median of 3)")
        assert draw_ms < 250


def test_a_running_job_shows_its_page_progress_and_the_queue_its_slices(
    start_gateway, tmp_path
) -> None:
    from tests.gateway.jobs_helpers import AUTH, jobs_config, numbered_pdf, wait_job

    with DoubleFleet(1, per_page_s=0.3) as fleet:
        config = jobs_config(
            fleet.urls,
            tmp_path / "jobs",
            auth={"admin_tokens": [{"name": "ops", "sha256": sha(ADMIN)}]},
        )
        gw = start_gateway(config)
        answer = gw.client.post(
            "/api/v2/ocr/jobs", headers=AUTH, files={"file": ("d.pdf", numbered_pdf(12))}
        )
        job_id = answer.json()["data"]["jobId"]
        bearer = {"Authorization": f"Bearer {ADMIN}"}
        seen: list[dict[str, Any]] = []

        def progressed() -> bool:
            doc = gw.client.get("/status/api/state", headers=bearer).json()
            seen.append(doc)
            running = {j["id"]: j for j in doc["jobs"]["running"]}
            queued = any(w["priority"] == "background" for w in doc["queue"]["waiting"])
            return job_id in running and 0 < running[job_id]["done"] < 12 and queued

        deadline = time.monotonic() + 20
        while not progressed() and time.monotonic() < deadline:
            time.sleep(0.1)
        doc = seen[-1]
        job = next(j for j in doc["jobs"]["running"] if j["id"] == job_id)
        assert job["pages"] == 12 and 0 < job["done"] < 12 and job["tenant"] == "team-a"
        assert doc["jobs"]["jobs"]["running"] == 1
        # its next slice, leased, waits in the central queue behind the busy instance
        waiting = {(w["priority"], w["token"]): w["count"] for w in doc["queue"]["waiting"]}
        assert waiting.get(("background", "team-a"), 0) >= 1, doc["queue"]
        assert wait_job(gw.client, job_id)["state"] == "done"
        done = gw.client.get("/status/api/state", headers=bearer).json()["jobs"]
        assert done["running"] == [] and done["jobs"]["done"] == 1
