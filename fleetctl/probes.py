"""HTTP probes of single fleet instances: health, vLLM model list, PaddleX and gateway OCR.

Every probe returns a `Probe` (ok flag, short detail, elapsed seconds) and never raises for
network trouble, so a table can show one line per instance.

Usage::

    async with httpx.AsyncClient() as http:
        p = await health(http, inst)
        print(p.ok, p.detail)
"""

from __future__ import annotations

import asyncio
import base64
import functools
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, ParamSpec

import httpx

from fleetctl.auth import REFUSED, bearer, redact, refusal
from fleetctl.png import encode_png
from fleetctl.topology import Instance
from gateway.wire import paddlex_routes

P = ParamSpec("P")


@dataclass(frozen=True)
class Probe:
    ok: bool
    detail: str
    elapsed_s: float = 0.0
    data: Any = None


def tiny_png(width: int = 96, height: int = 32) -> bytes:
    """A small valid PNG (white, with a black bar), built without Pillow."""
    rows = []
    for y in range(height):
        dark = height // 3 <= y < 2 * height // 3
        row = bytearray()
        for x in range(width):
            v = 0 if dark and width // 8 <= x < 7 * width // 8 else 255
            row += bytes((v, v, v))
        rows.append(bytes(row))
    return encode_png(width, height, rows, rgb=True, level=9)


TINY_PNG_B64 = base64.b64encode(tiny_png()).decode("ascii")


def _err(e: Exception) -> str:
    if isinstance(e, httpx.ConnectError):
        return "down (connection refused)" if "refused" in str(e).lower() else f"down ({e})"
    if isinstance(e, httpx.TimeoutException):
        return "timeout"
    return f"error ({type(e).__name__}: {e})"


def _body_message(r: httpx.Response) -> str:
    try:
        j = r.json()
    except ValueError:
        return r.text.strip()[:120]
    if isinstance(j, dict):
        if isinstance(j.get("error"), dict):
            return str(j["error"].get("message", ""))[:120]
        if "errorMsg" in j:
            return str(j["errorMsg"])[:120]
    return str(j)[:120]


class _Failed(Exception):
    """A probe that failed before its end: `probe` is its result (`_probe` returns it)."""

    def __init__(self, probe: Probe) -> None:
        super().__init__(probe.detail)
        self.probe = probe


def _probe(run: Callable[P, Awaitable[Probe]]) -> Callable[P, Awaitable[Probe]]:
    """`run`, whose `_Failed` becomes its result: a probe never raises for network trouble."""

    @functools.wraps(run)
    async def probe(*args: P.args, **kwargs: P.kwargs) -> Probe:
        try:
            return await run(*args, **kwargs)
        except _Failed as failed:
            return failed.probe

    return probe


async def _timed(
    request: Awaitable[httpx.Response], secrets: tuple[str, ...] = ()
) -> tuple[httpx.Response, float]:
    """The answer to `request` and the seconds it took; `_Failed` on network trouble (its
    detail with `secrets` masked)."""
    t0 = time.monotonic()
    try:
        r = await request
    except httpx.HTTPError as e:
        raise _Failed(Probe(False, redact(_err(e), secrets), time.monotonic() - t0)) from e
    return r, time.monotonic() - t0


@_probe
async def health(http: httpx.AsyncClient, inst: Instance, timeout: float = 5.0) -> Probe:
    """``GET /health``: PaddleX answers ``errorCode 0``; vLLM and the gateway answer 200."""
    r, dt = await _timed(http.get(f"{inst.url}/health", timeout=timeout))
    if r.status_code != 200:
        return Probe(False, f"HTTP {r.status_code} {_body_message(r)}".strip(), dt)
    if inst.kind == "paddlex":
        try:
            code = r.json().get("errorCode")
        except (ValueError, AttributeError):
            code = None
        if code not in (0, None):
            return Probe(False, f"errorCode {code}", dt)
    return Probe(True, "ok", dt)


@_probe
async def vllm_models(http: httpx.AsyncClient, inst: Instance, timeout: float = 10.0) -> Probe:
    """``GET /v1/models`` must list the served model name."""
    r, dt = await _timed(http.get(f"{inst.url}/v1/models", timeout=timeout))
    if r.status_code != 200:
        return Probe(False, f"/v1/models HTTP {r.status_code}", dt)
    try:
        ids = [m.get("id") for m in r.json().get("data", [])]
    except (ValueError, AttributeError):
        return Probe(False, "/v1/models: not the OpenAI list shape", dt)
    if inst.served_model not in ids:
        has = ", ".join(map(str, ids))
        return Probe(False, f"model {inst.served_model} not served (has: {has})", dt, ids)
    return Probe(True, f"serves {inst.served_model}", dt, ids)


@_probe
async def paddlex_parse(http: httpx.AsyncClient, inst: Instance, timeout: float = 300.0) -> Probe:
    """``POST /layout-parsing`` of the built-in PNG through this one PaddleX instance."""
    body = {"file": TINY_PNG_B64, "fileType": 1, "visualize": False}
    r, dt = await _timed(
        http.post(inst.url + paddlex_routes.LAYOUT_PARSING, json=body, timeout=timeout)
    )
    if r.status_code != 200:
        return Probe(
            False, f"{paddlex_routes.LAYOUT_PARSING} HTTP {r.status_code}: {_body_message(r)}", dt
        )
    try:
        j = r.json()
        pages = j["result"]["layoutParsingResults"]
        text = "".join((p.get("markdown") or {}).get("text", "") for p in pages)
    except (ValueError, KeyError, TypeError, AttributeError):
        return Probe(False, f"{paddlex_routes.LAYOUT_PARSING}: unexpected body", dt)
    if j.get("errorCode", 0) != 0 or not pages:
        return Probe(
            False,
            f"{paddlex_routes.LAYOUT_PARSING} errorCode {j.get('errorCode')}, {len(pages)} pages",
            dt,
        )
    return Probe(True, f"{len(pages)} page, {len(text)} chars", dt, text)


@_probe
async def gateway_ocr(
    http: httpx.AsyncClient, url: str, timeout: float = 300.0, token: str | None = None
) -> Probe:
    """``POST {gateway}/ocr`` with the built-in PNG as base64, as `token` when given."""
    secrets = (token,) if token else ()
    r, dt = await _timed(
        http.post(
            f"{url}/ocr", json={"base64": TINY_PNG_B64}, headers=bearer(token), timeout=timeout
        ),
        secrets,
    )
    message = redact(_body_message(r), secrets)
    if r.status_code in REFUSED:
        why = refusal(r.status_code, message, sent=token is not None)
        return Probe(False, f"/ocr HTTP {r.status_code}: {why}", dt)
    if r.status_code != 200:
        return Probe(False, f"/ocr HTTP {r.status_code}: {message}", dt)
    try:
        j = r.json()
        text = j["text"]
    except (ValueError, KeyError, TypeError):
        return Probe(False, "/ocr: unexpected body", dt)
    return Probe(
        True,
        f"via {j.get('upstream', '?')}, {j.get('attempts', '?')} attempt(s), {len(text)} chars",
        dt,
        j,
    )


@dataclass(frozen=True)
class GatewayView:
    """The gateway's ``/upstreams`` keyed by upstream URL (None when it could not be read),
    a one-line summary or the reason, and whether the gateway refused the admin token."""

    upstreams: dict[str, dict[str, Any]] | None
    summary: str
    refused: bool = False


async def gateway_upstreams(
    http: httpx.AsyncClient, url: str, timeout: float = 5.0, token: str | None = None
) -> GatewayView:
    """``GET {gateway}/upstreams``, as admin `token` when given."""
    try:
        r = await http.get(f"{url}/upstreams", headers=bearer(token), timeout=timeout)
        if r.status_code in REFUSED:
            message = redact(_body_message(r), (token,) if token else ())
            why = refusal(r.status_code, message, sent=token is not None, admin=True)
            return GatewayView(None, f"/upstreams HTTP {r.status_code}: {why}", refused=True)
        r.raise_for_status()
        j = r.json()
        return GatewayView(
            {str(u["url"]).rstrip("/"): u for u in j.get("upstreams", [])},
            f"mode {j.get('mode', '?')}, queue {j.get('queue_depth', '?')}",
        )
    except httpx.HTTPError as e:
        return GatewayView(
            None, redact(f"gateway unreachable: {_err(e)}", (token,) if token else ())
        )
    except (ValueError, KeyError, TypeError, AttributeError):
        return GatewayView(None, "gateway /upstreams: unexpected body")


async def wait_healthy(
    http: httpx.AsyncClient, inst: Instance, timeout: float, interval: float = 2.0
) -> Probe:
    """Poll `health` until it passes or `timeout` seconds have gone by."""
    deadline = time.monotonic() + timeout
    while True:
        p = await health(http, inst)
        if p.ok or time.monotonic() + interval > deadline:
            return p
        await asyncio.sleep(interval)
