"""Damaged documents over real HTTP: what PaddleX's decoders read is served on every route
(``/ocr``, ``/ocr-file``, the native ``/layout-parsing``, the job API, with and without page
fan-out), what they refuse is a 4xx JSON error naming the problem. Each expectation comes from
the engine itself (PDFium via ``pypdfium2``, OpenCV's ``cv2.imdecode``), asked in the test."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from doubles.paddlex import pdf_page_sizes
from gateway.errors import InputError
from gateway.inputs.document import make_document
from gateway.inputs.pdf import cut_slices
from tests.doubles.paddlex_double import DoubleFleet
from tests.gateway.conftest import RunningGateway
from tests.gateway.damaged import (
    PAGES,
    WIDTHS,
    classic_pdf,
    cv2_decodes,
    images,
    pdfium_pages,
    recoverable_pdfs,
    unreadable_pdfs,
)
from tests.gateway.jobs_helpers import AUTH, jobs_config, read_jsonl, result_pages, wait_job
from tests.gateway.samples import b64
from tests.waiting import wait_for

RECOVERABLE = recoverable_pdfs()
UNREADABLE = unreadable_pdfs()
IMAGES = images()
JOBS = "/api/v2/ocr/jobs"


@pytest.fixture(scope="module")
def fleet() -> Iterator[DoubleFleet]:
    with DoubleFleet(3, max_num_input_imgs=None) as doubles:
        yield doubles


@pytest.fixture
def gateway(fleet: DoubleFleet, start_gateway, tmp_path: Path) -> RunningGateway:
    """Jobs on, fan-out of anything over 2 pages in slices of at most 2, every upstream
    healthy (so that all count as free and a PDF spreads over them)."""
    config = jobs_config(
        fleet.urls,
        tmp_path / "jobs",
        fanout={"threshold_pages": 2, "max_slice_pages": 2},
    )
    gw = start_gateway(config)
    pool = gw.runtime.pool
    assert wait_for(
        lambda: [u.state(time.monotonic()) for u in pool.upstreams] == ["healthy"] * 3,
        timeout=10,
    )
    return gw


def _widths(pages: list[dict]) -> list[int]:
    return [page["prunedResult"]["width"] // 2 for page in pages]


def test_the_corpus_is_what_the_engines_say() -> None:
    """The premise, from the engines: PDFium reads every recoverable PDF whole, and none of
    the unreadable ones; and the gateway's own verdict (in-process) agrees."""
    for name, data in RECOVERABLE.items():
        assert pdfium_pages(data) == PAGES, name
        assert make_document(data).pages == PAGES, name
    for name, (data, status, code, words) in UNREADABLE.items():
        assert pdfium_pages(data) is None, name
        with pytest.raises(InputError) as err:
            make_document(data)
        assert (err.value.status, err.value.code) == (status, code), name
        assert words in err.value.message, (name, err.value.message)


@pytest.mark.parametrize("name", list(IMAGES))
def test_an_image_is_refused_only_when_opencv_refuses_it(name: str) -> None:
    data = IMAGES[name]
    if cv2_decodes(data):
        assert make_document(data).kind == "image"
    else:
        with pytest.raises(InputError) as err:
            make_document(data)
        assert (err.value.status, err.value.code) == (422, "unreadable_image")
        assert "as PaddleX decodes it" in err.value.message


def test_a_slice_of_a_repaired_pdf_is_a_valid_pdf() -> None:
    for name, data in RECOVERABLE.items():
        first, rest = cut_slices(data, [[0, 1], [2, 3, 4]])
        assert first.startswith(b"%PDF-") and b"startxref" in first[-64:], name
        assert pdf_page_sizes(first) == [(2 * w, 600) for w in WIDTHS[:2]], name
        assert pdf_page_sizes(rest) == [(2 * w, 600) for w in WIDTHS[2:]], name


@pytest.mark.parametrize("name", list(RECOVERABLE))
def test_a_recoverable_pdf_is_served_on_every_route(
    name: str, gateway: RunningGateway, fleet: DoubleFleet
) -> None:
    data, client = RECOVERABLE[name], gateway.client
    # /ocr with base64, fanned out in slices over the doubles
    r = client.post("/ocr", json={"base64": b64(data)}, headers=AUTH)
    assert r.status_code == 200, r.text
    assert r.json()["pages"] == PAGES and r.json()["slices"] == 3
    # /ocr-file, an upload
    r = client.post("/ocr-file", files={"file": ("scan.pdf", data)}, headers=AUTH)
    assert r.status_code == 200, r.text
    assert r.json()["pages"] == PAGES
    # the native PaddleX route, passed through as sent
    r = client.post("/layout-parsing", json={"file": b64(data), "fileType": 0}, headers=AUTH)
    assert r.status_code == 200, r.text
    assert _widths(r.json()["result"]["layoutParsingResults"]) == WIDTHS
    # a job, cut into slices in page order
    r = client.post(JOBS, headers=AUTH, files={"file": ("scan.pdf", data)})
    assert r.status_code == 200, r.text
    job = wait_job(client, r.json()["data"]["jobId"])
    assert job["state"] == "done", job
    pages = result_pages(read_jsonl(job["resultUrl"]["jsonUrl"]))
    assert _widths(pages) == WIDTHS


@pytest.mark.parametrize("name", list(UNREADABLE))
def test_an_unreadable_pdf_is_a_4xx_naming_the_problem(
    name: str, gateway: RunningGateway, fleet: DoubleFleet
) -> None:
    data, status, code, words = UNREADABLE[name]
    client = gateway.client
    before = sum(len(d.layout_requests()) for d in fleet.doubles)
    for r in (
        client.post("/ocr", json={"base64": b64(data)}, headers=AUTH),
        client.post("/ocr-file", files={"file": ("scan.pdf", data)}, headers=AUTH),
        client.post("/layout-parsing", json={"file": b64(data), "fileType": 0}, headers=AUTH),
    ):
        assert r.status_code == status, r.text
        error = r.json()["error"]
        assert error["code"] == code and words in error["message"], error
    r = client.post(JOBS, headers=AUTH, files={"file": ("scan.pdf", data)})
    assert r.status_code == status, r.text
    assert words in r.json()["msg"], r.json()
    assert sum(len(d.layout_requests()) for d in fleet.doubles) == before  # none went upstream


@pytest.mark.parametrize("name", list(IMAGES))
def test_a_damaged_image_on_every_route(
    name: str, gateway: RunningGateway, fleet: DoubleFleet
) -> None:
    """Served when OpenCV decodes it (the double decodes with OpenCV too), else a 422."""
    data, client = IMAGES[name], gateway.client
    readable = cv2_decodes(data)
    answers = [
        client.post("/ocr", json={"base64": b64(data)}, headers=AUTH),
        client.post("/ocr-file", files={"file": ("scan.img", data)}, headers=AUTH),
        client.post("/layout-parsing", json={"file": b64(data), "fileType": 1}, headers=AUTH),
        client.post(JOBS, headers=AUTH, files={"file": ("scan.img", data)}),
    ]
    for r in answers:
        if readable:
            assert r.status_code == 200, r.text
        else:
            assert r.status_code == 422, r.text
            body = r.json()
            message = body["error"]["message"] if "error" in body else body["msg"]
            assert "cannot be decoded" in message, body
    if readable:
        job = wait_job(client, answers[-1].json()["data"]["jobId"])
        assert job["state"] == "done", job


def test_the_seed_client_line_gets_markdown_for_a_pdf_without_xref(
    gateway: RunningGateway,
) -> None:
    """The issue's own case: a PDF with no cross-reference table, uploaded as the seed's
    clients do, comes back as markdown of all its pages."""
    data = RECOVERABLE["no cross-reference table"]
    assert b"xref" not in data and pdfium_pages(data) == PAGES
    r = gateway.client.post("/ocr-file", files={"file": ("scan.pdf", data)}, headers=AUTH)
    assert r.status_code == 200, r.text
    assert len(r.json()["text"].split("\n\n")) == PAGES
    assert classic_pdf() != data
