"""The load's HTTP/1.1: a minimal asyncio server (the simulated fleet) and keep-alive client
(the load generator), kept on purpose beside the pinned fast stack.

Why not uvicorn+httptools and httpx, which the gateway uses: both ends share the 2 cores with
the gateway they measure. Measured here (one keep-alive connection to a zero-latency fleet
instance, 2,000 requests): this client costs about 60 us of CPU and 0.3 ms per request, httpx
650-700 us and 1.8-2.7 ms, which would eat the gateway's cores in the closed-loop overhead
scenario and add its own milliseconds to the added latency measured there. And the fleet's
faults need what uvicorn keeps private: stopping one port's listener and resetting its open
connections (a crashed process), answering nothing at all (a wedged one). Control calls (the
fleet's admin port, health polls, the gateway's ``/upstreams``) use httpx (:mod:`bench.procs`).
``wrk`` loads the proxies in :mod:`bench.proxy_cpu` and :mod:`bench.cpu_ab`, which count
answers, not read them.

Content-Length and chunked bodies, keep-alive, ``Connection: close``.
"""

from __future__ import annotations

import asyncio
import json
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from http import HTTPStatus


@dataclass
class HttpRequest:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    query: str = ""

    def json(self):
        return json.loads(self.body) if self.body else None


@dataclass
class HttpResponse:
    status: int
    body: bytes = b""
    content_type: str = "application/json"
    headers: dict[str, str] = field(default_factory=dict)

    @classmethod
    def json(cls, status: int, obj) -> HttpResponse:
        return cls(status, json.dumps(obj, separators=(",", ":")).encode())


async def _read_body(reader: asyncio.StreamReader, headers: dict[str, str]) -> bytes:
    if headers.get("transfer-encoding", "").lower() == "chunked":
        parts = []
        while True:
            line = await reader.readuntil(b"\r\n")
            size = int(line.split(b";", 1)[0].strip(), 16)
            if size == 0:
                # trailers until blank line
                while (await reader.readuntil(b"\r\n")) != b"\r\n":
                    pass
                return b"".join(parts)
            parts.append(await reader.readexactly(size))
            await reader.readexactly(2)
    n = int(headers.get("content-length", "0") or 0)
    return await reader.readexactly(n) if n else b""


def _parse_head(head: bytes) -> tuple[str, dict[str, str]]:
    lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in lines[1:]:
        if not line:
            continue
        k, _, v = line.partition(":")
        headers[k.strip().lower()] = v.strip()
    return lines[0], headers


class DropConnection(Exception):
    """Raised by a handler to close the connection without answering."""


Handler = Callable[[HttpRequest], Awaitable[HttpResponse]]


class MiniServer:
    """Serves ``handler`` on one port; tracks connections so they can be aborted (a crash)."""

    def __init__(self, handler: Handler, host: str = "127.0.0.1"):
        self.handler = handler
        self.host = host
        self.port = 0
        self.server: asyncio.base_events.Server | None = None
        self.writers: set[asyncio.StreamWriter] = set()

    async def start(self, port: int = 0) -> int:
        self.server = await asyncio.start_server(
            self._conn, self.host, port or self.port, reuse_address=True, backlog=1024
        )
        self.port = self.server.sockets[0].getsockname()[1]
        return self.port

    async def stop_listening(self) -> None:
        if self.server is not None:
            self.server.close()
            self.server = None

    def abort_connections(self) -> None:
        """Reset every open connection (RST), like a process that died."""
        for w in list(self.writers):
            tr = w.transport
            if tr is not None:
                tr.abort()
        self.writers.clear()

    async def _conn(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.writers.add(writer)
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
                    return
                reqline, headers = _parse_head(head)
                parts = reqline.split(" ")
                if len(parts) < 3:
                    return
                method, target = parts[0], parts[1]
                path, _, query = target.partition("?")
                body = await _read_body(reader, headers)
                try:
                    resp = await self.handler(HttpRequest(method, path, headers, body, query))
                except DropConnection:
                    return
                except Exception as exc:  # pragma: no cover - diagnostic
                    resp = HttpResponse.json(500, {"errorCode": 500, "errorMsg": repr(exc)})
                close = headers.get("connection", "").lower() == "close"
                out = [
                    f"HTTP/1.1 {resp.status} {HTTPStatus(resp.status).phrase}\r\n",
                    f"content-type: {resp.content_type}\r\n",
                    f"content-length: {len(resp.body)}\r\n",
                ]
                for k, v in resp.headers.items():
                    out.append(f"{k}: {v}\r\n")
                if close:
                    out.append("connection: close\r\n")
                out.append("\r\n")
                writer.write("".join(out).encode("latin-1") + resp.body)
                await writer.drain()
                if close:
                    return
        except (ConnectionError, asyncio.IncompleteReadError):
            return
        except asyncio.CancelledError:  # loop shutdown; asyncio's callback chokes on re-raise
            return
        finally:
            self.writers.discard(writer)
            if writer.transport is not None and not writer.transport.is_closing():
                writer.close()


class ClientError(Exception):
    pass


class MiniClient:
    """Keep-alive HTTP/1.1 client for one host:port, unbounded connections (open loop)."""

    def __init__(self, host: str, port: int):
        self.host = host
        self.port = port
        self.idle: deque[tuple[asyncio.StreamReader, asyncio.StreamWriter, float]] = deque()
        self.opened = 0
        # uvicorn closes idle keep-alive connections after 5 s; never reuse one that old, so a
        # request is never silently re-sent (that would hide a client-visible failure)
        self.max_idle_s = 2.0

    async def request(
        self, method: str, path: str, body: bytes = b"", content_type: str = "application/json"
    ) -> tuple[int, dict[str, str], bytes]:
        conn = None
        now = asyncio.get_running_loop().time()
        while self.idle:
            r, w, t_idle = self.idle.pop()
            if now - t_idle < self.max_idle_s and not w.transport.is_closing() and not r.at_eof():
                conn = (r, w)
                break
            w.close()
        if conn is None:
            conn = await asyncio.open_connection(self.host, self.port)
            self.opened += 1
        r, w = conn
        head = (
            f"{method} {path} HTTP/1.1\r\nhost: {self.host}:{self.port}\r\n"
            f"content-type: {content_type}\r\ncontent-length: {len(body)}\r\n\r\n"
        ).encode("latin-1")
        try:
            w.write(head + body)
            await w.drain()
            raw = await r.readuntil(b"\r\n\r\n")
        except (ConnectionError, asyncio.IncompleteReadError) as exc:
            w.close()
            raise ClientError(f"connection: {exc!r}") from exc
        except BaseException:
            w.close()
            raise
        try:
            status_line, headers = _parse_head(raw)
            status = int(status_line.split(" ", 2)[1])
            if "content-length" in headers or "transfer-encoding" in headers:
                data = await _read_body(r, headers)
                keep = headers.get("connection", "").lower() != "close"
            else:
                data = await r.read()
                keep = False
        except BaseException:
            w.close()
            raise
        if keep:
            self.idle.append((r, w, asyncio.get_running_loop().time()))
        else:
            w.close()
        return status, headers, data

    async def close(self) -> None:
        while self.idle:
            _, w, _ = self.idle.pop()
            w.close()
