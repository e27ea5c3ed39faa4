"""The document routes served straight from the ASGI scope, past FastAPI's routing.

FastAPI's per-request machinery (route matching, dependency resolution, the exception and
exit-stack middlewares) costs more CPU than a whole pass-through to PaddleX does
(``bench/proxy_cpu.py``). The four routes that carry documents (``POST /ocr``, ``/ocr-file``,
``/layout-parsing``, ``/restructure-pages``) are plain ``async def handler(request)``
functions that check their own token (:func:`gateway.access.admitted`) and answer their own
errors; :class:`GatewayApp` calls them directly, inside the same request middleware (request
id, metrics, access log, body deadline) as every other route. They stay declared on their
routers too, so ``/openapi.json`` describes them and anything but their ``POST`` (a ``GET``,
a ``HEAD``) gets FastAPI's answer.

Usage::

    app = GatewayApp(...)                      # a FastAPI subclass
    app.serve_hot("/ocr", ocr_handler)
    app.wrap_hot(lambda inner: RequestContextMiddleware(inner, runtime=runtime, routes=ROUTES))
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from fastapi import FastAPI
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from gateway.errors import error_for

Handler = Callable[[Request], Awaitable[Response]]


class GatewayApp(FastAPI):
    """A FastAPI app whose hot ``POST`` routes skip FastAPI's routing; see module doc."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self._hot: dict[str, Handler] = {}
        self._hot_app: ASGIApp = self._dispatch

    def serve_hot(self, path: str, handler: Handler) -> None:
        """Serve ``POST path`` with ``handler`` directly."""
        self._hot[path] = handler

    def wrap_hot(self, wrap: Callable[[ASGIApp], ASGIApp]) -> None:
        """Put a middleware around the hot routes (the last wrapped is the outermost)."""
        self._hot_app = wrap(self._hot_app)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST" and scope["path"] in self._hot:
            scope.setdefault("app", self)
            await self._hot_app(scope, receive, send)
            return
        await super().__call__(scope, receive, send)

    async def _dispatch(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        try:
            response = await self._hot[scope["path"]](request)
        except Exception as exc:
            response = error_for(request, exc)
        await response(scope, receive, send)
