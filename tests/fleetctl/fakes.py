"""Loopback fakes for the fleetctl tests: the gateway API, a vLLM and a PaddleX instance.

The fake gateway follows the contract of docs/architecture.md. What it does with a document
depends on markers in the document bytes:

* ``FAIL400``: 400 with the error envelope (no retry expected);
* ``FAIL500``: 500 with the error envelope;
* ``BUSY<n>``: 503 + ``Retry-After: 1`` for the first n requests of that document, then OK;
* ``THROTTLE<n>``: the same with 429 (a token over its quota);
* ``ECHOAUTH``: 400 whose message repeats the request's ``Authorization`` header (a server
  that echoes what it was sent, for the never-print-a-token tests).

Tokens: with ``app.state.tokens`` / ``app.state.admin_tokens`` (sets of token strings) not
both empty, the document routes need one of them as ``Authorization: Bearer``, ``/upstreams``
and ``/metrics`` an admin one (403 for a user token), ``/health`` stays open; 401 carries
``WWW-Authenticate: Bearer``. ``app.state.auth_seen`` records ``(path, Authorization header or
None)`` of every request.

``app.state.hold_after = n`` holds every request after the n-th until ``app.state.release`` is
set, so a test can interrupt a client at a known point.

The markdown it returns is ``# <filename>`` plus the sha256 of the bytes, so tests can check
that a written file belongs to its input.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import re
import threading
import uuid
from collections import Counter
from typing import Any

from fastapi import FastAPI, Request, UploadFile
from fastapi.responses import JSONResponse, Response


def expected_text(name: str, data: bytes) -> str:
    return f"# {name}\n\nsha256 {hashlib.sha256(data).hexdigest()}\n"


def _error(
    status: int, code: str, message: str, headers: dict[str, str] | None = None
) -> JSONResponse:
    return JSONResponse(
        {"error": {"code": code, "message": message}, "request_id": uuid.uuid4().hex},
        status_code=status,
        headers=headers,
    )


def fake_gateway(
    delay: float = 0.0,
    upstreams: list[dict[str, Any]] | None = None,
    tokens: set[str] | None = None,
    admin_tokens: set[str] | None = None,
) -> FastAPI:
    app = FastAPI()
    app.state.tokens = set(tokens or ())
    app.state.admin_tokens = set(admin_tokens or ())
    app.state.auth_seen = []
    app.state.delay = delay
    app.state.requests = []  # (endpoint, name, sha256)
    app.state.seen = Counter()
    app.state.upstreams = upstreams or []
    app.state.hold_after = None
    app.state.release = threading.Event()

    @app.middleware("http")
    async def note_auth(request: Request, call_next: Any) -> Response:
        app.state.auth_seen.append((request.url.path, request.headers.get("authorization")))
        return await call_next(request)

    def refuse(request: Request, admin: bool) -> Response | None:
        users, admins = app.state.tokens, app.state.admin_tokens
        if not users and not admins:
            return None
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not token:
            return _error(
                401,
                "unauthorized",
                "this gateway needs 'Authorization: Bearer <token>'",
                {"WWW-Authenticate": 'Bearer realm="paddleocr-fleet"'},
            )
        if token not in users | admins:
            return _error(
                401,
                "invalid_token",
                "the bearer token is not one this gateway accepts",
                {"WWW-Authenticate": 'Bearer realm="paddleocr-fleet", error="invalid_token"'},
            )
        if admin and token not in admins:
            return _error(403, "forbidden", "token 'user' is not an admin token")
        return None

    async def answer(endpoint: str, name: str, data: bytes) -> Response:
        sha = hashlib.sha256(data).hexdigest()
        app.state.requests.append((endpoint, name, sha))
        app.state.seen[sha] += 1
        hold = app.state.hold_after
        if hold is not None and len(app.state.requests) > hold:
            while not app.state.release.is_set():
                await asyncio.sleep(0.01)
        if app.state.delay:
            await asyncio.sleep(app.state.delay)
        if b"FAIL400" in data:
            return _error(400, "bad_input", "cannot decode the document")
        if b"FAIL500" in data:
            return _error(500, "upstream_error", "all upstreams failed")
        m = re.search(rb"BUSY(\d+)", data)
        if m and app.state.seen[sha] <= int(m.group(1)):
            return _error(503, "overloaded", "queue full", {"Retry-After": "1"})
        m = re.search(rb"THROTTLE(\d+)", data)
        if m and app.state.seen[sha] <= int(m.group(1)):
            return _error(429, "too_many_in_flight", "over max_in_flight", {"Retry-After": "1"})
        pages = 2 if data.startswith(b"%PDF") else 1
        return JSONResponse(
            {
                "text": expected_text(name, data),
                "upstream": "http://fake:1",
                "attempts": 1,
                "pages": pages,
                "request_id": uuid.uuid4().hex,
                "elapsed_s": 0.01,
            }
        )

    @app.post("/ocr")
    async def ocr(request: Request) -> Response:
        if refused := refuse(request, admin=False):
            return refused
        body = await request.json()
        keys = [k for k in ("base64", "url", "data_url", "local_path") if body.get(k)]
        if len(keys) != 1:
            return _error(
                422, "invalid_request", "give exactly one of base64/url/data_url/local_path"
            )
        key = keys[0]
        if key == "base64":
            return await answer("/ocr", "base64", base64.b64decode(body["base64"]))
        return await answer("/ocr", key, body[key].encode())

    @app.post("/ocr-file")
    async def ocr_file(request: Request, file: UploadFile) -> Response:
        if refused := refuse(request, admin=False):
            return refused
        data = await file.read()
        if b"ECHOAUTH" in data:
            return _error(400, "bad_input", f"you sent {request.headers.get('authorization')}")
        return await answer("/ocr-file", file.filename or "", data)

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/upstreams")
    async def ups(request: Request) -> Any:
        if refused := refuse(request, admin=True):
            return refused
        return {"mode": "least_busy", "queue_depth": 0, "upstreams": app.state.upstreams}

    @app.get("/metrics")
    async def metrics(request: Request) -> Response:
        if refused := refuse(request, admin=True):
            return refused
        return Response("gateway_requests_total 0\n", media_type="text/plain")

    return app


def fake_vllm(model: str = "PaddleOCR-VL-1.5-0.9B") -> FastAPI:
    app = FastAPI()

    @app.get("/health")
    async def health() -> Response:
        return Response(status_code=200)

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {"object": "list", "data": [{"id": model, "object": "model", "owned_by": "vllm"}]}

    return app


def fake_paddlex() -> FastAPI:
    app = FastAPI()
    app.state.bodies = []

    @app.get("/health")
    async def health() -> dict[str, Any]:
        return {"logId": uuid.uuid4().hex, "errorCode": 0, "errorMsg": "Healthy"}

    @app.post("/layout-parsing")
    async def parse(request: Request) -> dict[str, Any]:
        body = await request.json()
        app.state.bodies.append(body)
        return {
            "logId": uuid.uuid4().hex,
            "errorCode": 0,
            "errorMsg": "Success",
            "result": {
                "layoutParsingResults": [
                    {"prunedResult": {}, "markdown": {"text": "fake text", "images": {}}}
                ],
                "dataInfo": {"width": 96, "height": 32, "type": "image"},
            },
        }

    return app
