"""Loopback fakes for the fleetctl tests: the gateway API, a vLLM and a PaddleX instance.

The fake gateway follows the contract of docs/architecture.md. What it does with a document
depends on markers in the document bytes:

* ``FAIL400``: 400 with the error envelope (no retry expected);
* ``FAIL500``: 500 with the error envelope;
* ``BUSY<n>``: 503 + ``Retry-After: 1`` for the first n requests of that document, then OK.

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


def fake_gateway(delay: float = 0.0, upstreams: list[dict[str, Any]] | None = None) -> FastAPI:
    app = FastAPI()
    app.state.delay = delay
    app.state.requests = []  # (endpoint, name, sha256)
    app.state.seen = Counter()
    app.state.upstreams = upstreams or []
    app.state.hold_after = None
    app.state.release = threading.Event()

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
    async def ocr_file(file: UploadFile) -> Response:
        return await answer("/ocr-file", file.filename or "", await file.read())

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/upstreams")
    async def ups() -> dict[str, Any]:
        return {"mode": "least_busy", "queue_depth": 0, "upstreams": app.state.upstreams}

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
