"""The official PaddleOCR API wire format: envelope, job status, pageRanges, options, URLs.

Every answer is ``{"code": 0, "msg": "Success", "data": {...}}``; an error has a non-zero
``code`` (the HTTP status), ``msg`` and ``data: null`` (the official clients read ``msg``).

Usage::

    return envelope({"jobId": job.id})
    return envelope_error(404, f"job {job_id!r} not found")
    pages = parse_page_ranges("1-3,7", total=10)      # [0, 1, 2, 6]
    layout, restructure = split_options({"useLayoutDetection": True, "mergeTables": False})
    url = sign_result_url(key, base, job.id, ttl_s=86400)
"""

from __future__ import annotations

import hashlib
import hmac
import time
from datetime import UTC, datetime
from typing import Any

from fastapi.responses import JSONResponse

from gateway.jobs.store import Job

# camelCase options of PaddleX /layout-parsing (PaddleOCR-VL, paddlex-protocol.md 1.2)
LAYOUT_OPTIONS = frozenset(
    {
        "useDocOrientationClassify", "useDocUnwarping", "useLayoutDetection",
        "useChartRecognition", "useSealRecognition", "useOcrForImageBlock", "layoutThreshold",
        "layoutNms", "layoutUnclipRatio", "layoutMergeBboxesMode", "layoutShapeMode",
        "promptLabel", "formatBlockContent", "repetitionPenalty", "temperature", "topP",
        "minPixels", "maxPixels", "maxNewTokens", "mergeLayoutBlocks", "markdownIgnoreLabels",
        "vlmExtraArgs", "prettifyMarkdown", "showFormulaNumber", "visualize",
    }
)  # fmt: skip
# job-level options: the one /restructure-pages over all pages
RESTRUCTURE_OPTIONS = frozenset({"restructurePages", "mergeTables", "relevelTitles"})
# accepted from the official clients, not PaddleX options: ignored
IGNORED_OPTIONS = frozenset({"returnMarkdownImages", "outputFormats"})


class ProtocolError(Exception):
    """A request the protocol refuses: ``status`` (400, 404, 413, ...) and the message."""

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = headers or {}


def envelope(data: dict[str, Any], status: int = 200) -> JSONResponse:
    """The success envelope around ``data``."""
    return JSONResponse({"code": 0, "msg": "Success", "data": data}, status_code=status)


def envelope_error(
    status: int, message: str, headers: dict[str, str] | None = None
) -> JSONResponse:
    """The error envelope: ``code`` is the HTTP status, ``msg`` the message."""
    return JSONResponse(
        {"code": status, "msg": message, "errorMsg": message, "data": None},
        status_code=status,
        headers=headers,
    )


def parse_page_ranges(spec: str | None, total: int) -> list[int]:
    """0-based pages of ``"1-3,7"`` (1-based, inclusive, in the order given, no repeats);
    None or empty: every page. ProtocolError 400 when malformed or outside ``1..total``."""
    if spec is None or not str(spec).strip():
        return list(range(total))
    pages: list[int] = []
    seen: set[int] = set()
    for part in str(spec).split(","):
        lo_text, dash, hi_text = part.strip().partition("-")
        try:
            lo = int(lo_text)
            hi = int(hi_text) if dash else lo
        except ValueError:
            raise ProtocolError(
                400, f"pageRanges: {part.strip()!r} is not N or N-M (1-based), e.g. '1-3,7'"
            ) from None
        if lo < 1 or hi < lo or hi > total:
            raise ProtocolError(
                400, f"pageRanges: {part.strip()!r} is outside the document's pages 1-{total}"
            )
        for page in range(lo - 1, hi):
            if page not in seen:
                seen.add(page)
                pages.append(page)
    return pages


def split_options(payload: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """``optionalPayload`` as (the /layout-parsing options, the job-level restructure
    options); ProtocolError 400 naming an unknown key or a payload that is not an object."""
    if payload is None:
        return {}, {}
    if not isinstance(payload, dict):
        raise ProtocolError(400, "optionalPayload must be a JSON object")
    layout: dict[str, Any] = {}
    restructure: dict[str, Any] = {}
    for key, value in payload.items():
        if value is None or key in IGNORED_OPTIONS:
            continue
        if key in LAYOUT_OPTIONS:
            layout[key] = value
        elif key in RESTRUCTURE_OPTIONS:
            if not isinstance(value, bool):
                raise ProtocolError(400, f"optionalPayload.{key} must be a boolean")
            restructure[key] = value
        else:
            raise ProtocolError(
                400, f"optionalPayload.{key} is not an option of this service's model"
            )
    return layout, restructure


def _signature(key: bytes, job_id: str, expires: int) -> str:
    return hmac.new(key, f"{job_id}.{expires}".encode(), hashlib.sha256).hexdigest()


def sign_result_url(key: bytes, base: str, job_id: str, ttl_s: float) -> str:
    """A capability URL of a job's JSON Lines result, valid for ``ttl_s`` seconds."""
    expires = int(time.time() + ttl_s)
    sig = _signature(key, job_id, expires)
    return f"{base.rstrip('/')}/api/v2/ocr/results/{job_id}.jsonl?expires={expires}&sig={sig}"


def check_result_signature(key: bytes, job_id: str, expires: str, sig: str) -> bool:
    """Whether ``sig`` signs ``job_id`` until ``expires`` and that time has not passed."""
    if not (expires.isascii() and expires.isdigit()) or int(expires) < time.time():
        return False
    expected = _signature(key, job_id, int(expires)).encode()
    return hmac.compare_digest(expected, sig.encode("utf-8", "surrogatepass"))


def _iso(stamp: float | None) -> str | None:
    if stamp is None:
        return None
    return datetime.fromtimestamp(stamp, UTC).strftime("%Y-%m-%d %H:%M:%S")


def job_data(job: Job, json_url: str | None) -> dict[str, Any]:
    """The ``data`` of a job status answer."""
    data: dict[str, Any] = {
        "jobId": job.id,
        "state": job.state,
        "model": job.model,
        "extractProgress": {
            "totalPages": len(job.pages),
            "extractedPages": job.extracted,
            "startTime": _iso(job.started),
            "endTime": _iso(job.finished),
        },
    }
    if job.batch_id is not None:
        data["batchId"] = job.batch_id
    if job.state == "failed":
        data["errorMsg"] = job.error or "failed"
    if json_url is not None:
        data["resultUrl"] = {"jsonUrl": json_url}
    return data
