"""How the API answers an error: the JSON error body, its envelopes, the exception handlers.

Every error the gateway answers is ``{"error": {"code", "message", ...}, "request_id"}``; on
the PaddleX-native routes the body also carries the PaddleX envelope keys (``logId``,
``errorCode``, ``errorMsg``) so PaddleX clients can read it, and under ``/api/v2/`` those of the
official PaddleOCR API (``code``, ``msg``, ``data``). Unknown routes (404), wrong
methods (405) and anything unexpected (500) get the same body.

Usage::

    return error_response(413, "too_large", "request body exceeds ...", request_id)
    install_exception_handlers(app)

The exceptions themselves are :mod:`gateway.errors`; the request id every body carries is the
request context's (:mod:`gateway.observability.context`).
"""

from __future__ import annotations

import logging
from dataclasses import asdict, is_dataclass
from typing import Any, TypedDict

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from gateway.api.routes import PADDLEX_ENVELOPE_PATHS
from gateway.errors import GatewayError, InputError
from gateway.observability.context import request_context

log = logging.getLogger("gateway.errors")

OFFICIAL_API_PREFIX = "/api/v2/"  # the job routes (gateway.api.jobs): {code, msg, data} envelope


def _jsonable(value: Any) -> Any:
    if is_dataclass(value) and not isinstance(value, type):
        return asdict(value)
    if isinstance(value, list):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    return value


def error_body(
    status: int,
    code: str,
    message: str,
    request_id: str,
    *,
    details: dict[str, Any] | None = None,
    paddlex_envelope: bool = False,
    official_envelope: bool = False,
) -> dict[str, Any]:
    """The error document itself (see :func:`error_response`)."""
    body: dict[str, Any] = {
        "error": {"code": code, "message": message, **_jsonable(details or {})},
        "request_id": request_id,
    }
    if paddlex_envelope:
        body = {"logId": request_id, "errorCode": status, "errorMsg": message, **body}
    if official_envelope:
        body = {"code": status, "msg": message, "errorMsg": message, "data": None, **body}
    return body


def error_response(
    status: int,
    code: str,
    message: str,
    request_id: str,
    *,
    details: dict[str, Any] | None = None,
    headers: dict[str, str] | None = None,
    paddlex_envelope: bool = False,
    official_envelope: bool = False,
) -> JSONResponse:
    """The gateway's error body (optionally with the PaddleX or the official PaddleOCR API
    envelope's keys) as a response."""
    body = error_body(
        status,
        code,
        message,
        request_id,
        details=details,
        paddlex_envelope=paddlex_envelope,
        official_envelope=official_envelope,
    )
    extra = {"Connection": "close"} if status == 408 else {}
    return JSONResponse(
        body,
        status_code=status,
        headers={**(headers or {}), **extra, "X-Request-ID": request_id},
    )


def gateway_error_response(
    exc: GatewayError,
    request_id: str,
    *,
    paddlex_envelope: bool = False,
    official_envelope: bool = False,
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
        official_envelope=official_envelope,
    )


class _Envelopes(TypedDict):
    """The envelope flags of :func:`error_response`, as keyword arguments."""

    paddlex_envelope: bool
    official_envelope: bool


def _envelopes(request: Request) -> _Envelopes:
    """The envelope keys an error on this path carries besides the gateway's own."""
    path = request.url.path
    return {
        "paddlex_envelope": path in PADDLEX_ENVELOPE_PATHS,
        "official_envelope": path.startswith(OFFICIAL_API_PREFIX),
    }


def error_for(request: Request, exc: Exception) -> JSONResponse:
    """The answer to ``exc`` raised while serving ``request``: a :class:`GatewayError` or
    :class:`InputError` as it says, anything else a logged 500."""
    rid = request_context(request).request_id
    if isinstance(exc, GatewayError):
        return gateway_error_response(exc, rid, **_envelopes(request))
    if isinstance(exc, InputError):
        return error_response(exc.status, exc.code, exc.message, rid, **_envelopes(request))
    log.error("unexpected error on %s %s", request.method, request.url.path, exc_info=exc)
    return error_response(
        500,
        "internal_error",
        f"the gateway failed unexpectedly ({type(exc).__name__}); see its log, request id {rid}",
        rid,
        **_envelopes(request),
    )


def install_exception_handlers(app: FastAPI) -> None:
    """Answer every error raised past the routes with the JSON error body."""

    async def _known(request: Request, exc: Exception) -> JSONResponse:
        return error_for(request, exc)

    app.add_exception_handler(GatewayError, _known)
    app.add_exception_handler(InputError, _known)
    app.add_exception_handler(Exception, _known)

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e.get('loc', ()))}: {e.get('msg')}" for e in exc.errors()
        )
        rid = request_context(request).request_id
        return error_response(400, "invalid_request", problems, rid, **_envelopes(request))

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        rid = request_context(request).request_id
        return error_response(
            exc.status_code,
            code,
            f"{request.method} {request.url.path}: {exc.detail}",
            rid,
            headers=dict(exc.headers or {}),
            **_envelopes(request),
        )
