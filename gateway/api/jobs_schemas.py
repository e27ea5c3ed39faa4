"""OpenAPI models of the job routes: the official PaddleOCR API envelope and its data.

The routes build their answers with :func:`gateway.jobs.protocol.envelope` and
:func:`~gateway.jobs.protocol.envelope_error`; these models document those shapes (and let the
fuzzer check them) without being on the request path.

Usage::

    @router.get(path, response_model=StatusEnvelope, responses=envelope_errors(401, 404))
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from gateway.api.schemas import request_body


class ExtractProgress(BaseModel):
    totalPages: int
    extractedPages: int
    startTime: str | None = None
    endTime: str | None = None


class ResultUrl(BaseModel):
    jsonUrl: str = Field(description="signed, expiring; fetched without a token")


class JobData(BaseModel):
    model_config = ConfigDict(extra="allow")

    jobId: str
    state: Literal["pending", "running", "done", "failed"]
    model: str
    extractProgress: ExtractProgress
    batchId: str | None = None
    errorMsg: str | None = None
    resultUrl: ResultUrl | None = None


class SubmitData(BaseModel):
    jobId: str
    batchId: str | None = None


class BatchData(BaseModel):
    batchId: str
    extractResult: list[JobData]


class _Envelope(BaseModel):
    code: Literal[0]
    msg: str


class SubmitEnvelope(_Envelope):
    data: SubmitData


class StatusEnvelope(_Envelope):
    data: JobData


class BatchEnvelope(_Envelope):
    data: BatchData


class ErrorEnvelope(BaseModel):
    """Every error of the job routes: ``code`` is the HTTP status, ``msg`` says what is wrong."""

    code: int
    msg: str
    errorMsg: str
    data: None = None


class JobSubmission(BaseModel):
    """``POST /api/v2/ocr/jobs`` as JSON (or multipart with the same fields and ``file``)."""

    fileUrl: str = Field(description="http(s) URL of the document, fetched through the URL guard")
    model: str | None = Field(None, description="the served model (default: jobs.model)")
    optionalPayload: dict[str, Any] | None = Field(None, description="PaddleX options, camelCase")
    pageRanges: str | None = Field(None, description='1-based, e.g. "1-3,7"')
    batchId: str | None = None
    callbackUrl: str | None = Field(None, description="POSTed the status once the job ends")


_MULTIPART = {
    "type": "object",
    "properties": {
        "file": {"type": "string", "format": "binary"},
        "model": {"type": "string"},
        "optionalPayload": {"type": "string", "description": "a JSON object"},
        "pageRanges": {"type": "string"},
        "batchId": {"type": "string"},
        "callbackUrl": {"type": "string"},
    },
    "required": ["file"],
}

_ERROR_TEXT = {
    400: "a bad field, unknown model, bad pageRanges, unreadable or unfetchable document",
    401: "missing or unknown bearer token",
    403: "a forbidden fileUrl or callbackUrl; an invalid or expired result URL",
    404: "no such job or batch for this token; no result yet",
    408: "the request body did not arrive in time",
    413: "too large: the body, the document or its pages (jobs.max_pages)",
    415: "not a PDF or image",
    422: "unreadable document",
    429: "over the token's quota (Retry-After)",
    503: "jobs off, or the store is full (Retry-After)",
}


def envelope_errors(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """``responses=`` of a job route: each status with the error envelope."""
    return {s: {"model": ErrorEnvelope, "description": _ERROR_TEXT[s]} for s in statuses}


def submission_body() -> dict[str, Any]:
    """``openapi_extra=`` of the submit route: JSON with ``fileUrl`` or multipart ``file``."""
    extra = request_body(JobSubmission)
    extra["requestBody"]["content"]["multipart/form-data"] = {"schema": _MULTIPART}
    return extra
