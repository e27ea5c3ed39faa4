"""The official PaddleOCR job API as the e2e tests call it: one document in, its pages out.

Usage::

    job = finished_job(url, {"Authorization": "Bearer T"}, ("doc.png", png, "image/png"))
    job.id, job.result_url, job.pages
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import httpx


@dataclass(frozen=True)
class FinishedJob:
    id: str
    result_url: str
    """Its JSON Lines result."""
    pages: list[dict[str, Any]]
    """Its `layoutParsingResults`, in order."""


def finished_job(
    url: str,
    headers: Mapping[str, str],
    document: tuple[str, bytes, str],
    timeout_s: float = 120.0,
) -> FinishedJob:
    """Submit `document` (name, bytes, media type) to the official job API at `url`, wait until
    the job is done (asserting it is)."""
    created = httpx.post(
        f"{url}/api/v2/ocr/jobs",
        headers=dict(headers),
        data={"model": "PaddleOCR-VL-1.5"},
        files={"file": document},
        timeout=60,
    )
    assert created.status_code == 200, created.text
    job = created.json()["data"]["jobId"]
    deadline, data = time.monotonic() + timeout_s, {}
    while time.monotonic() < deadline:
        data = httpx.get(f"{url}/api/v2/ocr/jobs/{job}", headers=dict(headers), timeout=10)
        data = data.json()["data"]
        if data["state"] in ("done", "failed"):
            break
        time.sleep(0.5)
    assert data.get("state") == "done", data
    result_url = data["resultUrl"]["jsonUrl"]
    lines = httpx.get(result_url, timeout=30).text.splitlines()
    pages = [p for line in lines for p in json.loads(line)["result"]["layoutParsingResults"]]
    return FinishedJob(job, result_url, pages)
