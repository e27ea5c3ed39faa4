"""Long documents through the gateway's job API (the official PaddleOCR API job protocol).

``POST /api/v2/ocr/jobs`` (multipart ``file``), then ``GET /api/v2/ocr/jobs/{jobId}`` until the
job is ``done`` or ``failed`` (short intervals at first, growing), then the JSON Lines result at
the signed ``jsonUrl`` (fetched without the token). The pages' markdown is joined and
post-processed so that the text is the one ``POST /ocr`` gives for the same document
(:func:`job_markdown`). A job that fails raises `JobFailed` with the job's ``errorMsg``; on a
timeout, an error or a cancellation (Ctrl-C) the job is cancelled (``DELETE``, best effort), so
no work is left running. A gateway without jobs raises `JobsUnavailable`: use ``/ocr``.

Usage::

    policy = JobPolicy(min_pages=8)
    if await wants_job(policy, path):
        try:
            res = await ocr_job(client, path, policy, on_status=lambda s: print(s.extracted_pages))
        except JobsUnavailable:
            res = await client.ocr(path)
    print(res.text, res.pages)
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import httpx
import pikepdf

from fleetctl.client import AsyncClient, AuthError, OcrError, RetryPolicy, sniff, upload_part
from gateway.api.postprocess import postprocess
from gateway.config.settings import PostprocessSettings

JOBS_PATH = "/api/v2/ocr/jobs"
STATES = frozenset({"pending", "running", "done", "failed"})
JobMode = Literal["auto", "always", "never"]
# what /ocr does: one /restructure-pages over every page (the gateway's default, said outright)
OPTIONAL_PAYLOAD = {"restructurePages": True}


@dataclass(frozen=True)
class JobPolicy:
    """Which documents go through a job, and how a job is followed.

    ``mode``: ``auto`` sends PDFs of more than ``min_pages`` pages (default 8, the gateway's own
    ``jobs.split_threshold_pages``: those it fans out over instances), ``always`` every
    document, ``never`` none. ``model`` None sends no model, so the gateway takes its own
    ``jobs.model``. ``postprocess``: the gateway's ``postprocess`` rules, applied to the job
    result as the gateway applies them to ``/ocr`` text.
    """

    mode: JobMode = "auto"
    min_pages: int = 8
    model: str | None = None
    poll_first_s: float = 0.5
    poll_factor: float = 1.5
    poll_max_s: float = 5.0
    timeout_s: float = 3600.0  # the whole job, submit to result
    cancel_timeout_s: float = 5.0
    postprocess: PostprocessSettings = field(default_factory=PostprocessSettings)

    def takes(self, kind: str | None, pages: int | None) -> bool:
        """Whether a document of this kind (``pdf``, ``png``, ...) and page count is a job."""
        if self.mode == "never" or kind is None:
            return False
        if self.mode == "always":
            return True
        return kind == "pdf" and pages is not None and pages > self.min_pages


@dataclass(frozen=True)
class JobStatus:
    """One ``GET /api/v2/ocr/jobs/{jobId}`` answer."""

    job_id: str
    state: str
    total_pages: int | None
    extracted_pages: int
    error: str | None = None
    json_url: str | None = None


@dataclass(frozen=True)
class JobResult:
    """A finished job: its markdown (as ``/ocr`` would give it) and page count."""

    text: str
    pages: int
    job_id: str


class JobsUnavailable(OcrError):
    """The gateway has no jobs (``jobs.dir`` null: 503 without ``Retry-After``; or no job
    routes at all: 404/405). The document should go through ``/ocr``."""


class JobFailed(OcrError):
    """The job ended ``failed``; the message is its ``errorMsg`` (it names the page)."""


def pdf_pages(path: Path) -> int | None:
    """The page count of a PDF, or None when pikepdf cannot read it (the gateway judges it)."""
    try:
        with pikepdf.open(path) as pdf:
            return len(pdf.pages)
    except Exception:
        return None


async def wants_job(policy: JobPolicy, path: Path) -> bool:
    """Whether `policy` sends the document at `path` through a job (reads its head and, for a
    PDF in ``auto`` mode, counts its pages in a thread)."""
    if policy.mode == "never":
        return False

    def inspect() -> tuple[str | None, int | None]:
        with open(path, "rb") as f:
            found = sniff(f.read(16))
        kind = found[0] if found else None
        counted = kind == "pdf" and policy.mode == "auto"
        return kind, pdf_pages(path) if counted else None

    kind, pages = await asyncio.to_thread(inspect)
    return policy.takes(kind, pages)


def join_pages(texts: Iterable[str]) -> str:
    """One document's markdown from its pages' markdown, in page order.

    PaddleX's ``/restructure-pages`` with ``concatenatePages`` (what ``/ocr`` asks for) renders
    all blocks of all pages as one text, blocks joined by a blank line; a page's markdown is
    its own blocks joined the same way. So the document is the non-empty pages joined by a
    blank line."""
    return "\n\n".join(text for text in texts if text)


def job_markdown(texts: Iterable[str], settings: PostprocessSettings) -> str:
    """The markdown ``/ocr`` gives: the pages joined, then the gateway's post-processing."""
    return postprocess(join_pages(texts), settings)


def _envelope(r: httpx.Response) -> dict[str, Any] | None:
    """The answer's body when it is the official envelope (a JSON object with ``code``)."""
    try:
        body = r.json()
    except ValueError:
        return None
    return body if isinstance(body, dict) and "code" in body else None


def read_envelope(r: httpx.Response, attempt: int, scrub: Callable[[str], str]) -> Any:
    """The ``data`` of an official-API envelope ``{code, msg, data}``, or the `OcrError`."""
    body = _envelope(r)
    rid = r.headers.get("x-request-id")
    if body is not None:
        if r.is_success and body.get("code") == 0 and isinstance(body.get("data"), dict):
            return body["data"]
        message = next(
            (str(body[k]) for k in ("msg", "errorMsg", "message") if body.get(k)), r.reason_phrase
        )
        return OcrError(scrub(message), r.status_code, None, rid, attempt)
    text = scrub(r.text.strip()[:300] or r.reason_phrase)
    if r.is_success:
        return OcrError(f"unexpected answer: {text}", r.status_code, "bad_response", rid, attempt)
    return OcrError(text, r.status_code, None, rid, attempt)


def _read_submit(r: httpx.Response, attempt: int, scrub: Callable[[str], str]) -> Any:
    data = read_envelope(r, attempt, scrub)
    if isinstance(data, OcrError):
        enveloped = _envelope(r) is not None
        if r.status_code == 503 and enveloped and "retry-after" not in r.headers:
            # the only 503 without Retry-After of the job routes: jobs.dir is null
            raise JobsUnavailable(data.message, 503, "jobs_unavailable", data.request_id)
        if r.status_code in (404, 405) and not enveloped:
            raise JobsUnavailable(
                f"the gateway has no job routes (HTTP {r.status_code} on {JOBS_PATH})",
                r.status_code,
                "jobs_unavailable",
                data.request_id,
            )
        return data
    if not isinstance(data.get("jobId"), str) or not data["jobId"]:
        return OcrError("the submit answer has no jobId", r.status_code, "bad_response")
    return data["jobId"]


def _read_status(r: httpx.Response, attempt: int, scrub: Callable[[str], str]) -> Any:
    data = read_envelope(r, attempt, scrub)
    if isinstance(data, OcrError):
        return data
    progress = data.get("extractProgress") or {}
    state = data.get("state")
    total, extracted = progress.get("totalPages"), progress.get("extractedPages") or 0
    url = (data.get("resultUrl") or {}).get("jsonUrl")
    if state not in STATES or not isinstance(extracted, int):
        return OcrError(f"unexpected job status: {data}"[:300], r.status_code, "bad_response")
    return JobStatus(
        job_id=str(data.get("jobId", "")),
        state=state,
        total_pages=total if isinstance(total, int) else None,
        extracted_pages=extracted,
        error=scrub(str(data["errorMsg"])) if data.get("errorMsg") else None,
        json_url=url if isinstance(url, str) else None,
    )


def _read_lines(r: httpx.Response, attempt: int, scrub: Callable[[str], str]) -> Any:
    """The JSON Lines of a result, each a PaddleX ``/layout-parsing`` answer, in order."""
    if r.status_code in (401, 403):  # the URL's signature, not our token (none is sent)
        error = read_envelope(r, attempt, scrub)
        raise OcrError(
            f"the result URL was refused: {error.message}", r.status_code, "result_refused"
        )
    if not r.is_success:
        return read_envelope(r, attempt, scrub)
    lines: list[dict[str, Any]] = []
    for number, line in enumerate(r.content.splitlines(), 1):
        if not line.strip():
            continue
        try:
            lines.append(json.loads(line))
        except ValueError:
            return OcrError(f"result line {number} is not JSON", r.status_code, "bad_response")
    return lines


def _read_result(r: httpx.Response, attempt: int, scrub: Callable[[str], str]) -> Any:
    """The pages' markdown texts of a JSON Lines result, in order."""
    lines = _read_lines(r, attempt, scrub)
    if isinstance(lines, OcrError):
        return lines
    texts: list[str] = []
    for number, line in enumerate(lines, 1):
        try:
            pages = line["result"]["layoutParsingResults"]
            texts.extend(str(page["markdown"]["text"]) for page in pages)
        except (KeyError, TypeError):
            return OcrError(
                f"result line {number} has no result.layoutParsingResults[].markdown.text",
                r.status_code,
                "bad_response",
            )
    return texts


async def submit(client: AsyncClient, path: Path, policy: JobPolicy) -> str:
    """Upload the document at `path` as a job; its ``jobId``. Retries as `AsyncClient.ocr` does."""
    data = await asyncio.to_thread(path.read_bytes)
    return await upload(client, data, path.name, policy)


async def upload(
    client: AsyncClient, data: bytes, name: str, policy: JobPolicy, batch_id: str | None = None
) -> str:
    """Upload `data` as a job (one of batch `batch_id`, when given); its ``jobId``."""
    fields = {"optionalPayload": json.dumps(OPTIONAL_PAYLOAD)}
    if policy.model:
        fields["model"] = policy.model
    if batch_id is not None:
        fields["batchId"] = batch_id
    job_id: str = await client.call(
        "POST", JOBS_PATH, _read_submit, files={"file": upload_part(data, name)}, data=fields
    )
    return job_id


async def status(client: AsyncClient, job_id: str) -> JobStatus:
    """The job's state and progress."""
    found: JobStatus = await client.call("GET", f"{JOBS_PATH}/{job_id}", _read_status)
    return found


async def result_texts(client: AsyncClient, json_url: str) -> list[str]:
    """The pages' markdown from the signed result URL (fetched without the token)."""
    texts: list[str] = await client.call("GET", json_url, _read_result, auth=False)
    return texts


async def result_lines(client: AsyncClient, json_url: str) -> list[dict[str, Any]]:
    """The result's JSON Lines as they are (each a ``/layout-parsing`` answer), in order."""
    lines: list[dict[str, Any]] = await client.call("GET", json_url, _read_lines, auth=False)
    return lines


async def batch(client: AsyncClient, batch_id: str) -> list[dict[str, Any]]:
    """The jobs of batch `batch_id` (``extractResult``: each job's status as the gateway gives)."""
    data = await client.call("GET", f"{JOBS_PATH}/batch/{batch_id}", read_envelope)
    jobs: list[dict[str, Any]] = data.get("extractResult") or []
    return jobs


async def cancel(client: AsyncClient, job_id: str, timeout_s: float = 5.0) -> bool:
    """``DELETE`` the job, one attempt within `timeout_s`; whether the gateway took it.

    Keeps waiting for that one request when the caller is cancelled meanwhile (it is bounded
    by `timeout_s`), so a Ctrl-C leaves no job running."""

    async def delete() -> bool:
        try:
            await client.call(
                "DELETE",
                f"{JOBS_PATH}/{job_id}",
                read_envelope,
                retry=RetryPolicy(max_attempts=1),
                timeout=timeout_s,
            )
        except Exception:  # best effort: the job may be gone, or the gateway
            return False
        return True

    task = asyncio.ensure_future(delete())
    cancelled = False
    while not task.done():
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError:
            cancelled = True
    if cancelled:
        raise asyncio.CancelledError
    return task.result()


async def ocr_job(
    client: AsyncClient,
    path: Path,
    policy: JobPolicy,
    on_status: Callable[[JobStatus], None] | None = None,
) -> JobResult:
    """One document through a job: submit, poll (calling `on_status` with each status), fetch
    the result. Raises `JobsUnavailable` (use ``/ocr``), `JobFailed`, `OcrError` (``code``
    ``job_timeout`` after ``policy.timeout_s``) or `AuthError`; on any failure after the submit
    but `JobFailed`, the job is cancelled first."""
    started = time.monotonic()
    job_id = await submit(client, path, policy)
    try:
        found = await _follow(client, job_id, policy, started, on_status)
        if found.json_url is None:
            raise OcrError("the job is done but has no resultUrl.jsonUrl", 200, "bad_response")
        texts = await result_texts(client, found.json_url)
        if found.total_pages is not None and len(texts) != found.total_pages:
            raise OcrError(
                f"the result has {len(texts)} of {found.total_pages} pages", 200, "bad_response"
            )
    except JobFailed as e:
        e.job_id = job_id
        raise
    except AuthError:
        raise  # the token no longer works: a DELETE would be refused as well
    except BaseException as e:
        await cancel(client, job_id, policy.cancel_timeout_s)
        if isinstance(e, OcrError):
            e.job_id = job_id
        raise
    return JobResult(job_markdown(texts, policy.postprocess), len(texts), job_id)


async def _follow(
    client: AsyncClient,
    job_id: str,
    policy: JobPolicy,
    started: float,
    on_status: Callable[[JobStatus], None] | None,
) -> JobStatus:
    """Poll until the job is done (its status) or failed (`JobFailed`), within the timeout."""
    interval = policy.poll_first_s
    while True:
        found = await status(client, job_id)
        if on_status is not None:
            on_status(found)
        if found.state == "done":
            return found
        if found.state == "failed":
            raise JobFailed(found.error or "the job failed", None, "job_failed")
        left = policy.timeout_s - (time.monotonic() - started)
        if left <= 0:
            raise OcrError(
                f"the job did not finish within {policy.timeout_s:g}s "
                f"({found.extracted_pages}/{found.total_pages} pages); cancelled",
                None,
                "job_timeout",
            )
        await asyncio.sleep(min(interval, left))
        interval = min(policy.poll_max_s, interval * policy.poll_factor)
