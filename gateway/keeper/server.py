"""The slice keeper's HTTP face: an ASGI app in front of a host's PaddleX instances.

The gateway sends each job slice through the keeper of the instance it chose, naming the
instance and an idempotency key; the keeper forwards it, and keeps the answer even when the
gateway is gone before it came (:mod:`gateway.keeper.store`). A gateway restarted after a
``kill -9`` asks the keepers for the slices it had running: an answer kept is taken as it is,
a parse still running is waited for on its own instance, so no page is parsed twice.

Routes (errors are JSON ``{"error": ...}`` with a 4xx/5xx status):

- ``POST /layout-parsing`` with ``Idempotency-Key: K`` and ``X-Keeper-Upstream: URL`` (one of
  the configured instances; another is a 421, and the gateway then sends the slice directly):
  the instance's answer, status and body as it sent them; the ``X-Keeper`` header says
  ``fresh``, ``attached`` or ``kept``.
- ``GET /answers/K``: 200 with the answer kept for K (``X-Keeper-Upstream`` names the
  instance), 202 ``{"state": "running", "upstream": URL}``, or 404.
- ``GET /health``: 200 with counts.
- ``GET /metrics``: the same counts in Prometheus text (``keeper_slices_running``,
  ``keeper_answers_kept``, ``keeper_answers_kept_bytes``, ``keeper_calls_total{kind}``) and the
  process's CPU and memory (on the host's loopback, like every keeper route).

Usage::

    app = KeeperApp(KeeperConfig(upstreams=Upstreams(["http://127.0.0.1:8101"])))
    uvicorn.run(app, host="127.0.0.1", port=9102)
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import httpx
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    ProcessCollector,
    generate_latest,
)

from gateway.config.settings import parse_settings
from gateway.errors import ConfigError
from gateway.keeper.store import Answer, KeeperStore
from gateway.wire import paddlex_routes
from gateway.wire.keeper_protocol import KEY_HEADER, MISDIRECTED, UPSTREAM_HEADER
from gateway.wire.upstream_http import UpstreamClient

MAX_KEY_CHARS = 200


class Upstreams:
    """The instances a keeper may call: a fixed list, or the ``upstreams`` of a JSON file
    (the gateway config's format: URLs or objects with a ``url``), read again when it changes,
    so that a fleet that grows needs no new keeper."""

    def __init__(self, urls: Iterable[str] = (), path: Path | None = None) -> None:
        self.path = path
        self._mtime: int | None = None
        self.urls = frozenset(url.rstrip("/") for url in urls)
        if path is not None:
            self.reload()

    def reload(self) -> bool:
        """Read the file again if it changed; raises ValueError naming a bad file."""
        assert self.path is not None
        mtime = os.stat(self.path).st_mtime_ns
        if mtime == self._mtime:
            return False
        self.urls = frozenset(read_upstreams(self.path))
        self._mtime = mtime
        return True

    def allows(self, url: str) -> bool:
        if url in self.urls:
            return True
        if self.path is None:
            return False
        try:
            changed = self.reload()
        except (OSError, ValueError):
            return False  # a file being replaced: keep the list we have
        return changed and url in self.urls


def read_upstreams(path: Path) -> list[str]:
    """The upstream URLs of a gateway-format config file (validated as the gateway does)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise ValueError(f"{path}: invalid JSON ({exc})") from None
    if not isinstance(data, dict) or not isinstance(data.get("upstreams"), list):
        raise ValueError(f"{path}: no 'upstreams' list")
    try:
        return parse_settings({"upstreams": data["upstreams"]}).upstream_urls
    except ConfigError as exc:
        raise ValueError(f"{path}: {exc}") from None


@dataclass(frozen=True)
class KeeperConfig:
    """What one keeper serves: the instances it may call, and its bounds."""

    upstreams: Upstreams
    keep_s: float = 600.0  # how long an answer is kept
    max_bytes: int = 512 * 1024**2  # answers kept, in all
    max_body_bytes: int = 512 * 1024**2  # one request body
    upstream_timeout_s: float = 1800.0  # one parse, from the keeper's side


def check_key(key: str) -> str | None:
    """Why ``key`` is not a usable idempotency key, or None."""
    if not key:
        return f"the {KEY_HEADER} header is missing"
    if len(key) > MAX_KEY_CHARS:
        return f"{KEY_HEADER} is longer than {MAX_KEY_CHARS} characters"
    if not key.isascii() or not key.isprintable() or "/" in key or " " in key:
        return f"{KEY_HEADER} must be printable ASCII without spaces or '/', got {key!r}"
    return None


class KeeperApp:
    """See module doc."""

    def __init__(self, config: KeeperConfig) -> None:
        self.config = config
        self.client = UpstreamClient(
            max_connections=4, max_idle=2, timeout_s=config.upstream_timeout_s
        )
        self.store = KeeperStore(self._send, keep_s=config.keep_s, max_bytes=config.max_bytes)

    async def _send(self, upstream: str, body: bytes, content_type: str | None) -> Answer:
        headers = {"content-type": content_type} if content_type else None
        try:
            reply = await self.client.post(
                upstream + paddlex_routes.LAYOUT_PARSING, content=body, headers=headers
            )
        except httpx.TimeoutException as exc:
            return _error_answer(504, f"{upstream}: {exc}")
        except httpx.HTTPError as exc:
            return _error_answer(502, f"{upstream}: {type(exc).__name__}: {exc}")
        return Answer(reply.status_code, reply.content, reply.headers.get("content-type"))

    # ------------------------------------------------------------------ ASGI
    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        method, path = scope["method"], scope["path"]
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        if path == paddlex_routes.LAYOUT_PARSING:
            if method != "POST":
                await _json(send, 405, {"error": "use POST"})
                return
            await self._layout_parsing(headers, receive, send)
        elif path.startswith("/answers/") and method == "GET":
            await self._answer(unquote(path[len("/answers/") :]), send)
        elif path == "/health" and method == "GET":
            await _json(send, 200, {"status": "ok", **self.store.stats()})
        elif path == "/metrics" and method == "GET":
            body = keeper_metrics(self.store.stats())
            await _reply(send, Answer(200, body, CONTENT_TYPE_LATEST), [])
        else:
            await _json(send, 404, {"error": f"no route {method} {path}"})

    async def _layout_parsing(self, headers: dict[str, str], receive: Any, send: Any) -> None:
        key = headers.get(KEY_HEADER, "")
        upstream = headers.get(UPSTREAM_HEADER, "").rstrip("/")
        problem = check_key(key)
        if problem is not None:
            await _json(send, 400, {"error": problem})
            return
        if not self.config.upstreams.allows(upstream):
            problem = f"{UPSTREAM_HEADER} {upstream!r} is not an instance this keeper serves"
            await _json(send, MISDIRECTED, {"error": problem})
            return
        length = headers.get("content-length", "")
        if length.isascii() and length.isdigit() and int(length) > self.config.max_body_bytes:
            await _json(send, 413, {"error": f"body over {self.config.max_body_bytes} bytes"})
            return
        try:
            body = await _read_body(receive, self.config.max_body_bytes)
        except _Gone:
            return
        if body is None:
            await _json(send, 413, {"error": f"body over {self.config.max_body_bytes} bytes"})
            return
        answer, how = await self.store.call(key, upstream, body, headers.get("content-type"))
        await _reply(send, answer, [(b"x-keeper", how.encode())])

    async def _answer(self, key: str, send: Any) -> None:
        problem = check_key(key)
        if problem is not None:
            await _json(send, 400, {"error": problem})
            return
        entry = self.store.lookup(key)
        if entry is None:
            await _json(send, 404, {"error": f"nothing kept for {key!r}"})
        elif entry.answer is None:
            await _json(send, 202, {"state": "running", "upstream": entry.upstream})
        else:
            await _reply(send, entry.answer, [(UPSTREAM_HEADER.encode(), entry.upstream.encode())])

    async def _lifespan(self, receive: Any, send: Any) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.store.close()
                await self.client.aclose()
                await send({"type": "lifespan.shutdown.complete"})
                return


def _error_answer(status: int, message: str) -> Answer:
    return Answer(status, json.dumps({"error": message}).encode(), "application/json")


class _Gone(Exception):
    """The caller went away before its body was whole: nothing is sent upstream."""


async def _read_body(receive: Any, limit: int) -> bytes | None:
    """The request body, or None when it is over ``limit`` bytes."""
    parts: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise _Gone
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            return None
        parts.append(chunk)
        if not message.get("more_body", False):
            return b"".join(parts)


def keeper_metrics(stats: dict[str, int]) -> bytes:
    """The keeper's counts (:meth:`KeeperStore.stats`) and process series, as text."""
    registry = CollectorRegistry()
    ProcessCollector(registry=registry)
    for name, key, doc in (
        ("keeper_slices_running", "running", "Slices being parsed through this keeper"),
        ("keeper_answers_kept", "kept", "Answers kept for gateways to collect"),
        ("keeper_answers_kept_bytes", "kept_bytes", "Bytes of the answers kept"),
    ):
        Gauge(name, doc, registry=registry).set(stats[key])
    calls = Counter("keeper_calls", "Keeper calls by kind", ["kind"], registry=registry)
    for key, value in stats.items():
        if key.startswith("calls_"):
            calls.labels(key[len("calls_") :]).inc(value)
    return generate_latest(registry)


async def _reply(send: Any, answer: Answer, extra: list[tuple[bytes, bytes]]) -> None:
    headers = [(b"content-length", str(len(answer.body)).encode()), *extra]
    if answer.content_type:
        headers.append((b"content-type", answer.content_type.encode("latin-1")))
    await send({"type": "http.response.start", "status": answer.status, "headers": headers})
    await send({"type": "http.response.body", "body": answer.body})


async def _json(send: Any, status: int, data: dict[str, Any]) -> None:
    await _reply(send, Answer(status, json.dumps(data).encode(), "application/json"), [])
