"""The upstream client of the hot path: HTTP/1.1 keep-alive pools over asyncio, httptools
parsing.

Every document the gateway serves costs two upstream calls, and httpx spends about 1 ms of CPU
on each (``bench/proxy_cpu.py``); this client spends about a tenth of that, because it does only
what talking to a PaddleX instance needs: a ``POST`` with a body of known length,
one request at a time per connection, a response with a ``Content-Length`` or chunked body.
Errors are the httpx exception types the failover logic already classifies
(:func:`gateway.upstream.attempts.classify_transport_error`): ``httpx.ConnectError`` /
``ConnectTimeout`` before anything was sent, ``httpx.ReadTimeout`` past the deadline,
``httpx.RemoteProtocolError`` / ``ReadError`` when the connection breaks. Health probes and
callers' URL fetches keep using httpx.

One pool per origin (``scheme://host:port``), at most ``max_connections`` open; a connection
idle longer than ``keepalive_s`` is closed rather than reused (uvicorn, which serves PaddleX,
closes idle ones after 5 s, and a request sent on a connection the server is closing is lost).

Usage::

    client = UpstreamClient(max_connections=4, keepalive_s=4.0, connect_timeout_s=2.0)
    reply = await client.post("http://127.0.0.1:9126/layout-parsing", json=body, timeout=60)
    reply.status_code, reply.headers["content-type"], reply.json()
    await client.aclose()
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import time
from collections import deque
from typing import Any
from urllib.parse import SplitResult, urlsplit

import httptools
import httpx

from gateway.wire import jsonfast


class Reply:
    """A complete upstream response (the subset of ``httpx.Response`` the gateway reads)."""

    __slots__ = ("content", "headers", "status_code")

    def __init__(self, status_code: int, headers: dict[str, str], content: bytes) -> None:
        self.status_code = status_code
        self.headers = headers  # lower-case names
        self.content = content

    def json(self) -> Any:
        return jsonfast.loads(self.content)

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", "replace")


class _Connection(asyncio.Protocol):
    """One keep-alive connection; one request at a time."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.waiter: asyncio.Future[Reply] | None = None
        self.closed = False
        self.idle_since = time.monotonic()
        self._headers: dict[str, str] = {}
        self._body: list[bytes] = []

    # asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's is not a subclass

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(httpx.RemoteProtocolError(f"malformed response: {exc}"))

    def eof_received(self) -> bool | None:
        self._fail(httpx.RemoteProtocolError("server closed the connection"))
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if exc is None:
            self._fail(httpx.RemoteProtocolError("server closed the connection"))
        else:
            self._fail(httpx.ReadError(f"connection lost: {exc}"))

    # httptools callbacks
    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers[name.decode("latin-1").lower()] = value.decode("latin-1")

    def on_body(self, body: bytes) -> None:
        self._body.append(body)

    def on_message_complete(self) -> None:
        reply = Reply(self.parser.get_status_code(), self._headers, b"".join(self._body))
        self._headers, self._body = {}, []
        if not self.parser.should_keep_alive():
            self.close()
        waiter, self.waiter = self.waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(reply)

    # ours
    def _fail(self, exc: Exception) -> None:
        self.close()
        waiter, self.waiter = self.waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_exception(exc)

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()

    async def exchange(self, request: list[bytes], timeout: float) -> Reply:
        """Send one request (its pieces in one ``writev``) and wait for its answer; past
        ``timeout`` seconds the connection is closed and ``TimeoutError`` raised."""
        assert self.transport is not None and self.waiter is None
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[Reply] = loop.create_future()
        self.waiter = waiter
        self.transport.writelines(request)
        timer = loop.call_later(timeout, self._fail, TimeoutError())
        try:
            return await waiter
        finally:
            timer.cancel()


class _Pool:
    """The connections to one origin."""

    def __init__(self, host: str, port: int, tls: bool, limit: int, max_idle: int) -> None:
        self.host, self.port, self.tls = host, port, tls
        self.limit, self.max_idle = limit, max_idle
        self.idle: deque[_Connection] = deque()
        self.open = 0
        self.waiters: deque[asyncio.Future[None]] = deque()

    def idle_connection(self, keepalive_s: float) -> _Connection | None:
        """The most recently used idle connection still fit for reuse, if any."""
        now = time.monotonic()
        while self.idle:
            conn = self.idle.pop()
            if not conn.closed and now - conn.idle_since < keepalive_s:
                return conn
            conn.close()
            self.open -= 1
        return None

    async def acquire(self, connect_timeout: float, keepalive_s: float) -> _Connection:
        """A connection: an idle one, a new one, or the next one freed."""
        while True:
            conn = self.idle_connection(keepalive_s)
            if conn is not None:
                return conn
            if self.open < self.limit:
                self.open += 1
                try:
                    return await self._connect(connect_timeout)
                except BaseException:
                    self.open -= 1
                    self._wake()
                    raise
            waiter = asyncio.get_running_loop().create_future()
            self.waiters.append(waiter)
            try:
                await waiter
            finally:
                with contextlib.suppress(ValueError):
                    self.waiters.remove(waiter)

    async def _connect(self, timeout: float) -> _Connection:
        loop = asyncio.get_running_loop()
        context = ssl.create_default_context() if self.tls else None
        try:
            async with asyncio.timeout(timeout):
                _, conn = await loop.create_connection(
                    _Connection, self.host, self.port, ssl=context
                )
        except TimeoutError:
            raise httpx.ConnectTimeout(f"connect timeout after {timeout}s") from None
        except OSError as exc:
            raise httpx.ConnectError(f"{type(exc).__name__}: {exc.strerror or exc}") from None
        return conn

    def release(self, conn: _Connection, reusable: bool) -> None:
        if reusable and not conn.closed and len(self.idle) < self.max_idle:
            conn.idle_since = time.monotonic()
            self.idle.append(conn)
        else:
            conn.close()
            self.open -= 1
        self._wake()

    def wake_all(self) -> None:
        """Let every waiter try again (the limit was raised)."""
        waiters, self.waiters = self.waiters, deque()
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    def _wake(self) -> None:
        while self.waiters:
            waiter = self.waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    def close(self) -> None:
        for conn in self.idle:
            conn.close()
        self.idle.clear()


class UpstreamClient:
    """See module doc."""

    def __init__(
        self,
        *,
        max_connections: int = 10,
        max_idle: int = 10,
        keepalive_s: float = 4.0,
        connect_timeout_s: float = 2.0,
        timeout_s: float = 600.0,
    ) -> None:
        self.max_connections = max_connections
        self.max_idle = max_idle
        self.keepalive_s = keepalive_s
        self.connect_timeout_s = connect_timeout_s
        self.timeout_s = timeout_s
        self.pools: dict[tuple[str, str, int], _Pool] = {}
        self._routes: dict[tuple[str, str], tuple[_Pool, bytes]] = {}
        self._limits: dict[tuple[str, str, int], int] = {}  # origins allowed more connections

    def _pool(self, scheme: str, host: str, port: int) -> _Pool:
        key = (scheme, host, port)
        pool = self.pools.get(key)
        if pool is None:
            limit = self._limits.get(key, self.max_connections)
            pool = self.pools[key] = _Pool(host, port, scheme == "https", limit, self.max_idle)
        return pool

    def allow(self, url: str, connections: int) -> None:
        """Let the origin of ``url`` have up to ``connections`` open (more than
        ``max_connections``: a slice keeper in front of many instances)."""
        key = _origin(urlsplit(url), url)
        self._limits[key] = connections
        pool = self.pools.get(key)
        if pool is not None:
            pool.limit = connections
            pool.wake_all()

    async def post(
        self,
        url: str,
        *,
        json: Any = None,
        content: bytes | None = None,
        headers: dict[str, str] | None = None,
        timeout: float | None = None,
    ) -> Reply:
        """POST ``json`` (encoded here) or ``content``; the whole exchange within ``timeout``."""
        if content is not None:
            return await self.request("POST", url, content, headers, timeout)
        parts: list[bytes | memoryview] = (
            jsonfast.dumps_parts(json) if isinstance(json, dict) else [jsonfast.dumps(json)]
        )
        return await self.request("POST", url, parts, headers, timeout, "application/json")

    async def request(
        self,
        method: str,
        url: str,
        body: bytes | list[bytes | memoryview],
        headers: dict[str, str] | None,
        timeout: float | None,
        content_type: str | None = None,
    ) -> Reply:
        pool, head = self._route(method, url)
        extra = dict(headers or {})
        if content_type is not None:
            extra.setdefault("content-type", content_type)
        for name, value in extra.items():
            if "\r" in name or "\n" in name or "\r" in value or "\n" in value:
                raise httpx.LocalProtocolError(f"header {name!r} holds CR or LF")
        lines = "".join(f"{name}: {value}\r\n" for name, value in extra.items())
        parts = [body] if isinstance(body, bytes) else body
        length = sum(map(len, parts))
        head = b"%s%scontent-length: %d\r\n\r\n" % (head, lines.encode("latin-1"), length)
        deadline = self.timeout_s if timeout is None else timeout
        loop = asyncio.get_running_loop()
        started = loop.time()
        conn: _Connection | None = pool.idle_connection(self.keepalive_s)
        reusable = False
        try:
            if conn is None:
                async with asyncio.timeout(deadline):
                    conn = await pool.acquire(
                        min(self.connect_timeout_s, deadline), self.keepalive_s
                    )
            reply = await conn.exchange([head, *parts], deadline - (loop.time() - started))
            reusable = True
            return reply
        except TimeoutError:
            raise httpx.ReadTimeout(f"no complete answer within {deadline:g}s") from None
        finally:
            if conn is not None:
                pool.release(conn, reusable)

    def _route(self, method: str, url: str) -> tuple[_Pool, bytes]:
        """The pool for ``url``'s origin and the request line and host header for it."""
        route = self._routes.get((method, url))
        if route is None:
            parts = urlsplit(url)
            target = parts.path or "/"
            if parts.query:
                target += "?" + parts.query
            head = f"{method} {target} HTTP/1.1\r\nhost: {parts.netloc}\r\n".encode("latin-1")
            route = (self._pool(*_origin(parts, url)), head)
            if len(self._routes) < 4096:
                self._routes[method, url] = route
        return route

    async def aclose(self) -> None:
        for pool in self.pools.values():
            pool.close()


def _origin(parts: SplitResult, url: str) -> tuple[str, str, int]:
    """``(scheme, host, port)`` of an http(s) URL, the key of its connection pool."""
    scheme = parts.scheme
    if scheme not in ("http", "https") or not parts.hostname:
        raise httpx.UnsupportedProtocol(f"not an http(s) URL: {url!r}")
    return scheme, parts.hostname, parts.port or (443 if scheme == "https" else 80)
