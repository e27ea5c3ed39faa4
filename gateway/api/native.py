"""The PaddleX-native routes: ``POST /layout-parsing`` and ``POST /restructure-pages``.

The body goes to one upstream and its envelope comes back unchanged (headers
``X-Gateway-Upstream``, ``X-Gateway-Attempts``), balanced and failed over like ``/ocr``, so any
PaddleX client can point here. The document in a ``/layout-parsing`` body meets the same
bounds as ``/ocr``'s (:mod:`gateway.inputs.document`); a ``file`` URL is fetched by the gateway
through its URL guard and sent on as base64 (PaddleX would fetch it from inside the network). An
upstream 4xx comes back with its envelope plus the gateway's ``error`` and ``request_id``.

Both are hot routes (:mod:`gateway.api.routes`): the hot path (:mod:`gateway.server.hot_path`)
calls their handlers straight from the connection; FastAPI's routing never serves their
``POST``, their declarations here describe them in ``/openapi.json``.

Usage::

    app.include_router(router)
"""

from __future__ import annotations

import json
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from gateway.access.control import BEARER_SECURITY, Principal, admitted
from gateway.api.common import RawResponse, read_body, runtime_of
from gateway.api.errors import error_body
from gateway.api.routes import LAYOUT_PARSING, RESTRUCTURE_PAGES
from gateway.api.schemas import (
    LayoutParsingRequest,
    PaddlexEnvelope,
    RestructurePagesRequest,
    error_responses,
    request_body,
)
from gateway.config.settings import Settings
from gateway.errors import UpstreamClientError
from gateway.inputs.document import plain_base64_image
from gateway.inputs.sources import decode_base64, fetch_url
from gateway.observability.context import request_context
from gateway.runtime import Runtime
from gateway.wire import jsonfast, paddlex_routes

router = APIRouter(tags=["PaddleX-native"])

_ERRORS = error_responses(400, 401, 403, 408, 413, 415, 422, 429, 502, 503, 504, native=True)


def restructure_body(body: bytes) -> bytes:
    """A ``/restructure-pages`` body with each page's null or missing ``markdownImages`` sent
    as ``{}``: PaddleX answers 500 to null (``dict.update(None)``), on every upstream."""
    try:
        payload: Any = json.loads(body)
    except (ValueError, RecursionError):
        return body
    pages = payload.get("pages") if isinstance(payload, dict) else None
    if not isinstance(pages, list):
        return body
    fixed = False
    for page in pages:
        if isinstance(page, dict) and page.get("markdownImages") is None:
            page["markdownImages"] = {}
            fixed = True
    return json.dumps(payload).encode() if fixed else body


async def checked_layout_body(runtime: Runtime, settings: Settings, body: bytes) -> bytes:
    """Check the document of a ``/layout-parsing`` body; the body to forward."""
    try:
        payload, raw = jsonfast.loads_lifting(body, "file")
        if raw is not None:
            if plain_base64_image(raw, settings.input) is not None:
                return body  # a plain base64 image, checked without parsing it
            payload = jsonfast.loads(body)
    except ValueError:
        return body  # PaddleX answers its own 422
    if not isinstance(payload, dict) or not isinstance(payload.get("file"), str):
        return body
    file: str = payload["file"]
    if file.startswith(("http://", "https://")):  # PaddleX's own test for a URL
        data = await fetch_url(file, settings.input, runtime.fetch_client(), runtime.url_guard)
        doc = await runtime.inspector.inspect(data, settings.input)
        payload["file"] = doc.b64()
        if payload.get("fileType") is None:
            payload["fileType"] = doc.file_type
        return jsonfast.dumps(payload)
    if plain_base64_image(file, settings.input) is None:  # else checked as it is
        await runtime.inspector.inspect(decode_base64(file, "file"), settings.input)
    return body


def _upstream_rejected(exc: UpstreamClientError, rid: str) -> Response:
    """An upstream 4xx: its envelope unchanged, plus the gateway's ``error`` keys."""
    error = error_body(
        exc.status,
        "upstream_rejected",
        exc.message,
        rid,
        details={"upstream_status": exc.status},
        paddlex_envelope=True,
    )
    try:
        envelope = json.loads(exc.body)
    except (ValueError, RecursionError):
        envelope = None
    if isinstance(envelope, dict):
        error = {**error, **envelope, "error": error["error"], "request_id": rid}
    return JSONResponse(error, status_code=exc.status, headers={"X-Request-ID": rid})


async def _passthrough(
    request: Request, runtime: Runtime, principal: Principal, path: str
) -> Response:
    rid = request_context(request).request_id
    settings = runtime.settings
    try:
        body = await read_body(request, settings.input.max_request_bytes)
        if path == paddlex_routes.LAYOUT_PARSING:
            body = await checked_layout_body(runtime, settings, body)
        else:
            body = restructure_body(body)
        status, ctype, content, upstream, attempts = await runtime.proxy.passthrough(
            settings,
            path,
            body,
            request.headers.get("content-type"),
            rid,
            tenant=principal.tenant,
        )
        headers = [
            (b"x-request-id", rid.encode("latin-1")),
            (b"x-gateway-upstream", upstream.encode("latin-1")),
            (b"x-gateway-attempts", b"%d" % len(attempts)),
        ]
        if ctype:  # the upstream's, as it sent it
            headers.append((b"content-type", ctype.encode("latin-1")))
        return RawResponse(content, status, headers)
    except UpstreamClientError as exc:  # the others: gateway.api.errors.error_for
        return _upstream_rejected(exc, rid)


@router.post(
    LAYOUT_PARSING.path,  # served by the hot path (gateway.api.routes)
    summary="PaddleX /layout-parsing, balanced over the upstreams",
    response_model=PaddlexEnvelope,
    responses=_ERRORS,
    openapi_extra=BEARER_SECURITY | request_body(LayoutParsingRequest),
)
async def layout_parsing(request: Request) -> Response:
    runtime = runtime_of(request)
    async with admitted(request) as principal:
        return await _passthrough(request, runtime, principal, paddlex_routes.LAYOUT_PARSING)


@router.post(
    RESTRUCTURE_PAGES.path,  # served by the hot path (gateway.api.routes)
    summary="PaddleX /restructure-pages, balanced over the upstreams",
    response_model=PaddlexEnvelope,
    responses=_ERRORS,
    openapi_extra=BEARER_SECURITY | request_body(RestructurePagesRequest),
)
async def restructure_pages(request: Request) -> Response:
    runtime = runtime_of(request)
    async with admitted(request) as principal:
        return await _passthrough(request, runtime, principal, paddlex_routes.RESTRUCTURE_PAGES)
