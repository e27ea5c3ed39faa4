"""What the routers share: the runtime as a dependency, reading a bounded body, and the
answer of a hot route.

Usage::

    async def route(request: Request, runtime: RuntimeDep) -> Response:   # a FastAPI route
        body = await read_body(request, runtime.settings.input.max_request_bytes)
    runtime = runtime_of(request)                                          # a hot route
    return RawResponse(body, 200, [(b"content-type", b"application/json")])
    return json_answer({"text": "..."}, request_id)
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request
from starlette.requests import ClientDisconnect
from starlette.responses import Response

from gateway.errors import InputError
from gateway.runtime import Runtime
from gateway.wire import jsonfast
from gateway.wire.uvicorn_adapter import remember_body

JSON_TYPE = (b"content-type", b"application/json")


class RawResponse(Response):
    """A response whose headers come as raw ``(name, value)`` pairs, lower-case, as ASGI sends
    them: starlette's ``Response`` lower-cases and encodes every header of every answer.
    ``content-length`` is added here."""

    def __init__(
        self, body: bytes, status_code: int = 200, headers: list[tuple[bytes, bytes]] | None = None
    ) -> None:
        self.status_code = status_code
        self.body = body
        self.background = None
        self.raw_headers = [*(headers or ()), (b"content-length", b"%d" % len(body))]


def json_answer(content: object, request_id: str, status_code: int = 200) -> RawResponse:
    """``content`` as JSON (orjson) with its ``X-Request-ID``."""
    headers = [JSON_TYPE, (b"x-request-id", request_id.encode("latin-1"))]
    return RawResponse(jsonfast.dumps(content), status_code, headers)


async def get_runtime(request: Request) -> Runtime:
    """FastAPI dependency: the app's :class:`Runtime` (async: FastAPI runs a plain function
    dependency in a worker thread, two thread switches per request)."""
    return runtime_of(request)


def runtime_of(request: Request) -> Runtime:
    """The app's :class:`Runtime`, for routes that take no FastAPI dependencies."""
    runtime: Runtime = request.app.state.runtime
    return runtime


RuntimeDep = Annotated[Runtime, Depends(get_runtime)]
"""A route parameter that receives the app's runtime."""


async def read_body(request: Request, cap: int) -> bytes:
    """Read the request body, refusing with 413 as soon as it exceeds ``cap`` bytes (the
    time bound is :class:`gateway.server.body_deadline.BodyDeadlineMiddleware`'s)."""
    declared = request.headers.get("content-length")
    if declared and declared.isascii() and declared.isdigit() and int(declared) > cap:
        raise InputError(
            413,
            "too_large",
            f"request body is {declared} bytes, limit is {cap} (input.max_request_bytes)",
        )
    chunks: list[bytes] = []
    total = 0
    more = True
    while more:  # Request.stream(), without its async generator
        message = await request.receive()
        if message["type"] == "http.disconnect":
            raise ClientDisconnect()
        chunk = message.get("body", b"")
        more = message.get("more_body", False)
        total += len(chunk)
        if total > cap:
            raise InputError(
                413, "too_large", f"request body exceeds {cap} bytes (input.max_request_bytes)"
            )
        chunks.append(chunk)
    body = b"".join(chunks)
    remember_body(request, body)  # lets request.form() parse what we already read
    return body
