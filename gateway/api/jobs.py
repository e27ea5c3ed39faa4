"""The job routes of the official PaddleOCR API, plus our cancel and signed result routes.

``POST /api/v2/ocr/jobs`` (JSON with ``fileUrl``, or multipart with ``file``; ``model``,
``optionalPayload``, ``pageRanges``, ``batchId`` and our ``callbackUrl``), ``GET
/api/v2/ocr/jobs/{jobId}``, ``GET /api/v2/ocr/jobs/batch/{batchId}``, ``DELETE
/api/v2/ocr/jobs/{jobId}`` (cancel) take a bearer token when tokens are configured; a job is
visible to its own token (and admin tokens) only. ``GET /api/v2/ocr/results/{jobId}.jsonl``
takes no token: its ``expires`` and HMAC ``sig`` are the capability. Every answer is in the
official envelope (:mod:`gateway.jobs.protocol`), errors included.

Usage::

    app.include_router(router)       # the runtime's ``jobs`` service must be started
"""

from __future__ import annotations

import functools
import json
import secrets
import time
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import FileResponse, Response
from starlette.datastructures import UploadFile

from gateway.access.control import Principal
from gateway.api.common import read_body, runtime_of
from gateway.api.jobs_schemas import (
    BatchEnvelope,
    StatusEnvelope,
    SubmitEnvelope,
    envelope_errors,
    submission_body,
)
from gateway.errors import AccessError, InputError
from gateway.inputs.document import Document
from gateway.inputs.sources import SOURCE_FIELDS, resolve_input
from gateway.jobs.backend import RETRY_AFTER_S, JobBackend, StoreUnavailable
from gateway.jobs.protocol import (
    ProtocolError,
    check_result_signature,
    envelope,
    envelope_error,
    job_data,
    parse_page_ranges,
    sign_result_url,
    split_options,
)
from gateway.jobs.runner import JobRunner
from gateway.jobs.store import Job
from gateway.observability.context import request_context
from gateway.runtime import Runtime

router = APIRouter(tags=["jobs (official PaddleOCR API)"])

JOBS_PATH = "/api/v2/ocr/jobs"


def _service(runtime: Runtime) -> tuple[JobBackend, JobRunner]:
    if runtime.jobs is None:
        raise ProtocolError(
            503, "jobs are not enabled on this gateway (set jobs.dir or jobs.store_url)"
        )
    return runtime.jobs


def _principal(request: Request, runtime: Runtime) -> Principal:
    try:
        principal = runtime.access.authenticate(request.headers.get("authorization"), admin=False)
    except AccessError as exc:
        raise ProtocolError(exc.status, exc.message, exc.headers) from None
    request_context(request).token = principal.name
    return principal


def _visible(job: Job | None, principal: Principal, job_id: str) -> Job:
    if job is None or (job.tenant != principal.name and not principal.admin):
        raise ProtocolError(404, f"job {job_id!r} not found")
    return job


def _caller(request: Request) -> tuple[Runtime, Principal, JobBackend, JobRunner]:
    """A job route's runtime, its authenticated caller, and the job service (a bad token is
    answered before a gateway without jobs)."""
    runtime = runtime_of(request)
    principal = _principal(request, runtime)
    store, runner = _service(runtime)
    return runtime, principal, store, runner


def _job_data(request: Request, runtime: Runtime, store: JobBackend, job: Job) -> dict[str, Any]:
    """The job's status ``data``, with its signed result URL once it is done."""
    if job.state != "done":
        return job_data(job, None)
    base = runtime.settings.jobs.public_url or str(request.base_url)
    url = sign_result_url(store.key, base, job.id, runtime.settings.jobs.result_url_ttl_s)
    return job_data(job, url)


async def _read_fields(request: Request, runtime: Runtime) -> tuple[dict[str, Any], bytes | None]:
    """The submission's fields and, for multipart, the uploaded file (else None: ``fileUrl``)."""
    settings = runtime.settings
    body = await read_body(request, settings.input.max_request_bytes)
    if "multipart/form-data" in request.headers.get("content-type", ""):
        try:
            form = await request.form(max_part_size=settings.input.max_request_bytes)
        except Exception as exc:
            raise ProtocolError(400, f"cannot parse the form: {exc}") from None
        try:
            upload = form.get("file")
            if not isinstance(upload, UploadFile):
                raise ProtocolError(400, "multipart field 'file' is required")
            data = await upload.read()
            fields: dict[str, Any] = {k: v for k, v in form.items() if isinstance(v, str)}
        finally:
            await form.close()
        if "optionalPayload" in fields:
            try:
                fields["optionalPayload"] = json.loads(fields["optionalPayload"])
            except ValueError:
                raise ProtocolError(400, "optionalPayload is not valid JSON") from None
        return fields, data
    try:
        fields = json.loads(body)
    except (ValueError, RecursionError):
        raise ProtocolError(400, "request body is neither JSON nor multipart/form-data") from None
    if not isinstance(fields, dict):
        raise ProtocolError(400, "request body must be a JSON object")
    file_url = fields.get("fileUrl")
    if not isinstance(file_url, str) or not file_url:
        raise ProtocolError(400, "fileUrl (a string) is required, or upload 'file' as multipart")
    return fields, None


async def _document(runtime: Runtime, fields: dict[str, Any], data: bytes | None) -> Document:
    """The uploaded document, or the one at ``fileUrl`` fetched through the URL guard."""
    settings = runtime.settings
    if data is not None:
        return await runtime.inspector.inspect(data, settings.input)
    sources: dict[str, str | None] = dict.fromkeys(SOURCE_FIELDS)
    sources["url"] = fields["fileUrl"]
    return await resolve_input(
        sources, settings.input, runtime.fetch_client(), runtime.url_guard, runtime.inspector
    )


def _optional_str(fields: dict[str, Any], name: str) -> str | None:
    value = fields.get(name)
    if value is None or value == "":
        return None
    if not isinstance(value, str | int):
        raise ProtocolError(400, f"{name} must be a string")
    return str(value)


async def _submit(request: Request, runtime: Runtime, principal: Principal) -> Response:
    store, runner = _service(runtime)
    jobs = runtime.settings.jobs
    fields, upload = await _read_fields(request, runtime)
    model = fields.get("model") or jobs.model
    if model != jobs.model:
        raise ProtocolError(
            400, f"model {model!r} is not served here; offered models: {jobs.model}"
        )
    layout, restructure = split_options(fields.get("optionalPayload"))
    callback = _optional_str(fields, "callbackUrl")
    if callback is not None:
        if not jobs.callbacks_enabled:
            raise ProtocolError(400, "callbackUrl is disabled (jobs.callbacks_enabled)")
        if not callback.startswith(("http://", "https://")):
            raise ProtocolError(400, "callbackUrl must be an http or https URL")
    batch_id = _optional_str(fields, "batchId")
    doc = await _document(runtime, fields, upload)
    pages = parse_page_ranges(_optional_str(fields, "pageRanges"), doc.pages or 1)
    if len(pages) > jobs.max_pages:
        raise ProtocolError(
            413, f"{len(pages)} pages, the limit is {jobs.max_pages} (jobs.max_pages)"
        )
    if await store.disk_bytes() + len(doc.data) > jobs.max_disk_bytes:
        raise ProtocolError(
            503,
            f"the job store is full (jobs.max_disk_bytes={jobs.max_disk_bytes}); retry later",
            {"Retry-After": "60"},
        )
    job = Job(
        id=f"job-{secrets.token_hex(12)}",
        batch_id=batch_id,
        tenant=principal.name,
        model=model,
        state="pending",
        kind=doc.kind,
        pages=pages,
        options={"layout": layout, "restructure": restructure},
        callback_url=callback,
        error=None,
        created=time.time(),
        started=None,
        finished=None,
        extracted=0,
    )
    try:  # its pages are cut into slices when they are dispatched (gateway.jobs.runner)
        await store.create_job(job, doc.data)
    except OSError as exc:
        raise ProtocolError(503, f"cannot store the job: {exc}", {"Retry-After": "60"}) from None
    runner.wake()
    return envelope({"jobId": job.id, **({"batchId": job.batch_id} if job.batch_id else {})})


Route = Callable[..., Awaitable[Response]]


def _in_envelope(route: Route) -> Route:
    """The route, answering its ProtocolError and InputError in the official envelope."""

    @functools.wraps(route)  # FastAPI reads the route's own signature through __wrapped__
    async def answered(*args: Any, **kwargs: Any) -> Response:
        try:
            return await route(*args, **kwargs)
        except ProtocolError as exc:
            return envelope_error(exc.status, exc.message, exc.headers)
        except InputError as exc:
            return envelope_error(exc.status, f"{exc.code}: {exc.message}")
        except StoreUnavailable as exc:
            return envelope_error(
                503, f"the job store is unavailable, retry later: {exc}",
                {"Retry-After": str(RETRY_AFTER_S)},
            )  # fmt: skip

    return answered


@router.post(
    JOBS_PATH,
    summary="Submit a document parsing job (official PaddleOCR API)",
    response_model=SubmitEnvelope,
    responses=envelope_errors(400, 401, 403, 408, 413, 415, 422, 429, 503),
    openapi_extra=submission_body(),
)
@_in_envelope
async def submit_job(request: Request) -> Response:
    runtime = runtime_of(request)
    principal = _principal(request, runtime)
    try:
        runtime.access.admit(principal)
    except AccessError as exc:
        raise ProtocolError(exc.status, exc.message, exc.headers) from None
    try:
        return await _submit(request, runtime, principal)
    finally:
        runtime.access.release(principal)


@router.get(
    JOBS_PATH + "/batch/{batch_id}",
    summary="The status of every job of a batch",
    response_model=BatchEnvelope,
    responses=envelope_errors(401, 404, 422, 503),
)
@_in_envelope
async def batch_status(request: Request, batch_id: str) -> Response:
    runtime, principal, store, _ = _caller(request)
    batch = await store.batch(batch_id)
    jobs = [j for j in batch if j.tenant == principal.name or principal.admin]
    if not jobs:
        raise ProtocolError(404, f"batch {batch_id!r} not found")
    items = [_job_data(request, runtime, store, j) for j in jobs]
    return envelope({"batchId": batch_id, "extractResult": items})


@router.get(
    JOBS_PATH + "/{job_id}",
    summary="A job's state, progress and result URL",
    response_model=StatusEnvelope,
    responses=envelope_errors(401, 404, 422, 503),
)
@_in_envelope
async def job_status(request: Request, job_id: str) -> Response:
    runtime, principal, store, _ = _caller(request)
    job = _visible(await store.get(job_id), principal, job_id)
    return envelope(_job_data(request, runtime, store, job))


@router.delete(
    JOBS_PATH + "/{job_id}",
    summary="Cancel a job (this gateway's extension)",
    response_model=StatusEnvelope,
    responses=envelope_errors(401, 404, 422, 503),
)
@_in_envelope
async def cancel_job(request: Request, job_id: str) -> Response:
    runtime, principal, store, runner = _caller(request)
    _visible(await store.get(job_id), principal, job_id)
    await store.fail(job_id, "cancelled by the caller")
    runner.wake()
    job = _visible(await store.get(job_id), principal, job_id)
    return envelope(_job_data(request, runtime, store, job))


@router.get(
    "/api/v2/ocr/results/{job_id}.jsonl",
    summary="A done job's result (signed URL)",
    response_class=FileResponse,
    responses={
        200: {"content": {"application/jsonl": {}}, "description": "JSON Lines, a page a line"},
        **envelope_errors(403, 404, 422, 503),
    },
)
@_in_envelope
async def job_result(request: Request, job_id: str, expires: str = "", sig: str = "") -> Response:
    store, _ = _service(runtime_of(request))
    if not check_result_signature(store.key, job_id, expires, sig):
        raise ProtocolError(403, "the result URL is invalid or has expired")
    job = await store.get(job_id)
    body = None if job is None or job.state != "done" else await store.result(job_id)
    if body is None:
        raise ProtocolError(404, f"no result for job {job_id!r}")
    if isinstance(body, bytes):
        return Response(body, media_type="application/jsonl; charset=utf-8")
    return FileResponse(body, media_type="application/jsonl; charset=utf-8")
