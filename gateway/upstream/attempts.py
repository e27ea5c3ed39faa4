"""How one attempt at an upstream ends: its record and how answers are classified.

An attempt raises :class:`~gateway.errors.UpstreamFailure` when another upstream might do
better (5xx, an unusable body, a transport error), :class:`~gateway.errors.UpstreamClientError`
when the upstream refused the request itself (4xx, not retried); both live with the gateway's
other exceptions in :mod:`gateway.errors`.

Usage::

    response = await client.post(url, json=body)
    raise_for_upstream_status(response)  # 4xx -> UpstreamClientError, 5xx -> UpstreamFailure
    try:
        ...
    except httpx.HTTPError as exc:
        outcome, reason = classify_transport_error(exc)  # ("connect_error", "connect error: ...")
    if outcome == "reset" and await refuses_connections(url, timeout=1.0):
        ...  # the process is gone, not just the connection
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from dataclasses import dataclass

import httpx

from gateway.errors import UpstreamClientError, UpstreamFailure
from gateway.wire.upstream_http import Reply


@dataclass
class Attempt:
    """One tried upstream and what happened there."""

    upstream: str
    outcome: str
    reason: str | None = None
    status: int | None = None
    elapsed_s: float = 0.0


def error_message(body: bytes) -> str:
    """The PaddleX ``errorMsg`` of an envelope, else the (shortened) raw body."""
    try:
        data = json.loads(body)
        if isinstance(data, dict) and "errorMsg" in data:
            return str(data["errorMsg"])
    except ValueError:
        pass
    text = body.decode("utf-8", "replace").strip()
    return text[:300] or "(empty body)"


def raise_for_upstream_status(response: Reply | httpx.Response) -> None:
    """Raise :class:`UpstreamClientError` for a 4xx answer, :class:`UpstreamFailure` for 5xx."""
    status, content = response.status_code, response.content
    if 400 <= status < 500:
        raise UpstreamClientError(
            status, error_message(content), content, response.headers.get("content-type")
        )
    if status >= 500:
        raise UpstreamFailure("server_error", f"HTTP {status}: {error_message(content)}", status)


def classify_transport_error(exc: httpx.HTTPError) -> tuple[str, str]:
    """Map an httpx exception to (outcome, human reason)."""
    name = type(exc).__name__
    detail = str(exc) or name
    if isinstance(exc, httpx.ConnectTimeout | httpx.ConnectError):
        return "connect_error", f"connect error: {detail}"
    if isinstance(exc, httpx.TimeoutException):
        return "timeout", f"timeout ({name})"
    if isinstance(exc, httpx.RemoteProtocolError | httpx.ReadError | httpx.WriteError):
        return "reset", f"connection reset: {detail}"
    return "reset", f"transport error: {name}: {detail}"


async def refuses_connections(url: str, timeout: float) -> str | None:
    """Why a TCP connect to ``url``'s host and port fails (refused or timed out), else None.

    After a reset this tells a dead process (its port is closed too) from a dropped
    keep-alive connection of a live one. Nothing is sent on the connection.
    """
    parsed = httpx.URL(url)
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    try:
        async with asyncio.timeout(timeout):
            _, writer = await asyncio.open_connection(parsed.host, port)
    except TimeoutError:
        return f"connect timeout after {timeout}s"
    except OSError as exc:
        return f"{type(exc).__name__}: {exc.strerror or exc}"
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
    return None
