"""Bearer tokens, admin routes, per-token quotas and fairness among tokens in the central
queue, over real HTTP against PaddleX doubles."""

from __future__ import annotations

import hashlib
import json
import logging
import threading
from typing import Any

import httpx
import pytest

from gateway.access.control import Access
from gateway.config.settings import AuthSettings, ConfigError, parse_settings
from gateway.errors import AccessError
from tests.doubles.paddlex_double import DoubleFleet
from tests.gateway.conftest import RunningGateway, gateway_config
from tests.gateway.samples import b64, png_bytes
from tests.waiting import wait_for

PNG = b64(png_bytes())
TOKENS = {"team-a": "tok-a-0123456789", "team-b": "tok-b-9876543210", "ops": "tok-ops-abcdef"}


def sha(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def bearer(name: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {TOKENS[name]}"}


def auth_config(**limits: dict[str, Any]) -> dict[str, Any]:
    return {
        "tokens": [
            {"name": name, "sha256": sha(TOKENS[name]), **limits.get(name, {})}
            for name in ("team-a", "team-b")
        ],
        "admin_tokens": [{"name": "ops", "sha256": sha(TOKENS["ops"])}],
    }


def test_document_routes_need_a_token(fleet, start_gateway):
    gw = start_gateway(gateway_config(fleet.urls, auth=auth_config()))
    requests = [
        ("post", "/ocr", {"json": {"base64": PNG}}),
        ("post", "/ocr-file", {"files": {"file": ("a.png", png_bytes())}}),
        ("post", "/layout-parsing", {"json": {"file": PNG, "fileType": 1}}),
        ("post", "/restructure-pages", {"json": {"pages": []}}),
    ]
    wrong = [
        {},
        {"Authorization": "Bearer not-a-token"},
        {"Authorization": f"Basic {TOKENS['team-a']}"},
        {"Authorization": "Bearer"},
        {"Authorization": f"Bearer {TOKENS['team-a']}x"},
    ]
    for method, path, kwargs in requests:
        for headers in wrong:
            r = getattr(gw.client, method)(path, headers=headers, **kwargs)
            assert r.status_code == 401, (path, headers, r.text)
            assert r.headers["www-authenticate"].startswith("Bearer")
            body = r.json()
            assert body["error"]["code"] in ("unauthorized", "invalid_token") and body["request_id"]
            if path in ("/layout-parsing", "/restructure-pages"):
                assert body["errorCode"] == 401
    assert all(not d.requests for d in fleet.doubles)
    for name in ("team-a", "ops"):  # an admin token serves documents too
        r = gw.client.post("/ocr", json={"base64": PNG}, headers=bearer(name))
        assert r.status_code == 200, r.text
        r = gw.client.post(
            "/layout-parsing", json={"file": PNG, "fileType": 1}, headers=bearer(name)
        )
        assert r.status_code == 200 and r.json()["errorCode"] == 0


def test_admin_routes_need_an_admin_token(fleet, start_gateway, caplog):
    caplog.set_level(logging.INFO, logger="gateway.access")
    gw = start_gateway(gateway_config(fleet.urls, auth=auth_config()))
    for path in ("/upstreams", "/metrics"):
        assert gw.client.get(path).status_code == 401
        r = gw.client.get(path, headers=bearer("team-a"))
        assert r.status_code == 403 and r.json()["error"]["code"] == "forbidden"
        assert gw.client.get(path, headers=bearer("ops")).status_code == 200
    for path in ("/health", "/ready"):  # open
        assert gw.client.get(path).status_code == 200
    assert gw.client.post("/ocr", json={"base64": PNG}, headers=bearer("team-b")).status_code == 200
    metrics = gw.client.get("/metrics", headers=bearer("ops")).text
    assert 'gateway_requests_total{code="200",route="/ocr",token="team-b"} 1.0' in metrics
    assert 'gateway_access_refused_total{reason="forbidden",token="team-a"} 2.0' in metrics
    assert 'gateway_requests_total{code="401",route="/upstreams",token="-"} 1.0' in metrics
    lines = [r.getMessage() for r in caplog.records if r.name == "gateway.access"]
    assert any('"POST /ocr HTTP/1.1" 200 token=team-b' in line for line in lines), lines
    everything = metrics + "\n".join(lines) + caplog.text
    assert all(token not in everything for token in TOKENS.values())


def test_open_gateway_warns_and_serves(fleet, start_gateway, caplog):
    caplog.set_level(logging.WARNING, logger="gateway.runtime")
    gw = start_gateway(gateway_config(fleet.urls))
    assert gw.client.post("/ocr", json={"base64": PNG}).status_code == 200
    assert gw.client.get("/upstreams").status_code == 200
    assert "no bearer tokens configured" in caplog.text


def test_token_config_errors_name_the_key():
    cases = [
        ({"tokens": [{"name": "a", "sha256": "abc"}]}, "auth.tokens[0].sha256"),
        ({"tokens": [{"name": "a b", "sha256": sha("x")}]}, "auth.tokens[0].name"),
        ({"admin_tokens": [{"name": "a", "sha256": sha("x"), "rate_per_s": 0}]}, "rate_per_s"),
        (
            {"tokens": [{"name": "a", "sha256": sha("x")}, {"name": "b", "sha256": sha("x")}]},
            "tokens[1]",
        ),
    ]
    for auth, key in cases:
        with pytest.raises(ConfigError) as err:
            parse_settings({"auth": auth})
        assert key in str(err.value)


def test_quota_state_is_per_token():
    clock = [0.0]
    access = Access(
        AuthSettings.model_validate(
            auth_config(**{"team-a": {"rate_per_s": 2, "max_in_flight": 3}})
        ),
        clock=lambda: clock[0],
    )
    a = access.authenticate(f"Bearer {TOKENS['team-a']}", admin=False)
    b = access.authenticate(f"bearer {TOKENS['team-b']}", admin=False)
    access.admit(a)
    access.admit(a)  # a second's worth of burst: 2
    with pytest.raises(AccessError) as err:
        access.admit(a)
    assert err.value.status == 429 and err.value.headers["Retry-After"] == "1"
    for _ in range(50):
        access.admit(b)  # team-b has no limits and is not slowed
    clock[0] += 0.5  # one more request's worth
    access.admit(a)
    with pytest.raises(AccessError) as err:
        access.admit(a)  # three in flight now
    assert err.value.code == "too_many_in_flight"
    access.release(a)
    clock[0] += 10
    access.admit(a)


class Held:
    """A request whose body is held back until ``release()``: it stays in flight."""

    def __init__(self, gw: RunningGateway, name: str) -> None:
        self.gate = threading.Event()
        self.result: list[httpx.Response] = []

        def body():
            yield b'{"base64": "'
            self.gate.wait(60)
            yield PNG.encode() + b'"}'

        def run() -> None:
            with httpx.Client(base_url=gw.url, timeout=60, trust_env=False) as client:
                self.result.append(client.post("/ocr", content=body(), headers=bearer(name)))

        self.thread = threading.Thread(target=run)
        self.thread.start()

    def release(self) -> httpx.Response:
        self.gate.set()
        self.thread.join(60)
        return self.result[0]


def test_max_in_flight_and_rate_over_http(fleet, start_gateway):
    limits = {"team-a": {"max_in_flight": 1}, "team-b": {"rate_per_s": 0.01}}
    gw = start_gateway(gateway_config(fleet.urls, auth=auth_config(**limits)))
    held = Held(gw, "team-a")
    assert wait_for(lambda: gw.runtime.access.in_flight().get("team-a") == 1)
    r = gw.client.post("/ocr", json={"base64": PNG}, headers=bearer("team-a"))
    assert r.status_code == 429 and r.json()["error"]["code"] == "too_many_in_flight"
    assert r.headers["retry-after"] == "1"
    # other tokens are not slowed by team-a's quota
    assert gw.client.post("/ocr", json={"base64": PNG}, headers=bearer("ops")).status_code == 200
    assert held.release().status_code == 200
    assert gw.client.post("/ocr", json={"base64": PNG}, headers=bearer("team-a")).status_code == 200
    # team-b: one request per 100 s
    assert gw.client.post("/ocr", json={"base64": PNG}, headers=bearer("team-b")).status_code == 200
    r = gw.client.post("/ocr", json={"base64": PNG}, headers=bearer("team-b"))
    assert r.status_code == 429 and r.json()["error"]["code"] == "rate_limited"
    assert int(r.headers["retry-after"]) >= 1
    assert gw.client.post("/ocr", json={"base64": PNG}, headers=bearer("team-a")).status_code == 200


def _send(
    gw: RunningGateway, name: str, rid: str, out: dict[str, httpx.Response]
) -> threading.Thread:
    def run() -> None:
        with httpx.Client(base_url=gw.url, timeout=120, trust_env=False) as client:
            headers = {**bearer(name), "X-Request-ID": rid}
            out[rid] = client.post("/ocr", json={"base64": PNG}, headers=headers)

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def test_central_queue_is_fair_among_tokens(start_gateway):
    with DoubleFleet(1) as fleet:
        gw = start_gateway(
            gateway_config(
                fleet.urls,
                auth=auth_config(),
                load_balance={"mode": "queue", "upstream_concurrency": 1, "queue_max_depth": 4},
                health={"enabled": False},
                http={"timeout_s": 120, "request_deadline_s": 240},
            )
        )
        double = fleet[0]
        out: dict[str, httpx.Response] = {}
        threads = []
        double.knobs.hang = True  # holds the first document until released
        try:
            threads.append(_send(gw, "team-a", "a0", out))
            assert wait_for(lambda: double.stats.hung >= 1)
            for k in range(1, 5):  # team-a floods the queue: a1..a4
                threads.append(_send(gw, "team-a", f"a{k}", out))
                assert wait_for(lambda k=k: gw.runtime.pool.queue_depth == k)
            # the queue is full; team-b's one document takes the place of team-a's newest
            threads.append(_send(gw, "team-b", "b1", out))
            assert wait_for(lambda: "a4" in out)
            assert gw.runtime.pool.queue.waiting() == {"team-a": 3, "team-b": 1}
        finally:
            double.knobs.hang = False
        for thread in threads:
            thread.join(120)
        assert out["a4"].status_code == 503 and out["a4"].json()["error"]["code"] == "queue_full"
        assert "gave way" in out["a4"].json()["error"]["message"]
        assert all(out[rid].status_code == 200 for rid in ("a0", "a1", "a2", "a3", "b1"))
        order = [r.body["logId"] for r in double.layout_requests()]
        # FIFO would serve b1 last; fair queueing serves it right after team-a's next turn
        assert order.index("b1") <= 2, order


def test_tokens_reload_in_place(fleet, start_gateway, tmp_path):
    config = gateway_config(fleet.urls, auth={"tokens": auth_config()["tokens"][:1]})
    gw = start_gateway(config, file=True)
    assert gw.client.post("/ocr", json={"base64": PNG}, headers=bearer("team-b")).status_code == 401
    (tmp_path / "gateway.json").write_text(
        json.dumps(gateway_config(fleet.urls, auth=auth_config()))
    )
    assert wait_for(
        lambda: (
            gw.client.post("/ocr", json={"base64": PNG}, headers=bearer("team-b")).status_code
            == 200
        )
    )
    assert gw.client.get("/metrics", headers=bearer("ops")).status_code == 200


def test_the_local_token_file_is_an_admin_token_only_its_container_can_read(
    fleet, start_gateway, tmp_path
):
    token_file = tmp_path / "run" / "admin.token"
    auth = {**auth_config(), "local_token_file": str(token_file)}
    gw = start_gateway(gateway_config(fleet.urls, auth=auth))
    assert token_file.stat().st_mode & 0o777 == 0o600
    local = {"Authorization": f"Bearer {token_file.read_text().strip()}"}
    assert httpx.get(f"{gw.url}/upstreams", headers=local).status_code == 200
    assert httpx.get(f"{gw.url}/upstreams", headers=bearer("team-a")).status_code == 403
    # A gateway started again beside the same file keeps the token that is there.
    before = token_file.read_text()
    Access(AuthSettings.model_validate(auth))
    assert token_file.read_text() == before
    # An open gateway needs no token and writes none.
    open_file = tmp_path / "open" / "admin.token"
    Access(AuthSettings.model_validate({"local_token_file": str(open_file)}))
    assert not open_file.exists()
