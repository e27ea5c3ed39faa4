"""Helpers of the job tests: configs, PDFs whose pages can be told apart, bounded polling."""

from __future__ import annotations

import hashlib
import io
import time
from pathlib import Path
from typing import Any

import httpx
import pypdfium2 as pdfium

from gateway.jobs.store import Job
from tests.gateway.conftest import gateway_config

TOKEN = "team-a-secret"
OTHER_TOKEN = "team-b-secret"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
JOBS = "/api/v2/ocr/jobs"


def sha(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def jobs_config(
    upstreams: list[str], jobs_dir: Path, store: dict[str, Any] | None = None, **sections: Any
) -> dict[str, Any]:
    """A queue-mode gateway config with tokens and a job store in ``jobs_dir``, or the one
    ``store`` (``jobs`` settings, the ``job_store`` fixture) names."""
    base: dict[str, Any] = {
        "load_balance": {"mode": "queue"},
        "auth": {
            "tokens": [
                {"name": "team-a", "sha256": sha(TOKEN)},
                {"name": "team-b", "sha256": sha(OTHER_TOKEN)},
            ]
        },
        "fanout": {"threshold_pages": 4, "max_slice_pages": 4},
        "jobs": {
            "dir": str(jobs_dir),
            "lease_s": 2,
            "poll_interval_s": 0.1,
            **(store or {}),
        },
    }
    for key, value in sections.items():
        base[key] = {**base.get(key, {}), **value} if isinstance(value, dict) else value
    return gateway_config(upstreams, **base)


def pending_job(job_id: str, tenant: str, created: float, pages: int) -> Job:
    """A PDF job of ``pages`` pages as a store's ``create_job`` takes it, none of it done."""
    return Job(
        id=job_id, batch_id=None, tenant=tenant, model="PaddleOCR-VL-1.5", state="pending",
        kind="pdf", pages=list(range(pages)), options={}, callback_url=None, error=None,
        created=created, started=None, finished=None, extracted=0,
    )  # fmt: skip


def stored_inputs(jobs: Any) -> int:
    """How many job inputs the store of ``jobs`` (a gateway's jobs settings) holds."""
    if jobs.store_url is not None:
        import psycopg

        with psycopg.connect(jobs.store_url) as conn:
            row = conn.execute("SELECT COUNT(*) FROM inputs").fetchone()
        return int(row[0]) if row else 0
    return len(list((Path(jobs.dir) / "inputs").iterdir()))


def numbered_pdf(pages: int) -> bytes:
    """A PDF whose page i (0-based) is 100 + i points wide: the doubles report width 2x that,
    so each result page shows which document page it came from."""
    pdf = pdfium.PdfDocument.new()
    for index in range(pages):
        pdf.new_page(100 + index, 300).close()
    buf = io.BytesIO()
    pdf.save(buf)
    pdf.close()
    return buf.getvalue()


def source_page(result_page: dict[str, Any]) -> int:
    """The 0-based document page a result page (from :func:`numbered_pdf`) came from."""
    return result_page["prunedResult"]["width"] // 2 - 100


def write_pdf(path: Path, pages: int) -> Path:
    """A :func:`numbered_pdf` of ``pages`` pages at ``path``, for clients that upload files."""
    path.write_bytes(numbered_pdf(pages))
    return path


def submit_pdf(
    client: httpx.Client, pages: int, *, headers: dict[str, str] | None = None
) -> httpx.Response:
    """Submit a :func:`numbered_pdf` of ``pages`` pages as a job (the answer, unchecked: some
    tests expect a refusal)."""
    return client.post(
        JOBS, headers=headers or AUTH, files={"file": ("d.pdf", numbered_pdf(pages))}
    )


def submit_pdfs(clients: list[httpx.Client], pages: int) -> list[str]:
    """One :func:`numbered_pdf` job of ``pages`` pages through each client in turn; their ids."""
    ids = []
    for client in clients:
        answer = submit_pdf(client, pages)
        assert answer.status_code == 200, answer.text
        ids.append(answer.json()["data"]["jobId"])
    return ids


def wait_part_extracted(
    client: httpx.Client, job_id: str, below: int, *, attempts: int = 600
) -> dict[str, Any]:
    """Poll a job until some but fewer than ``below`` of its pages are extracted (the moment to
    kill a gateway mid-job); the last status seen, for the caller to check it got there."""
    for _ in range(attempts):
        data = client.get(f"{JOBS}/{job_id}", headers=AUTH).json()["data"]
        if 0 < data["extractProgress"]["extractedPages"] < below:
            break
        time.sleep(0.02)
    return data


def wait_job(
    client: httpx.Client,
    job_id: str,
    *,
    states: tuple[str, ...] = ("done", "failed"),
    headers: dict[str, str] | None = None,
    limit_s: float = 60.0,
) -> dict[str, Any]:
    """Poll a job's status until its state is one of ``states`` (bounded)."""
    deadline = time.monotonic() + limit_s
    while True:
        answer = client.get(f"{JOBS}/{job_id}", headers=headers or AUTH)
        assert answer.status_code == 200, answer.text
        data = answer.json()["data"]
        if data["state"] in states:
            return data
        assert time.monotonic() < deadline, f"job {job_id} still {data['state']}: {data}"
        time.sleep(0.05)


def read_jsonl(url: str) -> list[dict[str, Any]]:
    """The JSON Lines result at a signed URL, fetched with no auth header."""
    import json

    answer = httpx.get(url, timeout=30, trust_env=False)
    assert answer.status_code == 200, answer.text
    return [json.loads(line) for line in answer.text.splitlines() if line.strip()]


def result_pages(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [page for line in lines for page in line["result"]["layoutParsingResults"]]


def done_pages(client: httpx.Client, job_id: str, *, limit_s: float = 60.0) -> list[dict[str, Any]]:
    """Wait for a job, require it ``done`` and return its result pages."""
    data = wait_job(client, job_id, limit_s=limit_s)
    assert data["state"] == "done", data
    return result_pages(read_jsonl(data["resultUrl"]["jsonUrl"]))


def page_order(pages: list[dict[str, Any]]) -> list[int]:
    """The document page each result page (of a :func:`numbered_pdf`) came from, in order."""
    return [source_page(page) for page in pages]
