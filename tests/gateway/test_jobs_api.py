"""The official PaddleOCR API job protocol on a real gateway (loopback) over PaddleX doubles,
driven by the real official clients (``paddleocr`` 3.7.0) and by plain httpx."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI, Request
from fastapi.responses import Response

from tests.doubles.paddlex_double import DoubleFleet
from tests.doubles.servers import ServerThread
from tests.gateway.conftest import RunningGateway
from tests.gateway.jobs_helpers import (
    AUTH,
    JOBS,
    OTHER_TOKEN,
    TOKEN,
    done_pages,
    jobs_config,
    numbered_pdf,
    page_order,
    read_jsonl,
    result_pages,
    source_page,
    stored_inputs,
    submit_pdf,
    wait_job,
    write_pdf,
)
from tests.gateway.samples import png_bytes

paddleocr = pytest.importorskip("paddleocr")
from paddleocr import AsyncPaddleOCRClient, PaddleOCRClient  # noqa: E402
from paddleocr._api_client.errors import (  # noqa: E402
    AuthError,
    InvalidRequestError,
    JobFailedError,
)


@pytest.fixture
def files() -> Iterator[tuple[str, dict[str, bytes], list[Any]]]:
    """A loopback file server (``/NAME``) that also records POSTed callbacks."""
    content: dict[str, bytes] = {}
    callbacks: list[Any] = []
    app = FastAPI()

    @app.get("/{name}")
    async def get(name: str) -> Response:
        if name not in content:
            return Response(status_code=404)
        return Response(content[name], media_type="application/octet-stream")

    @app.post("/callback")
    async def callback(request: Request) -> Response:
        callbacks.append(await request.json())
        return Response(status_code=204)

    with ServerThread(app) as server:
        yield server.url, content, callbacks


@pytest.fixture
def jobs_gateway(
    tmp_path: Path, start_gateway: Callable[..., RunningGateway], job_store: dict[str, Any]
) -> Iterator[tuple[RunningGateway, DoubleFleet]]:
    with DoubleFleet(3, per_page_s=0.01) as fleet:
        config = jobs_config(
            fleet.urls, tmp_path / "jobs", job_store, input={"url_allow": ["127.0.0.1"]}
        )
        yield start_gateway(config), fleet


def _official(gw: RunningGateway, token: str = TOKEN) -> PaddleOCRClient:
    return PaddleOCRClient(token=token, base_url=gw.url, request_timeout=30, poll_timeout=60)


def test_official_client_uploads_a_pdf_split_over_instances(
    jobs_gateway: tuple[RunningGateway, DoubleFleet], tmp_path: Path
) -> None:
    gw, fleet = jobs_gateway
    path = write_pdf(tmp_path / "doc.pdf", 22)
    with _official(gw) as client:
        result = client.parse_document(model="PaddleOCR-VL-1.5", file_path=str(path))
    assert [source_page(p.raw) for p in result.pages] == list(range(22))
    assert all(p.markdown_text for p in result.pages)
    served = [d for d in fleet if d.layout_requests()]
    assert len(served) >= 2, "slices should spread over instances"
    assert sum(len(d.restructure_requests()) for d in fleet) == 1
    restructured = next(d for d in fleet if d.restructure_requests()).restructure_requests()[0]
    assert len(restructured.body["pages"]) == 22
    assert restructured.body["concatenatePages"] is False


def test_official_client_file_url_page_ranges_and_options(
    jobs_gateway: tuple[RunningGateway, DoubleFleet],
    files: tuple[str, dict[str, bytes], list[Any]],
) -> None:
    gw, fleet = jobs_gateway
    base, content, _ = files
    content["doc.pdf"] = numbered_pdf(12)
    from paddleocr._api_client.models import PaddleOCRVLOptions

    options = PaddleOCRVLOptions(use_layout_detection=True, prettify_markdown=False)
    with _official(gw) as client:
        job = client.submit_document_parsing(
            model="PaddleOCR-VL-1.5",
            file_url=f"{base}/doc.pdf",
            options=options,
            page_ranges="2-3,9",
        )
        result = client.wait_document_parsing_result(job)
        status = client.get_status(job.job_id)
    assert [source_page(p.raw) for p in result.pages] == [1, 2, 8]
    assert status.state == "done" and status.progress.total_pages == 3
    sent = [r.body for d in fleet for r in d.layout_requests()]
    assert all(body["prettifyMarkdown"] is False for body in sent)


def test_async_client_and_batch(
    jobs_gateway: tuple[RunningGateway, DoubleFleet], tmp_path: Path
) -> None:
    gw, _ = jobs_gateway
    image = tmp_path / "page.png"
    image.write_bytes(png_bytes())

    async def run() -> Any:
        async with AsyncPaddleOCRClient(token=TOKEN, base_url=gw.url, poll_timeout=60) as client:
            jobs = [
                await client.submit_document_parsing(
                    model="PaddleOCR-VL-1.5", file_path=str(image), batch_id="b-1"
                )
                for _ in range(2)
            ]
            results = [await client.wait_document_parsing_result(job) for job in jobs]
            return results, await client.get_batch_status("b-1")

    results, batch = asyncio.run(run())
    assert all(len(r.pages) == 1 for r in results)
    assert sorted(j.job_id for j in batch.jobs) == sorted(r.job_id for r in results)
    assert all(j.state == "done" for j in batch.jobs)


def test_errors_in_the_official_envelope(jobs_gateway: tuple[RunningGateway, DoubleFleet]) -> None:
    gw, _ = jobs_gateway
    c = gw.client
    pdf = numbered_pdf(3)

    def submit(headers: dict[str, str] | None = None, **data: str) -> httpx.Response:
        return c.post(JOBS, headers=headers or AUTH, data=data, files={"file": ("d.pdf", pdf)})

    cases = [
        (c.get(f"{JOBS}/job-nope", headers=AUTH), 404, "not found"),
        (submit(model="PP-StructureV3"), 400, "PaddleOCR-VL-1.5"),
        (submit(model="PaddleOCR-VL-1.5", pageRanges="2-9"), 400, "pageRanges"),
        (submit(model="PaddleOCR-VL-1.5", pageRanges="x"), 400, "pageRanges"),
        (submit(model="PaddleOCR-VL-1.5", optionalPayload='{"bogus": 1}'), 400, "bogus"),
        (submit({"Authorization": "Bearer wrong"}, model="PaddleOCR-VL-1.5"), 401, "token"),
        (c.get(f"{JOBS}/batch/none", headers=AUTH), 404, "not found"),
        (c.post(JOBS, headers=AUTH, json={"model": "PaddleOCR-VL-1.5"}), 400, "fileUrl"),
        (
            c.post(JOBS, headers=AUTH, json={"fileUrl": "http://10.0.0.1/x.pdf"}),
            403,
            "url_forbidden",
        ),
    ]
    for answer, status, word in cases:
        assert answer.status_code == status, answer.text
        body = answer.json()
        assert body["code"] == status and body["data"] is None and word in body["msg"], body
    assert stored_inputs(gw.runtime.settings.jobs) == 0, "nothing stored"
    with _official(gw, token="wrong") as client, pytest.raises(AuthError):
        client.get_status("job-x")
    with _official(gw) as client, pytest.raises(InvalidRequestError, match="offered"):
        client.submit_document_parsing(model="PaddleOCR-VL", file_url="http://127.0.0.1:9/a.pdf")


def test_too_large_and_full_store(
    tmp_path: Path,
    start_gateway: Callable[..., RunningGateway],
    fleet: DoubleFleet,
    job_store: dict[str, Any],
) -> None:
    config = jobs_config(
        fleet.urls,
        tmp_path / "jobs",
        job_store,
        input={"max_request_bytes": 4000},
        jobs={"max_disk_bytes": len(numbered_pdf(8)) * 3 // 2},
    )
    gw = start_gateway(config)
    big = submit_pdf(gw.client, 40)
    assert big.status_code == 413 and big.json()["code"] == 413
    first = submit_pdf(gw.client, 8)
    assert first.status_code == 200, first.text
    full = submit_pdf(gw.client, 8)
    assert full.status_code == 503 and full.headers["Retry-After"], full.text
    assert "jobs.max_disk_bytes" in full.json()["msg"]


def test_result_url_is_signed_and_jobs_are_per_token(
    jobs_gateway: tuple[RunningGateway, DoubleFleet],
) -> None:
    gw, _ = jobs_gateway
    answer = gw.client.post(JOBS, headers=AUTH, files={"file": ("p.png", png_bytes())})
    job_id = answer.json()["data"]["jobId"]
    data = wait_job(gw.client, job_id)
    url = data["resultUrl"]["jsonUrl"]
    assert result_pages(read_jsonl(url))[0]["markdown"]["text"]
    tampered = url.replace("sig=", "sig=0")
    assert httpx.get(tampered, trust_env=False).status_code == 403
    expired = url.split("?")[0] + "?expires=1&sig=00"
    assert httpx.get(expired, trust_env=False).status_code == 403
    other = {"Authorization": f"Bearer {OTHER_TOKEN}"}
    assert gw.client.get(f"{JOBS}/{job_id}", headers=other).status_code == 404


def test_cancel_and_callback(
    tmp_path: Path,
    start_gateway: Callable[..., RunningGateway],
    files: tuple[str, dict[str, bytes], list[Any]],
    job_store: dict[str, Any],
) -> None:
    base, _, callbacks = files
    with DoubleFleet(2, per_page_s=0.05) as fleet:
        config = jobs_config(
            fleet.urls, tmp_path / "jobs", job_store, input={"url_allow": ["127.0.0.1"]}
        )
        gw = start_gateway(config)
        slow = submit_pdf(gw.client, 40)
        slow_id = slow.json()["data"]["jobId"]
        cancelled = gw.client.delete(f"{JOBS}/{slow_id}", headers=AUTH).json()["data"]
        assert cancelled["state"] == "failed" and "cancelled" in cancelled["errorMsg"]
        with _official(gw) as client, pytest.raises(JobFailedError, match="cancelled"):
            client.wait_document_parsing_result(slow_id)
        quick = gw.client.post(
            JOBS,
            headers=AUTH,
            data={"callbackUrl": f"{base}/callback"},
            files={"file": ("p.png", png_bytes())},
        )
        quick_id = quick.json()["data"]["jobId"]
        assert wait_job(gw.client, quick_id)["state"] == "done"
        for _ in range(200):
            if any(c["data"]["jobId"] == quick_id for c in callbacks):
                break
            asyncio.run(asyncio.sleep(0.05))
        done = [c for c in callbacks if c["data"]["jobId"] == quick_id]
        assert done and done[0]["data"]["state"] == "done", callbacks


def test_a_page_failing_everywhere_fails_the_job_naming_it(
    tmp_path: Path, start_gateway: Callable[..., RunningGateway], job_store: dict[str, Any]
) -> None:
    with DoubleFleet(2) as fleet:
        config = jobs_config(fleet.urls, tmp_path / "jobs", job_store, jobs={"slice_attempts": 1})
        gw = start_gateway(config)
        for double in fleet:
            double.knobs.always_500 = True
        answer = submit_pdf(gw.client, 2)
        data = wait_job(gw.client, answer.json()["data"]["jobId"])
    assert data["state"] == "failed"
    # the 2-page slice failed, then each page alone: the first page to fail everywhere is named
    assert re.search(r"^page [12] failed on every upstream", data["errorMsg"]), data


def test_a_failed_slice_is_retried_on_another_instance(
    jobs_gateway: tuple[RunningGateway, DoubleFleet],
) -> None:
    gw, fleet = jobs_gateway
    fleet[0].knobs.fail_next = 3
    answer = submit_pdf(gw.client, 16)
    pages = done_pages(gw.client, answer.json()["data"]["jobId"])
    assert page_order(pages) == list(range(16))
    assert json.dumps(pages)  # plain JSON all the way


def test_paddleocr_api_cli(
    jobs_gateway: tuple[RunningGateway, DoubleFleet], tmp_path: Path
) -> None:
    gw, _ = jobs_gateway
    path = write_pdf(tmp_path / "doc.pdf", 6)
    out = tmp_path / "out.json"
    cli = shutil.which("paddleocr") or str(Path(sys.executable).with_name("paddleocr"))
    proc = subprocess.run(
        [cli, "api", "--model_type", "doc_parsing", "--model", "PaddleOCR-VL-1.5",
         "--file_path", str(path), "--base_url", gw.url, "--output", str(out)],
        env={**os.environ, "PADDLEOCR_ACCESS_TOKEN": TOKEN},
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(out.read_text())
    assert len(result["pages"]) == 6 and all(p["markdownText"] for p in result["pages"])
