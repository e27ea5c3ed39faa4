"""The typed API: pydantic models of every route's request and response, for ``/docs``.

The routes read their bodies themselves (the bearer token is checked, and the size and time
bounds applied, before a byte of the body is parsed), so request bodies are declared with
:func:`request_body` and added to the OpenAPI components by :func:`install_openapi`.

Usage::

    @router.post("/ocr", response_model=OcrResponse, responses=error_responses(400, 401),
                 openapi_extra=request_body(OcrRequest))
    install_openapi(app)        # after the routers are included
"""

from __future__ import annotations

from typing import Any, Literal

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from pydantic import BaseModel, ConfigDict, Field

_REF = "#/components/schemas/{model}"
_BODIES: dict[str, type[BaseModel]] = {}
PNG_1X1 = (
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVR4nGP4//8/AAX+Av4N70a4AAAAAElFTkSuQmCC"
)


class OcrRequest(BaseModel):
    """``POST /ocr``: exactly one document source, and PaddleX options."""

    model_config = ConfigDict(extra="allow", json_schema_extra={"examples": [{"base64": PNG_1X1}]})

    base64: str | None = Field(None, description="the document, standard or URL-safe base64")
    url: str | None = Field(
        None, description="http(s) URL the gateway fetches (no internal addresses)"
    )
    data_url: str | None = Field(None, description="data:[<mime>][;base64],<payload>")
    local_path: str | None = Field(None, description="a file below input.local_path_roots")
    options: dict[str, Any] | None = Field(
        None, description="merged into the PaddleX /layout-parsing body"
    )


class FailedAttempt(BaseModel):
    upstream: str
    outcome: str
    reason: str | None = None


class OcrResponse(BaseModel):
    """The one document's markdown and how it was served."""

    text: str
    upstream: str
    attempts: int
    pages: int
    slices: int = Field(1, description="page slices parsed on different upstreams at once")
    file_type: Literal["pdf", "image"]
    request_id: str
    log_id: str | None = None
    elapsed_s: float
    failed_attempts: list[FailedAttempt]


class ErrorDetail(BaseModel):
    model_config = ConfigDict(extra="allow")

    code: str = Field(description="machine-readable, e.g. too_large, url_forbidden")
    message: str = Field(description="what is wrong, naming the limit or config key")


class ErrorBody(BaseModel):
    """Every error the gateway answers."""

    error: ErrorDetail
    request_id: str


class NativeErrorBody(ErrorBody):
    """An error on a PaddleX-native route: the PaddleX envelope keys as well."""

    model_config = ConfigDict(extra="allow")

    logId: str
    errorCode: int
    errorMsg: str


class LayoutParsingRequest(BaseModel):
    """PaddleX ``/layout-parsing`` (InferRequest): forwarded unchanged; a ``file`` URL is
    fetched by the gateway (through its URL guard) and sent as base64."""

    model_config = ConfigDict(
        extra="allow",
        json_schema_extra={"examples": [{"file": PNG_1X1, "fileType": 1, "visualize": False}]},
    )

    file: str = Field(description="raw base64 of the document, or an http(s) URL")
    fileType: Literal[0, 1] | None = Field(None, description="0 PDF, 1 image")
    visualize: bool | None = None
    logId: str | None = None


class RestructurePage(BaseModel):
    model_config = ConfigDict(extra="allow")

    prunedResult: dict[str, Any]
    markdownImages: dict[str, str] | None = None


class RestructurePagesRequest(BaseModel):
    """PaddleX ``/restructure-pages``: forwarded unchanged."""

    model_config = ConfigDict(extra="allow")

    pages: list[RestructurePage]
    mergeTables: bool = True
    relevelTitles: bool = True
    concatenatePages: bool = False
    prettifyMarkdown: bool = True
    showFormulaNumber: bool = False
    logId: str | None = None


class PaddlexEnvelope(BaseModel):
    """A PaddleX answer, returned unchanged."""

    model_config = ConfigDict(extra="allow")

    logId: str
    errorCode: int
    errorMsg: str
    result: dict[str, Any] | None = None


class HealthResponse(BaseModel):
    status: Literal["ok"]


class ReadyResponse(BaseModel):
    ready: bool
    healthy: int
    total: int


class UpstreamState(BaseModel):
    model_config = ConfigDict(extra="allow")

    url: str
    state: Literal["healthy", "unhealthy", "ejected", "draining", "drained"]
    in_flight: int
    requests: dict[str, int]


class UpstreamsResponse(BaseModel):
    model_config = ConfigDict(extra="allow")

    mode: str
    queue_depth: int
    panic: bool
    active_requests: int
    retries_in_flight: int
    upstreams: list[UpstreamState]


_ERROR_TEXT = {
    400: "bad request: invalid JSON, base64 or URL, no source or two, empty file",
    401: "missing or unknown bearer token (WWW-Authenticate: Bearer)",
    403: "not allowed: a user token on an admin route, a forbidden url or local_path",
    404: "local_path: no such file",
    408: "the request body did not arrive in time (server.body_timeout_s)",
    413: "too large: the body, the document, the image's pixels or the PDF's pages",
    415: "not a PDF, PNG, JPEG, BMP, TIFF or WebP",
    422: "unreadable document: a damaged image header, a PDF that cannot be read, loops or "
    "takes too long; or the upstream rejected it",
    429: "over the token's max_in_flight or rate_per_s (Retry-After)",
    502: "every upstream attempt failed, or the upstream truncated the document",
    503: "no upstream, or the queue is full or the wait too long (Retry-After)",
    504: "past the request deadline",
}


def error_responses(*statuses: int, native: bool = False) -> dict[int | str, dict[str, Any]]:
    """``responses=`` for a route: each status with the JSON error body."""
    model = NativeErrorBody if native else ErrorBody
    return {status: {"model": model, "description": _ERROR_TEXT[status]} for status in statuses}


def request_body(
    model: type[BaseModel] | None = None,
    media_type: str = "application/json",
    schema: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """``openapi_extra=`` declaring a required request body of ``model`` (or ``schema``)."""
    if model is not None:
        _BODIES[model.__name__] = model
        schema = {"$ref": _REF.format(model=model.__name__)}
    return {"requestBody": {"required": True, "content": {media_type: {"schema": schema}}}}


def install_openapi(app: FastAPI) -> None:
    """Generate ``/openapi.json`` with the request-body models in its components."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        document = get_openapi(
            title=app.title,
            version=app.version,
            description=app.description,
            routes=app.routes,
        )
        schemas = document.setdefault("components", {}).setdefault("schemas", {})
        for name, model in _BODIES.items():
            schema = model.model_json_schema(ref_template=_REF)
            schemas.update(schema.pop("$defs", {}))
            schemas[name] = schema
        app.openapi_schema = document
        return document

    app.openapi = openapi  # type: ignore[method-assign]
