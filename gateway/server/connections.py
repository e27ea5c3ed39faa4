"""Connection bounds against slow and greedy clients (the ``server`` config section).

uvicorn bounds idle keep-alive connections only: a client that sends its headers or its body
one byte a second holds its connection (and its request's memory) forever. Here:

- :func:`protocol_class`: uvicorn's httptools (default, ``server.http``) or h11 protocol
  with a header deadline (the request line and headers must arrive within
  ``server.header_timeout_s`` of the connection's opening, or of a kept-alive connection's next
  first byte, else 408 ``header_timeout``; a new connection that sends nothing is closed after
  that time), a backstop that closes a connection whose body is still dribbling after the
  response, a cap on the request head's size (``server.max_header_bytes``: 431
  ``headers_too_large``), caps on open connections (``server.max_connections``: 503;
  ``server.max_connections_per_client``: 429, both ``too_many_connections``) and a JSON body
  for malformed requests (400). Refusals are written before closing and the connection lingers
  briefly, so the client reads the answer instead of a reset.

Usage::

    uvicorn.run(app, host="0.0.0.0", port=9101, **uvicorn_options(app))

The body's deadline is :mod:`gateway.server.body_deadline`'s.
"""

from __future__ import annotations

import asyncio
import http
import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import h11

from gateway.config.settings import ServerSettings
from gateway.observability.context import fresh_request_id
from gateway.wire.uvicorn_adapter import (
    Exchange,
    H11Base,
    HttpToolsBase,
    ServingPlan,
    peer_address,
    serving_plan,
)

if TYPE_CHECKING:
    from gateway.server.hot_path import GatewayApp, HotServer

LINGER_S = 2.0  # how long a refused connection's input is read and dropped before closing
BACKSTOP_GRACE_S = 5.0  # after body_timeout_s, for the middleware's 408 to go out first
BODY_HANDOFF_BYTES = 4 << 20  # the most body a connection holds before its app reads it


def error_bytes(status: int, code: str, message: str, retry_after: int | None = None) -> bytes:
    """A whole HTTP/1.1 response with the gateway's JSON error body (connection: close)."""
    rid = fresh_request_id()
    body = json.dumps({"error": {"code": code, "message": message}, "request_id": rid}).encode()
    lines = [
        f"HTTP/1.1 {status} {http.HTTPStatus(status).phrase}",
        "content-type: application/json",
        f"content-length: {len(body)}",
        "connection: close",
        f"x-request-id: {rid}",
    ]
    if retry_after is not None:
        lines.append(f"retry-after: {retry_after}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


class _Bounded(asyncio.Protocol):
    """The bounds of the module doc, for either uvicorn HTTP protocol; a subclass says where
    a request stands (:meth:`_awaiting_head`, :meth:`_reading_body`) and measures a head that
    is still arriving (:meth:`_head_length`). ``limits`` returns the current ``server``
    settings (set by :func:`protocol_class`). It comes first in a subclass's bases: its
    callbacks wrap the uvicorn protocol's (``super()`` is that protocol)."""

    limits: Callable[[], ServerSettings] = staticmethod(ServerSettings)
    # provided by the adapter's protocol base the subclass also derives from
    transport: asyncio.Transport
    loop: asyncio.AbstractEventLoop
    stop_keepalive_timer: Callable[[], None]
    open_clients: Callable[[], list[tuple[str, int] | None]]
    close_after_response_if_draining: Callable[[], None]

    def _init_bounds(self) -> None:
        self._header_timer: asyncio.TimerHandle | None = None
        self._body_timer: asyncio.TimerHandle | None = None
        self._head_bytes = 0  # bytes of a request whose headers are not complete yet
        self._refused = False

    def _awaiting_head(self) -> bool:
        raise NotImplementedError

    def _reading_body(self) -> bool:
        raise NotImplementedError

    def _head_length(self, data: bytes) -> int:
        """The length of the head so far, ``data`` included (to its end, or to its blank line)."""
        raise NotImplementedError

    def _head_limit(self) -> int:
        return self.limits().max_header_bytes

    # ------------------------------------------------------------------ connection caps
    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        limits = self.limits()
        peer = peer_address(transport)
        clients = self.open_clients()  # before uvicorn counts this one
        total = len(clients)
        mine = sum(1 for c in clients if peer and c and c[0] == peer[0])
        super().connection_made(transport)
        if total >= limits.max_connections:
            self._refuse(
                503,
                "too_many_connections",
                f"the gateway has {total} connections open, its limit is "
                f"{limits.max_connections} (server.max_connections)",
                retry_after=1,
            )
        elif mine >= limits.max_connections_per_client:
            self._refuse(
                429,
                "too_many_connections",
                f"{peer[0] if peer else 'this client'} has {mine} connections open, the limit "
                f"per client is {limits.max_connections_per_client} "
                "(server.max_connections_per_client)",
                retry_after=1,
            )
        else:
            self._arm_header_timer()

    def _refuse(self, status: int, code: str, message: str, retry_after: int | None = None) -> None:
        """Answer, stop sending, drop what the client still sends for a moment, close."""
        self._refused = True
        self._cancel_timers()
        self.stop_keepalive_timer()
        if self.transport.is_closing():
            return
        self.transport.write(error_bytes(status, code, message, retry_after))
        if self.transport.can_write_eof():
            self.transport.write_eof()
        self.loop.call_later(LINGER_S, self.transport.close)

    # ------------------------------------------------------------------ the protocol's callbacks
    def data_received(self, data: bytes) -> None:
        if self._before_data(data):
            super().data_received(data)
            self._sync_timers()
            # while the server drains (gateway.server.serving), a request that has just started
            # gets `Connection: close`: the client's next one goes to whoever listens now
            self.close_after_response_if_draining()

    def eof_received(self) -> None:
        if self._refused:
            self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_timers()
        super().connection_lost(exc)

    def send_400_response(self, msg: str) -> None:
        self._malformed()

    # ------------------------------------------------------------------ deadlines
    def _before_data(self, data: bytes) -> bool:
        """Account for ``data`` before the parser sees it; False: drop it (refused)."""
        if self._refused:
            return False
        if self._awaiting_head():
            self._head_bytes += len(data)
            if self._header_timer is None:
                self._arm_header_timer()
            limit = self._head_limit()
            if self._head_length(data) > limit:
                self._refuse(
                    431,
                    "headers_too_large",
                    f"the request line and headers exceed {limit} bytes (server.max_header_bytes)",
                )
                return False
        return True

    def _sync_timers(self) -> None:
        if not self._awaiting_head() and self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None
            self._head_bytes = 0
        if self._reading_body():
            if self._body_timer is None:
                delay = self.limits().body_timeout_s + BACKSTOP_GRACE_S
                self._body_timer = self.loop.call_later(delay, self._body_timeout)
        elif self._body_timer is not None:
            self._body_timer.cancel()
            self._body_timer = None

    def _arm_header_timer(self) -> None:
        self._header_timer = self.loop.call_later(
            self.limits().header_timeout_s, self._header_timeout
        )

    def _cancel_timers(self) -> None:
        for timer in (self._header_timer, self._body_timer):
            if timer is not None:
                timer.cancel()
        self._header_timer = self._body_timer = None

    def _header_timeout(self) -> None:
        self._header_timer = None
        if self.transport.is_closing() or not self._awaiting_head():
            return
        if not self._head_bytes:  # a connection that never sent anything
            self.transport.close()
            return
        limit = self.limits().header_timeout_s
        self._refuse(
            408,
            "header_timeout",
            f"the request line and headers did not arrive within {limit:g}s "
            "(server.header_timeout_s)",
        )

    def _body_timeout(self) -> None:
        """Backstop: the body still dribbles although the app answered (or never read it)."""
        self._body_timer = None
        if not self.transport.is_closing() and self._reading_body():
            self.transport.close()

    def _malformed(self) -> None:
        self._cancel_timers()
        self.transport.write(
            error_bytes(
                400,
                "bad_http_request",
                "invalid HTTP request: malformed, or the request line and headers exceed "
                "server.max_header_bytes",
            )
        )
        self.transport.close()


class GatewayH11Protocol(_Bounded, H11Base):
    """uvicorn's h11 protocol with the bounds of the module doc."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._init_bounds()

    def _awaiting_head(self) -> bool:
        return self.h11().their_state is h11.IDLE

    def _reading_body(self) -> bool:
        return self.h11().their_state is h11.SEND_BODY

    def _head_limit(self) -> int:
        return self.configured_head_limit() or self.limits().max_header_bytes

    def _head_length(self, data: bytes) -> int:
        # h11 bounds only a head that arrives in pieces; this bounds one that arrives whole
        buffered = bytes(self.h11().trailing_data[0]) + data
        end = buffered.find(b"\r\n\r\n")
        return end if end >= 0 else len(buffered)

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._sync_timers()
        conn = self.h11()
        if conn.their_state is h11.IDLE and conn.trailing_data[0]:
            self._head_bytes = len(conn.trailing_data[0])
            if self._header_timer is None:
                self._arm_header_timer()


class _HeadWithBody:
    """One response cycle's view of the connection's transport: the response head that uvicorn
    writes on ``http.response.start`` goes out together with the first body bytes, in one
    ``writev`` instead of two ``write`` calls (a system call and a loopback segment saved per
    response). Interim ``1xx`` answers (``100 Continue``) are written at once."""

    __slots__ = ("_head", "_started", "_transport")

    def __init__(self, transport: asyncio.Transport) -> None:
        self._transport = transport
        self._head: bytes | None = None
        self._started = False

    def write(self, data: bytes) -> None:
        if not self._started and not data.startswith(b"HTTP/1.1 1"):
            self._started = True
            self._head = data
            return
        head, self._head = self._head, None
        if head is None:
            self._transport.write(data)
        else:
            self._transport.writelines((head, data))

    def close(self) -> None:
        head, self._head = self._head, None
        if head is not None:
            self._transport.write(head)
        self._transport.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


class BoundedHttpToolsProtocol(_Bounded, HttpToolsBase):
    """uvicorn's httptools protocol (a C parser: about a third of h11's CPU per request) with
    the bounds of the module doc."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._init_bounds()
        self._head_done = False  # this request's headers are parsed
        self._body_done = False  # and its body
        self._head_tail = b""  # the last bytes of a head still arriving (to find its end)
        self._head_seen = 0

    def _awaiting_head(self) -> bool:
        return not self._head_done

    def _reading_body(self) -> bool:
        return self._head_done and not self._body_done

    def _head_length(self, data: bytes) -> int:
        buffered = self._head_tail + data
        end = buffered.find(b"\r\n\r\n")
        if end >= 0:
            return self._head_seen - len(self._head_tail) + end
        self._head_seen += len(data)
        self._head_tail = buffered[-3:]
        return self._head_seen

    def on_headers_complete(self) -> None:
        self._head_done, self._body_done = True, False
        self._head_tail, self._head_seen = b"", 0
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        self._body_done = True
        super().on_message_complete()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if self._body_done:
            self._head_done = False  # the next bytes start the next request's head
        self._sync_timers()


class GatewayHttpToolsProtocol(BoundedHttpToolsProtocol):
    """The bounded httptools protocol with the fast path: the body handed to the app in one
    piece, the response head written with the first body bytes, and the hot routes served
    with ``hot`` (set by :func:`protocol_class`)."""

    hot: HotServer | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # body bytes not yet handed to the app (emptied when each message completes)
        self._body_parts: list[bytes] = []
        self._body_pending = 0

    head_writer = _HeadWithBody

    def on_body(self, body: bytes) -> None:
        """Gather the body and hand it to the app in one piece (at its end, or every
        :data:`BODY_HANDOFF_BYTES`), not in uvicorn's pieces of 64 KiB: one wake-up of the
        request's task and one copy instead of one of each per piece read."""
        if self.body_unwanted():
            return
        self._body_parts.append(body)
        self._body_pending += len(body)
        if self._body_pending >= BODY_HANDOFF_BYTES:
            self._hand_body_off()
            self.pause_input()

    def _hand_body_off(self) -> None:
        parts, self._body_parts, self._body_pending = self._body_parts, [], 0
        if parts:
            self.hand_over_body(b"".join(parts))

    def on_message_complete(self) -> None:
        self._hand_body_off()
        super().on_message_complete()

    def claim(self, exchange: Exchange) -> Any:
        """A hot route's request is served from the cycle (:class:`HotServer`)."""
        hot = self.hot
        handler = None if hot is None else hot.handler(exchange.scope)
        return None if handler is None else hot.serve(exchange, handler)  # type: ignore[union-attr]


def protocol_class(
    limits: Callable[[], ServerSettings],
    http: str = "httptools",
    hot: HotServer | None = None,
    plan: ServingPlan | None = None,
) -> type[_Bounded] | str:
    """A bounded uvicorn protocol (``http``: ``httptools`` or ``h11``) reading its bounds
    from ``limits()``; with httptools and the fast path (``plan``, default
    :func:`serving_plan`), ``hot`` serves the hot routes below ASGI. When the adapter cannot
    attach the bounds, uvicorn's own protocol (its name)."""
    plan = plan or serving_plan()
    if not plan.bounds:
        return http
    if http == "httptools":
        base: type[_Bounded] = GatewayHttpToolsProtocol if plan.fast else BoundedHttpToolsProtocol
    else:
        base = GatewayH11Protocol
    attrs: dict[str, Any] = {"limits": staticmethod(limits)}
    if base is GatewayHttpToolsProtocol:
        attrs["hot"] = hot
    return type(f"Bound{base.__name__}", (base,), attrs)


def uvicorn_options(app: GatewayApp) -> dict[str, Any]:
    """The uvicorn settings of a gateway app: the ``server`` section (keep-alive and header
    size are read at start-up; the timeouts and caps at every connection) and its hot routes."""
    runtime = app.state.runtime
    server = runtime.settings.server
    plan = getattr(app.state, "serving_plan", None)
    return {
        "http": protocol_class(lambda: runtime.settings.server, server.http, app.state.hot, plan),
        "timeout_keep_alive": server.keep_alive_s,
        "h11_max_incomplete_event_size": server.max_header_bytes,
    }
