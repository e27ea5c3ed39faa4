"""Bearer tokens: the client, `ocr`, `status`, `verify` and `ports` against a fake gateway with
tokens, on loopback. No token may ever show up in what fleetctl prints or writes."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from fleetctl.auth import ADMIN_TOKEN_ENV, TOKEN_ENV, TokenError, resolve
from fleetctl.batch import REPORT_NAME
from fleetctl.cli import main
from fleetctl.client import AsyncClient, AuthError, Client, OcrError, RetryPolicy
from tests.doubles.servers import ServerThread
from tests.fleetctl.conftest import PNG, FakeDocker, doc, one_card_topology
from tests.fleetctl.fakes import expected_text, fake_gateway, fake_paddlex, fake_vllm

USER = "user-7f3a9c1e5b2d4f60a8c3"
ADMIN = "admin-2c8e4a6f0b1d3957e4aa"
WRONG = "wrong-9d1b3f5a7c2e4068b6ff"
SECRETS = (USER, ADMIN, WRONG)
FAST = RetryPolicy(max_attempts=4, backoff_base=0.05, backoff_max=0.2)


def assert_no_secret(*texts: str) -> None:
    for text in texts:
        for secret in SECRETS:
            assert secret not in text


@pytest.fixture
def gateway() -> Iterator[ServerThread]:
    with ServerThread(fake_gateway(tokens={USER}, admin_tokens={ADMIN})) as s:
        yield s


def sent(gw: ServerThread, path: str) -> list[str | None]:
    return [auth for p, auth in gw.app.state.auth_seen if p == path]


def test_client_sends_the_token(
    gateway: ServerThread, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = doc(PNG, "hello")
    with Client(gateway.url, token=USER) as c:
        assert c.ocr(data).text == expected_text("upload.png", data)
        assert c.ocr(url="https://example.test/a.png").text.startswith("# url")
    with Client(gateway.url, token=ADMIN) as c:  # an admin token is good for documents too
        assert c.ocr(data).pages == 1
    monkeypatch.setenv(TOKEN_ENV, USER)
    with Client(gateway.url) as c:
        assert c.ocr(data).pages == 1
    assert sent(gateway, "/ocr-file") == [f"Bearer {USER}", f"Bearer {ADMIN}", f"Bearer {USER}"]
    assert sent(gateway, "/ocr") == [f"Bearer {USER}"]
    with Client(gateway.url, token=USER) as c:
        assert_no_secret(repr(c), repr(c.headers), repr(c._http.headers))

    async def go() -> None:
        async with AsyncClient(gateway.url, token=USER, retry=FAST) as ac:
            assert (await ac.ocr(data)).pages == 1
        async with AsyncClient(gateway.url, token="", retry=FAST) as ac:  # "": send none
            with pytest.raises(AuthError):
                await ac.ocr(data)

    asyncio.run(go())


def test_401_is_final_and_names_the_fix(gateway: ServerThread) -> None:
    with Client(gateway.url, retry=FAST) as c, pytest.raises(AuthError) as ei:
        c.ocr(doc(PNG))
    e = ei.value
    assert (e.status, e.code, e.attempts) == (401, "unauthorized", 1)
    assert "the gateway requires a token: set --token or PADDLEOCR_FLEET_TOKEN" in str(e)
    with Client(gateway.url, token=WRONG, retry=FAST) as c, pytest.raises(AuthError) as ei:
        c.ocr(doc(PNG))
    e = ei.value
    assert e.status == 401 and e.attempts == 1 and e.request_id
    assert "the gateway refused the token: set --token or PADDLEOCR_FLEET_TOKEN" in str(e)
    assert_no_secret(str(e), repr(e), e.message)
    # neither was retried, and no document got through
    assert len(sent(gateway, "/ocr-file")) == 2 and gateway.app.state.requests == []


def test_429_is_retried_after_retry_after(gateway: ServerThread) -> None:
    retries: list[tuple[int, float, str]] = []
    data = doc(PNG, "THROTTLE2")
    policy = RetryPolicy(max_attempts=4, backoff_base=0.01, backoff_max=0.02)
    with Client(gateway.url, token=USER, retry=policy, on_retry=lambda *a: retries.append(a)) as c:
        t0 = time.monotonic()
        r = c.ocr(data)
        took = time.monotonic() - t0
    assert r.client_attempts == 3 and r.text == expected_text("upload.png", data)
    assert took >= 2.0  # Retry-After: 1, twice; not the 0.01 s back-off
    assert [m.split(":")[0] for _, _, m in retries] == ["HTTP 429 too_many_in_flight"] * 2
    assert all(1.0 <= d <= 1.1 for _, d, _ in retries)


def test_a_token_echoed_by_the_server_is_masked(gateway: ServerThread) -> None:
    with Client(gateway.url, token=USER, retry=FAST) as c, pytest.raises(OcrError) as ei:
        c.ocr(doc(PNG, "ECHOAUTH"))
    assert ei.value.status == 400 and "you sent Bearer ***" in str(ei.value)
    assert_no_secret(str(ei.value), repr(ei.value))


def test_resolve_falls_back_between_user_and_admin(monkeypatch: pytest.MonkeyPatch) -> None:
    t = resolve()
    assert (t.user, t.admin, t.user_from) == (None, None, "none")
    monkeypatch.setenv(ADMIN_TOKEN_ENV, ADMIN)
    t = resolve()
    assert (t.user, t.admin, t.user_from) == (ADMIN, ADMIN, ADMIN_TOKEN_ENV)
    monkeypatch.setenv(TOKEN_ENV, USER)
    t = resolve()
    assert (t.user, t.admin) == (USER, ADMIN)
    t = resolve(token=WRONG)
    assert (t.user, t.user_from, t.admin) == (WRONG, "--token", ADMIN)
    monkeypatch.delenv(ADMIN_TOKEN_ENV)
    t = resolve()
    assert (t.admin, t.admin_from) == (USER, TOKEN_ENV)
    assert_no_secret(repr(t))


def ocr_args(gw: ServerThread, src: Path, out: Path, *extra: str) -> list[str]:
    return ["ocr", str(src), "--out", str(out), "--gateway", gw.url, "--no-progress", *extra]


def test_ocr_cli_token_from_env_and_flag(
    gateway: ServerThread,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    src, out = tmp_path / "in", tmp_path / "out"
    src.mkdir()
    for i in range(3):
        (src / f"{i}.png").write_bytes(doc(PNG, f"n{i}"))
    monkeypatch.setenv(TOKEN_ENV, USER)
    assert main(ocr_args(gateway, src, out)) == 0
    err = capsys.readouterr().err
    assert "3 done" in err and f"token from {TOKEN_ENV}" in err
    assert set(sent(gateway, "/ocr-file")) == {f"Bearer {USER}"}
    monkeypatch.delenv(TOKEN_ENV)
    assert main(ocr_args(gateway, src, out, "--force", "--token", ADMIN)) == 0
    out_, err = capsys.readouterr()
    assert "3 done" in err and "token from --token" in err
    assert sent(gateway, "/ocr-file")[-3:] == [f"Bearer {ADMIN}"] * 3
    assert_no_secret(out_, err)


def test_ocr_cli_refused_token_stops_the_batch(
    gateway: ServerThread, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src, out = tmp_path / "in", tmp_path / "out"
    src.mkdir()
    for i in range(6):
        (src / f"{i}.png").write_bytes(doc(PNG, f"n{i}"))
    assert main(ocr_args(gateway, src, out, "-c", "2")) == 2
    err = capsys.readouterr().err
    assert "no token" in err
    assert "the gateway requires a token: set --token or PADDLEOCR_FLEET_TOKEN" in err
    assert "6 not done" in err and "0 failed" in err
    assert len(sent(gateway, "/ocr-file")) == 2  # one per worker, then it stopped
    assert not list(out.rglob("*.md")) and not (out / REPORT_NAME).exists()

    assert main(ocr_args(gateway, src, out, "--token", WRONG)) == 2
    out_, err = capsys.readouterr()
    assert "the gateway refused the token: set --token or PADDLEOCR_FLEET_TOKEN" in err
    assert_no_secret(out_, err)

    assert main(ocr_args(gateway, src, out, "--token", USER)) == 0  # the re-run does it all
    assert "6 done" in capsys.readouterr().err and len(list(out.rglob("*.md"))) == 6


def test_ocr_cli_report_never_holds_the_token(
    gateway: ServerThread, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src, out = tmp_path / "in", tmp_path / "out"
    src.mkdir()
    (src / "echo.png").write_bytes(doc(PNG, "ECHOAUTH"))
    (src / "fine.png").write_bytes(doc(PNG))
    assert main(ocr_args(gateway, src, out, "--token", USER)) == 1
    out_, err = capsys.readouterr()
    report = (out / REPORT_NAME).read_text()
    assert "Bearer ***" in report and "1 done" in err
    assert_no_secret(out_, err, report)


@dataclass
class Fleet:
    gw: ServerThread
    vllm: ServerThread
    pdx: ServerThread
    outputs: Path


@pytest.fixture
def fleet(tmp_path: Path, fake_docker: FakeDocker) -> Iterator[Fleet]:
    with (
        ServerThread(fake_vllm()) as vllm,
        ServerThread(fake_paddlex()) as pdx,
        ServerThread(fake_gateway(tokens={USER}, admin_tokens={ADMIN})) as gw,
    ):
        gw.app.state.upstreams = [
            {"url": pdx.url, "vllm": vllm.url, "state": "healthy", "in_flight": 0}
        ]
        containers = {"vllm": "vllm-sim-0", "paddlex": "paddle-sim-0", "gateway": "gateway"}
        topo = one_card_topology(
            [
                {
                    "port": vllm.port,
                    "url": vllm.url,
                    "container": containers["vllm"],
                    "paddlex": [
                        {
                            "port": pdx.port,
                            "url": pdx.url,
                            "container": containers["paddlex"],
                            "start_command": "true",
                        }
                    ],
                }
            ],
            gateway={
                "host": "local",
                "port": gw.port,
                "url": gw.url,
                "container": containers["gateway"],
            },
        )
        outputs = tmp_path / "outputs.json"
        outputs.write_text(json.dumps({"gateway_url": gw.url, "topology": topo}))
        fake_docker.set_states({n: "running" for n in containers.values()})
        yield Fleet(gw, vllm, pdx, outputs)


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, Any, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    assert_no_secret(out, err)
    return code, (json.loads(out) if "--json" in args else out), err


def test_status_uses_the_admin_token(
    fleet: Fleet, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(TOKEN_ENV, USER)
    monkeypatch.setenv(ADMIN_TOKEN_ENV, ADMIN)
    code, data, _ = run(capsys, "status", "--outputs", str(fleet.outputs), "--json")
    assert code == 0 and data["ok"] and "gateway_error" not in data
    views = {r["kind"]: r["gateway"] for r in data["instances"]}
    assert views == {
        "vllm": "1/1 paddlex healthy",
        "paddlex": "healthy",
        "gateway": views["gateway"],
    }
    assert views["gateway"].startswith("mode least_busy")
    assert sent(fleet.gw, "/upstreams") == [f"Bearer {ADMIN}"]
    assert sent(fleet.gw, "/health") == [None]  # open, so no token goes there
    monkeypatch.delenv(ADMIN_TOKEN_ENV)
    code, data, _ = run(
        capsys, "status", "--outputs", str(fleet.outputs), "--json", "--admin-token", ADMIN
    )
    assert code == 0 and sent(fleet.gw, "/upstreams")[-1] == f"Bearer {ADMIN}"


def test_status_without_an_admin_token(
    fleet: Fleet, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ("status", "--outputs", str(fleet.outputs))
    code, data, _ = run(capsys, *args, "--json")
    assert code == 1 and data["ok"] is False
    need = "the gateway requires an admin token: set --admin-token or PADDLEOCR_FLEET_ADMIN_TOKEN"
    assert need in data["gateway_error"]
    rows = {r["kind"]: r for r in data["instances"]}
    assert not rows["gateway"]["ok"] and need in rows["gateway"]["gateway"]
    assert rows["paddlex"]["ok"] and rows["paddlex"]["gateway"] == "-"
    assert all(need in r["gateway_error"] for r in rows.values())
    # a selection without the gateway row still fails, and says why
    code, data, _ = run(capsys, *args, "--json", "--kind", "paddlex")
    assert code == 1 and need in data["gateway_error"]
    # the user token falls in for the admin one: the gateway's 403 is reported, not a crash
    monkeypatch.setenv(TOKEN_ENV, USER)
    code, table, _ = run(capsys, *args)
    assert code == 1 and "gateway: /upstreams HTTP 403" in table
    assert "the gateway refused the token: it is not an admin token" in table
    assert "set --admin-token or PADDLEOCR_FLEET_ADMIN_TOKEN" in table
    code, data, _ = run(capsys, *args, "--json", "--admin-token", WRONG)
    assert code == 1 and "the gateway refused the admin token" in data["gateway_error"]
    assert sent(fleet.gw, "/upstreams")[-2:] == [f"Bearer {USER}", f"Bearer {WRONG}"]


def test_verify_uses_the_user_token(
    fleet: Fleet, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ("verify", "--outputs", str(fleet.outputs), "--json", "--timeout", "10")
    code, data, _ = run(capsys, *args)
    assert code == 1 and data["ok"] is False
    checks = {r["kind"]: r for r in data["checks"]}
    assert checks["vllm"]["ok"] and checks["paddlex"]["ok"] and not checks["gateway"]["ok"]
    assert checks["gateway"]["detail"].startswith("/ocr HTTP 401: the gateway requires a token")
    assert "set --token or PADDLEOCR_FLEET_TOKEN" in checks["gateway"]["detail"]
    monkeypatch.setenv(ADMIN_TOKEN_ENV, ADMIN)  # only an admin token: verify uses it
    code, data, _ = run(capsys, *args)
    assert code == 0 and sent(fleet.gw, "/ocr")[-1] == f"Bearer {ADMIN}"
    code, data, _ = run(capsys, *args, "--token", USER)
    assert code == 0 and sent(fleet.gw, "/ocr")[-1] == f"Bearer {USER}"
    code, data, _ = run(capsys, *args, "--token", WRONG)
    detail = {r["kind"]: r for r in data["checks"]}["gateway"]["detail"]
    assert code == 1 and "the gateway refused the token: set --token" in detail


def test_ports_knows_a_gateway_with_tokens_without_sending_one(
    fleet: Fleet, capsys: pytest.CaptureFixture[str]
) -> None:
    code, rows, _ = run(
        capsys, "ports", "--outputs", str(fleet.outputs), "--json", "--kind", "gateway"
    )
    assert code == 0 and [(r["state"], r["detail"]) for r in rows] == [
        ("listening", "gateway answers")
    ]
    assert sent(fleet.gw, "/upstreams") == [None]


def test_a_token_that_cannot_be_sent_is_refused_up_front(
    gateway: ServerThread,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    bad = f"{USER}\n{ADMIN}"  # httpx's error for such a header would quote it
    with pytest.raises(TokenError) as ei:
        Client(gateway.url, token=bad)
    assert "token=" in str(ei.value)
    assert_no_secret(str(ei.value))
    (tmp_path / "a.png").write_bytes(doc(PNG))
    monkeypatch.setenv(TOKEN_ENV, bad)
    code = main(ocr_args(gateway, tmp_path / "a.png", tmp_path / "out"))
    out, err = capsys.readouterr()
    assert code == 2 and f"the token from {TOKEN_ENV} is not a valid bearer token" in err
    assert_no_secret(out, err)
    assert gateway.app.state.auth_seen == []
