"""The document routes, served past FastAPI's routing and, under the gateway's httptools
protocol, past ASGI itself.

FastAPI's per-request machinery (route matching, dependency resolution, the exception and
exit-stack middlewares) costs more CPU than a whole pass-through to PaddleX does
(``bench/proxy_cpu.py``). The four routes that carry documents (``POST /ocr``, ``/ocr-file``,
``/layout-parsing``, ``/restructure-pages``) are plain ``async def handler(request)``
functions that check their own token (:func:`gateway.access.control.admitted`) and answer their own
errors. They are served in one of two ways, with the same request id, metrics, access log and
body deadline as every other route:

- :class:`HotServer` (the gateway's httptools protocol, :mod:`gateway.server.connections`):
  straight from uvicorn's request cycle, seen through
  :class:`gateway.wire.uvicorn_adapter.Exchange`. The body is read with the cycle's own
  ``receive`` (under :func:`gateway.server.body_deadline.deadline_receive`, as the middleware
  reads it), the answer is written to the connection as one response, without ASGI's response
  messages, uvicorn's ``send`` or the middleware chain. A request that names a forwarding proxy
  (``X-Forwarded-*`` headers, which uvicorn's proxy-headers middleware would read) takes the
  ASGI way instead.
- :class:`GatewayApp` (ASGI): called directly inside the request middleware, for the h11
  protocol and any other server.

The routes stay declared on their routers too, so ``/openapi.json`` describes them and
anything but their ``POST`` (a ``GET``, a ``HEAD``) gets FastAPI's answer. When the fast path
is off (``GATEWAY_FAST_PATH=0``, or the adapter cannot attach: :mod:`gateway.wire.uvicorn_adapter`)
no route is registered here and those declarations serve them.

Usage::

    app = GatewayApp(...)                      # a FastAPI subclass
    app.serve_hot("/ocr", ocr_handler)
    app.wrap_hot(lambda inner: RequestContextMiddleware(inner, runtime=runtime, routes=ROUTES))
    hot = HotServer(app, runtime)              # the protocol's: hot.handler(scope), hot.serve()
"""

from __future__ import annotations

import http
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from fastapi import FastAPI
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from gateway.api.errors import error_for
from gateway.server.body_deadline import deadline_receive
from gateway.server.middleware import open_context, record
from gateway.wire.uvicorn_adapter import Exchange

if TYPE_CHECKING:
    from gateway.runtime import Runtime

Handler = Callable[[Request], Awaitable[Response]]

log = logging.getLogger("gateway.hot_path")

_STATUS_LINES = {
    int(s): b"HTTP/1.1 %d %s\r\n" % (int(s), s.phrase.encode("latin-1")) for s in http.HTTPStatus
}


class GatewayApp(FastAPI):
    """A FastAPI app whose hot ``POST`` routes skip FastAPI's routing; see module doc."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.hot: dict[str, Handler] = {}
        self._hot_app: ASGIApp = self._dispatch

    def serve_hot(self, path: str, handler: Handler) -> None:
        """Serve ``POST path`` with ``handler`` directly."""
        self.hot[path] = handler

    def wrap_hot(self, wrap: Callable[[ASGIApp], ASGIApp]) -> None:
        """Put a middleware around the hot routes (the last wrapped is the outermost)."""
        self._hot_app = wrap(self._hot_app)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST" and scope["path"] in self.hot:
            scope.setdefault("app", self)
            await self._hot_app(scope, receive, send)
            return
        await super().__call__(scope, receive, send)

    async def _dispatch(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        try:
            response = await self.hot[scope["path"]](request)
        except Exception as exc:
            response = error_for(request, exc)
        await response(scope, receive, send)


class HotServer:
    """Serves the hot routes from uvicorn's httptools request cycle; see module doc."""

    def __init__(self, app: GatewayApp, runtime: Runtime) -> None:
        self.app = app
        self.runtime = runtime

    def handler(self, scope: Scope) -> Handler | None:
        """The handler that serves this request here, or None (it takes the ASGI way)."""
        if scope["method"] != "POST":
            return None
        handler = self.app.hot.get(scope["path"])
        if handler is None:
            return None
        for name, _ in scope["headers"]:
            if name.startswith(b"x-forwarded-"):
                return None
        return handler

    async def serve(self, exchange: Exchange, handler: Handler) -> None:
        """Serve one request of ``exchange`` with ``handler``, answering on the connection."""
        scope = exchange.scope
        scope["app"] = self.app
        context = open_context(scope)
        status = 500
        receive = deadline_receive(exchange.receive, self.runtime.settings.server.body_timeout_s)
        try:
            request = Request(scope, receive)
            try:
                response = await handler(request)
            except Exception as exc:
                response = error_for(request, exc)
            status = response.status_code
            if type(response).__call__ is not Response.__call__ or response.background:
                await response(scope, receive, exchange.send)  # not one whole body: uvicorn's send
            elif not exchange.disconnected:
                self._write(exchange, response, context.request_id)
        except BaseException as exc:
            log.error("unexpected error answering %s", scope["path"], exc_info=exc)
            if not exchange.started and not exchange.disconnected:
                status = 500
                answer = Response(b"Internal Server Error", 500)
                self._write(exchange, answer, context.request_id)
            else:
                exchange.transport.close()
            if not isinstance(exc, Exception):
                raise
        finally:
            record(self.runtime, scope, context, scope["path"], status)

    @staticmethod
    def _write(exchange: Exchange, response: Response, rid: str) -> None:
        """The whole response in one ``writev``, as uvicorn's ``send`` would have written it."""
        status = response.status_code
        line = _STATUS_LINES.get(status) or b"HTTP/1.1 %d \r\n" % status
        head = [line]
        has_rid = closes = False
        for name, value in (*exchange.default_headers, *response.raw_headers):
            if b"\n" in value or b"\r" in value:
                raise RuntimeError("Invalid HTTP header value.")
            if name == b"x-request-id":
                has_rid = True
            elif name == b"connection" and b"close" in value.lower():
                exchange.close_after()
                closes = True
            head += (name, b": ", value, b"\r\n")
        if not has_rid:
            head.append(b"x-request-id: %s\r\n" % rid.encode("latin-1"))
        if not exchange.keep_alive and not closes:
            head.append(b"connection: close\r\n")
        head.append(b"\r\n")
        exchange.write_whole(b"".join(head), response.body)
