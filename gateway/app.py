"""FastAPI application factory: thin routes over :class:`gateway.runtime.Runtime`.

Routes: ``POST /ocr``, ``POST /ocr-file``, ``POST /layout-parsing``, ``POST /restructure-pages``,
``GET /health``, ``GET /ready``, ``GET /upstreams``, ``GET /metrics``. Errors are
``{"error": {"code", "message", ...}, "request_id"}`` with a 4xx/5xx status; on the
PaddleX-native routes the body also carries the PaddleX envelope keys
(``logId``, ``errorCode``, ``errorMsg``) so PaddleX clients can read it.

Usage::

    from gateway.app import create_app
    app = create_app("/etc/paddleocr-fleet/gateway.json")      # watches the file
    app = create_app(parse_settings({"upstreams": [...]}))      # no file, no reload
    uvicorn.run(app, host="0.0.0.0", port=9101)
"""

from __future__ import annotations

import json
import logging
import os
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import asdict, is_dataclass
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from starlette.datastructures import UploadFile
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gateway.attempts import GatewayError, UpstreamClientError
from gateway.documents import Document, InputError, make_document_async, resolve_input
from gateway.postprocess import postprocess
from gateway.runtime import Runtime
from gateway.settings import Settings, load_settings

log = logging.getLogger("gateway.app")

DocumentReader = Callable[[Request, Settings], Awaitable[tuple[Document, dict[str, Any] | None]]]
"""Reads the request's document and the PaddleX ``options`` it asks for (None: none)."""

ROUTES = frozenset(
    {
        "/ocr",
        "/ocr-file",
        "/layout-parsing",
        "/restructure-pages",
        "/health",
        "/ready",
        "/upstreams",
        "/metrics",
    }
)


def _jsonable(value: Any) -> Any:
    if is_dataclass(value) and not isinstance(value, type):
        return asdict(value)
    if isinstance(value, list):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    return value


def error_response(
    status: int,
    code: str,
    message: str,
    request_id: str,
    *,
    details: dict[str, Any] | None = None,
    headers: dict[str, str] | None = None,
    paddlex_envelope: bool = False,
) -> JSONResponse:
    """The gateway's error body (optionally with PaddleX envelope keys)."""
    body: dict[str, Any] = {
        "error": {"code": code, "message": message, **_jsonable(details or {})},
        "request_id": request_id,
    }
    if paddlex_envelope:
        body = {"logId": request_id, "errorCode": status, "errorMsg": message, **body}
    return JSONResponse(
        body, status_code=status, headers={**(headers or {}), "X-Request-ID": request_id}
    )


def gateway_error_response(
    exc: GatewayError, request_id: str, *, paddlex_envelope: bool = False
) -> JSONResponse:
    """:func:`error_response` for an error the gateway raised itself."""
    return error_response(
        exc.status,
        exc.code,
        exc.message,
        request_id,
        details=exc.details,
        headers=exc.headers,
        paddlex_envelope=paddlex_envelope,
    )


class _MetricsMiddleware:
    """Pure ASGI middleware: request counter and latency per route (cheap, no body copies)."""

    def __init__(self, app: ASGIApp, runtime: Runtime) -> None:
        self.app = app
        self.runtime = runtime

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        route = scope["path"] if scope["path"] in ROUTES else "other"
        started = time.perf_counter()
        status = 500

        async def send_wrapper(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
        finally:
            metrics = self.runtime.metrics
            metrics.requests_total.labels(route=route, code=str(status)).inc()
            metrics.request_duration.labels(route=route).observe(time.perf_counter() - started)


def _request_id(request: Request) -> str:
    given = request.headers.get("x-request-id", "")
    if given and len(given) <= 128 and given.isprintable():
        return given
    return uuid.uuid4().hex


async def read_body(request: Request, cap: int) -> bytes:
    """Read the request body, refusing with 413 as soon as it exceeds ``cap`` bytes."""
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > cap:
        raise InputError(
            413,
            "too_large",
            f"request body is {declared} bytes, limit is {cap} (input.max_request_bytes)",
        )
    chunks: list[bytes] = []
    total = 0
    async for chunk in request.stream():
        total += len(chunk)
        if total > cap:
            raise InputError(
                413, "too_large", f"request body exceeds {cap} bytes (input.max_request_bytes)"
            )
        chunks.append(chunk)
    body = b"".join(chunks)
    request._body = body  # lets request.form() parse what we already read
    return body


def create_app(
    settings_or_path: Settings | str | os.PathLike[str], *, watch: bool | None = None
) -> FastAPI:
    """Build a gateway app. A path is loaded now (ConfigError on a bad file) and watched."""
    if isinstance(settings_or_path, Settings):
        runtime = Runtime(settings_or_path, None, watch=False)
    else:
        runtime = Runtime(load_settings(settings_or_path), settings_or_path, watch=watch)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await runtime.start()
        try:
            yield
        finally:
            await runtime.stop()

    app = FastAPI(title="paddleocr-fleet gateway", lifespan=lifespan)
    app.state.runtime = runtime
    app.add_middleware(_MetricsMiddleware, runtime=runtime)

    async def run_ocr(
        rid: str,
        settings: Settings,
        doc: Document,
        options: dict[str, Any] | None,
        started: float,
    ) -> JSONResponse:
        try:
            result = await runtime.proxy.ocr(settings, doc, rid, options)
        except UpstreamClientError as exc:
            return error_response(
                exc.status if 400 <= exc.status < 500 else 400,
                "upstream_rejected",
                f"the upstream rejected the document: {exc.message}",
                rid,
                details={"upstream_status": exc.status, "upstream_message": exc.message},
            )
        failed = [
            {"upstream": a.upstream, "outcome": a.outcome, "reason": a.reason}
            for a in result.attempts
            if a.outcome != "success"
        ]
        return JSONResponse(
            {
                "text": postprocess(result.text, settings.postprocess),
                "upstream": result.upstream,
                "attempts": len(result.attempts),
                "pages": result.pages,
                "file_type": doc.kind,
                "request_id": rid,
                "log_id": result.log_id,
                "elapsed_s": round(time.perf_counter() - started, 3),
                "failed_attempts": failed,
            },
            headers={"X-Request-ID": rid},
        )

    async def ocr_route(request: Request, read_document: DocumentReader) -> Response:
        """What ``/ocr`` and ``/ocr-file`` do once ``read_document`` has got the document."""
        started = time.perf_counter()
        rid = _request_id(request)
        settings = runtime.settings
        try:
            doc, options = await read_document(request, settings)
            return await run_ocr(rid, settings, doc, options, started)
        except InputError as exc:
            return error_response(exc.status, exc.code, exc.message, rid)
        except GatewayError as exc:
            return gateway_error_response(exc, rid)

    async def json_document(
        request: Request, settings: Settings
    ) -> tuple[Document, dict[str, Any] | None]:
        """``/ocr``: a JSON body naming the document (see :func:`resolve_input`) and options."""
        body = await read_body(request, settings.input.max_request_bytes)
        try:
            payload = json.loads(body)
        except ValueError as exc:
            raise InputError(
                400, "invalid_json", f"request body is not valid JSON: {exc}"
            ) from None
        if not isinstance(payload, dict):
            raise InputError(400, "invalid_request", "request body must be a JSON object")
        options = payload.get("options")
        if options is not None and not isinstance(options, dict):
            raise InputError(400, "invalid_request", "options: must be a JSON object")
        doc = await resolve_input(payload, settings.input, runtime._aux_client())
        return doc, options

    async def uploaded_document(request: Request, settings: Settings) -> tuple[Document, None]:
        """``/ocr-file``: the document uploaded as the multipart field ``file``."""
        await read_body(request, settings.input.max_request_bytes)
        if "multipart/form-data" not in request.headers.get("content-type", ""):
            raise InputError(
                400, "invalid_request", "expected multipart/form-data with a 'file' field"
            )
        try:
            form = await request.form(max_part_size=settings.input.max_request_bytes)
        except Exception as exc:
            raise InputError(400, "invalid_multipart", f"cannot parse the form: {exc}") from None
        upload = form.get("file")
        if not isinstance(upload, UploadFile):
            raise InputError(400, "invalid_request", "multipart field 'file' is required")
        data = await upload.read()
        await form.close()
        return await make_document_async(data), None

    @app.post("/ocr")
    async def ocr(request: Request) -> Response:
        return await ocr_route(request, json_document)

    @app.post("/ocr-file")
    async def ocr_file(request: Request) -> Response:
        return await ocr_route(request, uploaded_document)

    async def passthrough(request: Request, path: str) -> Response:
        rid = _request_id(request)
        settings = runtime.settings
        try:
            body = await read_body(request, settings.input.max_request_bytes)
            status, ctype, content, upstream, attempts = await runtime.proxy.passthrough(
                settings, path, body, request.headers.get("content-type"), rid
            )
            headers = {
                "X-Request-ID": rid,
                "X-Gateway-Upstream": upstream,
                "X-Gateway-Attempts": str(len(attempts)),
            }
            return Response(content, status_code=status, media_type=ctype, headers=headers)
        except UpstreamClientError as exc:
            return Response(
                exc.body,
                status_code=exc.status,
                media_type=exc.content_type,
                headers={"X-Request-ID": rid},
            )
        except InputError as exc:
            return error_response(exc.status, exc.code, exc.message, rid, paddlex_envelope=True)
        except GatewayError as exc:
            return gateway_error_response(exc, rid, paddlex_envelope=True)

    @app.post("/layout-parsing")
    async def layout_parsing(request: Request) -> Response:
        return await passthrough(request, "/layout-parsing")

    @app.post("/restructure-pages")
    async def restructure_pages(request: Request) -> Response:
        return await passthrough(request, "/restructure-pages")

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/ready")
    async def ready() -> JSONResponse:
        snapshot = runtime.pool.gauge_snapshot()
        healthy = sum(1 for _, _, state in snapshot["upstreams"] if state == "healthy")
        total = len(snapshot["upstreams"])
        body = {"ready": healthy > 0, "healthy": healthy, "total": total}
        return JSONResponse(body, status_code=200 if healthy else 503)

    @app.get("/upstreams")
    async def upstreams() -> dict[str, Any]:
        return runtime.pool.snapshot()

    @app.get("/metrics")
    async def metrics() -> Response:
        body, content_type = runtime.metrics.render(runtime.pool)
        return Response(body, media_type=content_type)

    return app
