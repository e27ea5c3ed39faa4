"""The jobs benchmark's client: the official PaddleOCR API job protocol over plain httpx.

Usage::

    async with JobsClient("http://127.0.0.1:8080", token) as client:
        job_id = await client.submit(pdf, batch_id="run-1")
        data = await client.wait(job_id, poll_s=0.02)          # the status ``data`` when done
        lines = await client.result(data)                      # the JSON Lines result
        ok, status = await client.ocr(one_page_pdf)            # an interactive /ocr
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
from typing import Any

import httpx

JOBS = "/api/v2/ocr/jobs"


class JobsError(Exception):
    """The gateway refused a request, or a job did not finish in time."""


class JobsClient:
    """See module doc. One client per tenant (bearer token)."""

    def __init__(self, base_url: str, token: str, timeout_s: float = 120.0) -> None:
        self.base_url = base_url
        self.http = httpx.AsyncClient(
            base_url=base_url,
            headers={"Authorization": f"Bearer {token}"},
            timeout=timeout_s,
            trust_env=False,
            limits=httpx.Limits(max_connections=500, max_keepalive_connections=100),
        )

    async def __aenter__(self) -> JobsClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.http.aclose()

    async def submit(self, pdf: bytes, batch_id: str | None = None) -> str:
        """Submit ``pdf`` as multipart (the official client's upload); the job id."""
        fields = {"model": "PaddleOCR-VL-1.5"}
        if batch_id is not None:
            fields["batchId"] = batch_id
        answer = await self.http.post(
            JOBS, data=fields, files={"file": ("doc.pdf", pdf, "application/pdf")}
        )
        body = answer.json()
        if answer.status_code != 200 or body.get("code") != 0:
            raise JobsError(f"submit: HTTP {answer.status_code} {body.get('msg')}")
        return str(body["data"]["jobId"])

    async def status(self, job_id: str) -> dict[str, Any]:
        answer = await self.http.get(f"{JOBS}/{job_id}")
        if answer.status_code != 200:
            raise JobsError(f"status: HTTP {answer.status_code} {answer.text[:200]}")
        return answer.json()["data"]

    async def batch(self, batch_id: str) -> list[dict[str, Any]]:
        answer = await self.http.get(f"{JOBS}/batch/{batch_id}")
        if answer.status_code != 200:
            raise JobsError(f"batch: HTTP {answer.status_code} {answer.text[:200]}")
        return answer.json()["data"]["extractResult"]

    async def wait(self, job_id: str, poll_s: float, limit_s: float = 300.0) -> dict[str, Any]:
        """Poll a job until it is done or failed (JobsError past ``limit_s``)."""
        deadline = time.monotonic() + limit_s
        while True:
            data = await self.status(job_id)
            if data["state"] in ("done", "failed"):
                return data
            if time.monotonic() > deadline:
                raise JobsError(f"job {job_id} still {data['state']} after {limit_s:.0f}s")
            await asyncio.sleep(poll_s)

    async def result(self, data: dict[str, Any]) -> list[dict[str, Any]]:
        """The JSON Lines result of a done job (its signed URL, fetched without the token)."""
        url = data["resultUrl"]["jsonUrl"]
        async with httpx.AsyncClient(timeout=60, trust_env=False) as plain:
            answer = await plain.get(url)
        if answer.status_code != 200:
            raise JobsError(f"result: HTTP {answer.status_code}")
        return [json.loads(line) for line in answer.text.splitlines() if line.strip()]

    async def ocr(self, pdf_b64: str) -> tuple[bool, int]:
        """One interactive ``POST /ocr``: (answered with a text, HTTP status)."""
        try:
            answer = await self.http.post("/ocr", json={"base64": pdf_b64})
        except httpx.HTTPError:
            return False, 0
        return answer.status_code == 200 and "text" in answer.json(), answer.status_code


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")
