"""``POST /ocr`` and ``POST /ocr-file``: one document in, its markdown out.

Both take a user or admin bearer token (when tokens are configured), read the document (JSON
sources or a multipart upload), check it (:mod:`gateway.inputs.document`) and run both PaddleX steps
on one upstream with failover (:meth:`gateway.upstream.proxy.Proxy.ocr`); a PDF longer than
``fanout.threshold_pages`` is parsed in page slices on several upstreams at once
(:mod:`gateway.upstream.fanout`).

Both are hot routes (:mod:`gateway.api.routes`): the hot path (:mod:`gateway.server.hot_path`)
calls :func:`ocr` and :func:`ocr_file` straight from the connection; FastAPI's routing never
serves their ``POST``, their declarations here describe them in ``/openapi.json``.

Usage::

    app.include_router(router)
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response
from pydantic import ValidationError
from starlette.datastructures import UploadFile

from gateway.access.control import BEARER_SECURITY, Principal, admitted
from gateway.api.common import json_answer, read_body, runtime_of
from gateway.api.errors import error_response
from gateway.api.postprocess import postprocess
from gateway.api.routes import OCR, OCR_FILE
from gateway.api.schemas import OcrRequest, OcrResponse, error_responses, request_body
from gateway.config.settings import Settings
from gateway.errors import InputError, UpstreamClientError
from gateway.inputs.document import Document, plain_base64_image
from gateway.inputs.sources import SOURCE_FIELDS, resolve_input
from gateway.observability.context import request_context
from gateway.runtime import Runtime
from gateway.upstream.fanout import ocr_pdf_fanned_out, should_fan_out
from gateway.wire import jsonfast
from gateway.wire.jsonfast import RawString

router = APIRouter(tags=["documents"])

DocumentReader = Callable[
    [Request, Runtime, Settings], Awaitable[tuple[Document, dict[str, Any] | None]]
]
"""Reads the request's document and the PaddleX ``options`` it asks for (None: none)."""

_ERRORS = error_responses(400, 401, 403, 404, 408, 413, 415, 422, 429, 502, 503, 504)


def validation_message(exc: ValidationError) -> str:
    """``field: problem; ...`` of a pydantic error."""
    return "; ".join(
        f"{'.'.join(str(p) for p in e['loc']) or '<body>'}: {e['msg']}" for e in exc.errors()
    )


async def _run_ocr(
    runtime: Runtime,
    principal: Principal,
    rid: str,
    settings: Settings,
    doc: Document,
    options: dict[str, Any] | None,
    started: float,
) -> Response:
    try:
        if should_fan_out(settings, doc):
            result = await ocr_pdf_fanned_out(
                runtime.proxy,
                settings,
                doc,
                rid,
                options,
                tenant=principal.tenant,
                inspector=runtime.inspector,
            )
        else:
            result = await runtime.proxy.ocr(settings, doc, rid, options, tenant=principal.tenant)
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
    return json_answer(
        {
            "text": postprocess(result.text, settings.postprocess),
            "upstream": result.upstream,
            "attempts": len(result.attempts),
            "pages": result.pages,
            "slices": result.slices,
            "file_type": doc.kind,
            "request_id": rid,
            "log_id": result.log_id,
            "elapsed_s": round(time.perf_counter() - started, 3),
            "failed_attempts": failed,
        },
        rid,
    )


async def _ocr_route(
    request: Request, runtime: Runtime, principal: Principal, read_document: DocumentReader
) -> Response:
    """What ``/ocr`` and ``/ocr-file`` do once ``read_document`` has got the document (an
    InputError or GatewayError is answered by :func:`gateway.api.errors.error_for`)."""
    started = time.perf_counter()
    rid = request_context(request).request_id
    settings = runtime.settings
    doc, options = await read_document(request, runtime, settings)
    return await _run_ocr(runtime, principal, rid, settings, doc, options, started)


def parse_json_object(
    body: bytes, lift: str | None = None
) -> tuple[dict[str, Any], RawString | None]:
    """The body as a JSON object, or InputError 400; with ``lift``, that key's large string
    left unparsed and given apart (:func:`gateway.wire.jsonfast.loads_lifting`)."""
    try:
        payload, raw = jsonfast.loads_lifting(body, lift) if lift else (jsonfast.loads(body), None)
    except ValueError as exc:
        raise InputError(400, "invalid_json", f"request body is not valid JSON: {exc}") from None
    if not isinstance(payload, dict):
        raise InputError(400, "invalid_request", "request body must be a JSON object")
    return payload, raw


async def _json_document(
    request: Request, runtime: Runtime, settings: Settings
) -> tuple[Document, dict[str, Any] | None]:
    """``/ocr``: a JSON body naming the document (see :func:`resolve_input`) and options."""
    body = await read_body(request, settings.input.max_request_bytes)
    payload, doc = _lifted_image(body, settings)
    try:
        parsed = OcrRequest.model_validate(payload)
    except ValidationError as exc:
        raise InputError(400, "invalid_request", validation_message(exc)) from None
    sources = {name: getattr(parsed, name) for name in SOURCE_FIELDS}
    doc = await resolve_input(
        sources,
        settings.input,
        runtime.fetch_client(),
        runtime.url_guard,
        runtime.inspector,
        lifted=doc,
    )
    return doc, parsed.options


def _lifted_image(body: bytes, settings: Settings) -> tuple[dict[str, Any], Document | None]:
    """The body as a JSON object and, when its ``base64`` is a large plain base64 image, that
    image, read without parsing it into a ``str`` (:func:`gateway.wire.jsonfast.loads_lifting`);
    anything else is parsed whole and left to :func:`resolve_input`."""
    payload, raw = parse_json_object(body, lift="base64")
    if raw is None:
        return payload, None
    doc = plain_base64_image(raw, settings.input)
    if doc is None:
        payload, _ = parse_json_object(body)
    return payload, doc


async def _uploaded_document(
    request: Request, runtime: Runtime, settings: Settings
) -> tuple[Document, None]:
    """``/ocr-file``: the document uploaded as the multipart field ``file``."""
    await read_body(request, settings.input.max_request_bytes)
    if "multipart/form-data" not in request.headers.get("content-type", ""):
        raise InputError(400, "invalid_request", "expected multipart/form-data with a 'file' field")
    try:
        form = await request.form(max_part_size=settings.input.max_request_bytes)
    except Exception as exc:
        raise InputError(400, "invalid_multipart", f"cannot parse the form: {exc}") from None
    try:
        upload = form.get("file")
        if not isinstance(upload, UploadFile):
            raise InputError(400, "invalid_request", "multipart field 'file' is required")
        data = await upload.read()
    finally:
        await form.close()
    return await runtime.inspector.inspect(data, settings.input), None


@router.post(
    OCR.path,  # served by the hot path (gateway.api.routes)
    summary="OCR one document given as base64, a data URL, a URL or a local path",
    response_model=OcrResponse,
    responses=_ERRORS,
    openapi_extra=BEARER_SECURITY | request_body(OcrRequest),
)
async def ocr(request: Request) -> Response:
    runtime = runtime_of(request)
    async with admitted(request) as principal:
        return await _ocr_route(request, runtime, principal, _json_document)


@router.post(
    OCR_FILE.path,  # served by the hot path (gateway.api.routes)
    summary="OCR one uploaded document (multipart field 'file')",
    response_model=OcrResponse,
    responses=_ERRORS,
    openapi_extra=BEARER_SECURITY
    | request_body(
        media_type="multipart/form-data",
        schema={
            "type": "object",
            "properties": {"file": {"type": "string", "format": "binary"}},
            "required": ["file"],
        },
    ),
)
async def ocr_file(request: Request) -> Response:
    runtime = runtime_of(request)
    async with admitted(request) as principal:
        return await _ocr_route(request, runtime, principal, _uploaded_document)
