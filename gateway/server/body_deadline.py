"""The request body's deadline (``server.body_timeout_s``): the whole body must arrive within
it of the end of the headers; past it the request is answered 408 ``body_timeout`` (JSON error
body) and the connection closed. :class:`BodyDeadlineMiddleware` applies it to every ASGI
request; the hot path (:mod:`gateway.server.hot_path`) wraps its ``receive`` directly.

Usage::

    app.add_middleware(BodyDeadlineMiddleware, timeout=lambda: server_settings.body_timeout_s)
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gateway.errors import InputError
from gateway.wire.uvicorn_adapter import arrival_event


class BodyTimeout(InputError):
    def __init__(self, limit: float) -> None:
        super().__init__(
            408,
            "body_timeout",
            f"the request body did not arrive within {limit:g}s (server.body_timeout_s)",
        )


def deadline_receive(receive: Receive, limit: float) -> Receive:
    """``receive`` bounded by the body deadline: the whole body must arrive within ``limit``
    seconds from now (BodyTimeout past it); waits after the body are not bounded."""
    deadline = asyncio.get_running_loop().time() + limit
    complete = False
    arrived = arrival_event(receive)  # set while a message waits: no timer is needed

    async def timed_receive() -> Message:
        nonlocal complete
        if complete:
            return await receive()
        if arrived is not None and arrived.is_set():
            message = await receive()
        else:
            try:
                async with asyncio.timeout_at(deadline):
                    message = await receive()
            except TimeoutError:
                raise BodyTimeout(limit) from None
        if message["type"] != "http.request" or not message.get("more_body", False):
            complete = True
        return message

    return timed_receive


class BodyDeadlineMiddleware:
    """Bound the time the app may wait for the request body; see module doc."""

    def __init__(self, app: ASGIApp, timeout: Callable[[], float]) -> None:
        self.app = app
        self.timeout = timeout

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        await self.app(scope, deadline_receive(receive, self.timeout()), send)
