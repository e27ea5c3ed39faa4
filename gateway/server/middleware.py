"""The request middleware: request id, per-route metrics and the access log.

Pure ASGI (no body copies). For every HTTP request it creates the
:class:`~gateway.observability.context.RequestContext` (request id from ``X-Request-ID`` or a fresh
one; the access check fills in the token's name), adds ``X-Request-ID`` to the response, counts
``gateway_requests_total{route,code,token}`` and logs one access line on ``gateway.access``::

    127.0.0.1:53122 "POST /ocr HTTP/1.1" 200 token=team-a rid=5f0c... 1843.2ms

The token's name is logged, never the token.

Usage::

    app.add_middleware(RequestContextMiddleware, runtime=runtime, routes=COUNTED_PATHS)
"""

from __future__ import annotations

import logging
import time
from collections.abc import Collection, Iterable
from typing import TYPE_CHECKING

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gateway.observability.context import RequestContext, new_request_id
from gateway.observability.logs import access_line

if TYPE_CHECKING:
    from gateway.runtime import Runtime

access_log = logging.getLogger("gateway.access")


def _header(scope: Scope, name: bytes) -> str | None:
    headers: Iterable[tuple[bytes, bytes]] = scope.get("headers") or ()
    for key, value in headers:
        if key == name:
            return value.decode("latin-1")
    return None


def open_context(scope: Scope) -> RequestContext:
    """The request's context, kept in ``scope["gateway.context"]``."""
    context = RequestContext(new_request_id(_header(scope, b"x-request-id")))
    scope["gateway.context"] = context
    return context


def record(
    runtime: Runtime, scope: Scope, context: RequestContext, route: str, status: int
) -> None:
    """Count an answered request and log its access line (see module doc)."""
    elapsed = time.perf_counter() - context.started
    runtime.metrics.request_done(route, status, context.token, elapsed)
    if access_log.isEnabledFor(logging.INFO):
        client = scope.get("client")
        peer = f"{client[0]}:{client[1]}" if client else "-"
        access_line(
            access_log,
            '%s "%s %s HTTP/%s" %d token=%s rid=%s %.1fms',
            peer,
            scope.get("method", "-"),
            scope.get("path", "-"),
            scope.get("http_version", "1.1"),
            status,
            context.token,
            context.request_id,
            elapsed * 1000,
        )


class RequestContextMiddleware:
    """See module doc; ``routes`` are the paths counted under their own name ("other" else)."""

    def __init__(self, app: ASGIApp, runtime: Runtime, routes: Collection[str]) -> None:
        self.app = app
        self.runtime = runtime
        self.routes = frozenset(routes)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        context = open_context(scope)
        route = scope["path"] if scope["path"] in self.routes else "other"
        status = 500
        rid_header = (b"x-request-id", context.request_id.encode("latin-1"))

        async def send_wrapper(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                headers = list(message.get("headers") or [])
                if not any(key.lower() == b"x-request-id" for key, _ in headers):
                    headers.append(rid_header)
                    message = {**message, "headers": headers}
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
        finally:
            record(self.runtime, scope, context, route, status)
