"""Input bounds: image dimensions from headers, PDF page caps, looping or exploding page trees
and the PDF time bound, each refused with a 4xx before anything reaches an upstream."""

from __future__ import annotations

import asyncio
import json

import pytest

from gateway.config.settings import InputSettings
from gateway.errors import InputError
from gateway.inputs.document import image_size, make_document
from gateway.inputs.workers import ProcessWorkers, WorkerTimeout
from tests.gateway import hostile
from tests.gateway.conftest import gateway_config
from tests.gateway.samples import b64, image_bytes, pdf_bytes, png_bytes

HUGE = {
    "PNG": hostile.huge_png(60000, 60000),
    "JPEG": hostile.huge_jpeg(60000, 60000),
    "BMP": hostile.huge_bmp(60000, 60000),
    "TIFF": hostile.huge_tiff(60000, 60000),
    "WEBP": hostile.huge_webp(60000, 60000),
}


@pytest.mark.parametrize("fmt", ["PNG", "JPEG", "BMP", "TIFF", "WEBP"])
def test_image_size_from_the_header(fmt):
    assert image_size(image_bytes(fmt), "image/" + fmt.lower()) == (16, 12)
    assert make_document(image_bytes(fmt)).pages == 1


@pytest.mark.parametrize("fmt", sorted(HUGE))
def test_images_over_the_pixel_cap_are_413(fmt):
    with pytest.raises(InputError) as err:
        make_document(HUGE[fmt])
    assert (err.value.status, err.value.code) == (413, "image_too_large")
    assert "60000 x 60000" in err.value.message
    assert "input.max_image_pixels" in err.value.message
    # a scan that real documents produce fits the default: A4 at 600 dpi
    make_document(hostile.huge_png(4961, 7016))
    # the cap is the config's
    with pytest.raises(InputError):
        make_document(hostile.huge_png(100, 100), InputSettings(max_image_pixels=9999))


@pytest.mark.parametrize(
    ("data", "words"),
    [
        (b"\x89PNG\r\n\x1a\n" + b"garbage" * 4, "IHDR"),
        (b"\xff\xd8\xff\xe0\x00\x10JFIF", "SOF"),
        (hostile.looping_tiff(), "loops"),
        (hostile.huge_png(0, 10), "0 x 10"),
        (b"II*\x00\xff\xff\x00\x00", "outside"),
    ],
)
def test_unreadable_image_headers_are_422(data, words):
    with pytest.raises(InputError) as err:
        make_document(data)
    assert (err.value.status, err.value.code) == (422, "unreadable_image")
    assert words in err.value.message


@pytest.mark.parametrize(
    ("data", "status", "code", "words"),
    [
        (hostile.looping_pdf(), 422, "unreadable_pdf", "loops"),
        (hostile.page_tree_bomb(), 413, "too_many_pages", "input.max_pages"),
        (hostile.huge_page_pdf(), 413, "image_too_large", "20000 x 20000 pixels even at"),
        (b"%PDF-1.7\n garbage", 422, "unreadable_pdf", "cannot be read"),
        (pdf_bytes(1001), 413, "too_many_pages", "1001 pages, the limit is 1000"),
    ],
)
def test_pdf_bounds(data, status, code, words):
    with pytest.raises(InputError) as err:
        make_document(data)
    assert (err.value.status, err.value.code) == (status, code)
    assert words in err.value.message
    assert make_document(pdf_bytes(3), InputSettings(max_pages=3)).pages == 3


def test_a_page_paddlex_renders_at_a_smaller_scale_is_served():
    """PaddleX renders a page too large for 144 dpi at the largest scale (down to 0.1) that
    fits its pixel limit: 60000 x 60000 points is 12000 x 12000 pixels at scale 0.2."""
    import pypdfium2
    from paddlex.inference.utils.pdf_rendering import get_pdf_render_scale_within_pixel_limit

    data = hostile.huge_page_pdf(60000)
    page = pypdfium2.PdfDocument(data)[0]
    assert 0.1 < get_pdf_render_scale_within_pixel_limit(page.get_size(), page_index=0) < 2
    assert make_document(data).pages == 1


def test_workers_kill_a_job_past_its_timeout_without_blocking_the_loop():
    async def scenario() -> tuple[list[str], int, int]:
        workers = ProcessWorkers("tests.gateway.hostile:spin_forever", size=1)
        events: list[str] = []

        async def ticker() -> None:
            for _ in range(5):
                await asyncio.sleep(0.01)
            events.append("loop ran")

        async def stuck() -> None:
            with pytest.raises(WorkerTimeout):
                await workers.run(b"x", (), timeout=3.0)
            events.append("timed out")

        await asyncio.gather(stuck(), ticker())
        echo = ProcessWorkers("tests.gateway.hostile:echo_length", size=1)
        assert await echo.run(b"abc", (2,), timeout=60) == 5
        assert await echo.run(b"abcd", (0,), timeout=60) == 4  # the same process again
        await echo.close()
        await workers.close()
        return events, workers.killed, echo.started

    events, killed, started = asyncio.run(scenario())
    assert events == ["loop ran", "timed out"]  # the loop ran while the job was stuck
    assert killed == 1 and started == 1


async def _nap(workers: ProcessWorkers, done: list[str], name: str, urgent: bool = False) -> None:
    """A job that holds its worker 0.5 s ("holder") or none, its name in ``done`` when over."""
    seconds = 0.5 if name == "holder" else 0.0
    done.append(await workers.run(name.encode(), (seconds,), 60, urgent=urgent))


def test_a_waiting_client_gets_the_next_free_worker_before_background_work():
    """A PDF to inspect for a client waiting (``urgent``) goes before the slices queued
    earlier for the job runner: a submit does not wait behind a backlog's cuts."""

    async def scenario() -> list[str]:
        workers = ProcessWorkers("tests.gateway.hostile:nap", size=1)
        done: list[str] = []
        holder = asyncio.create_task(_nap(workers, done, "holder"))
        await asyncio.sleep(0.2)  # the one worker is busy
        queued = [asyncio.create_task(_nap(workers, done, f"cut-{i}")) for i in range(3)]
        await asyncio.sleep(0.05)
        urgent = asyncio.create_task(_nap(workers, done, "inspect", urgent=True))
        await asyncio.gather(holder, *queued, urgent)
        await workers.close()
        return done

    assert asyncio.run(scenario()) == ["holder", "inspect", "cut-0", "cut-1", "cut-2"]


def test_an_urgent_caller_that_gives_up_lets_the_others_on():
    async def scenario() -> list[str]:
        workers = ProcessWorkers("tests.gateway.hostile:nap", size=1)
        done: list[str] = []
        holder = asyncio.create_task(_nap(workers, done, "holder"))
        await asyncio.sleep(0.2)
        urgent = asyncio.create_task(_nap(workers, done, "inspect", urgent=True))
        queued = asyncio.create_task(_nap(workers, done, "cut"))
        await asyncio.sleep(0.05)
        urgent.cancel()  # its client went away while it waited
        await asyncio.wait_for(asyncio.gather(holder, queued), 10)
        await workers.close()
        return done

    assert asyncio.run(scenario()) == ["holder", "cut"]


def _assert_refused(r, status, code, fleet, words=""):
    assert r.status_code == status, r.text
    body = r.json()
    assert body["error"]["code"] == code and body["request_id"]
    assert words in body["error"]["message"]
    assert all(not d.requests for d in fleet.doubles)  # nothing reached an upstream


def test_bad_documents_over_http(fleet, start_gateway):
    gw = start_gateway(gateway_config(fleet.urls))
    for fmt, data in HUGE.items():
        r = gw.client.post("/ocr", json={"base64": b64(data)})
        _assert_refused(r, 413, "image_too_large", fleet, "input.max_image_pixels")
        r = gw.client.post("/ocr-file", files={"file": (f"x.{fmt}", data)})
        _assert_refused(r, 413, "image_too_large", fleet)
    cases = [
        (hostile.looping_pdf(), 422, "unreadable_pdf", "loops"),
        (hostile.page_tree_bomb(), 413, "too_many_pages", "input.max_pages"),
        (pdf_bytes(1001), 413, "too_many_pages", "1001 pages"),
        (hostile.looping_tiff(), 422, "unreadable_image", "loops"),
    ]
    for data, status, code, words in cases:
        _assert_refused(gw.client.post("/ocr", json={"base64": b64(data)}), status, code, fleet)
        r = gw.client.post("/layout-parsing", json={"file": b64(data), "fileType": 0})
        _assert_refused(r, status, code, fleet, words)
        assert r.json()["errorCode"] == status  # the PaddleX envelope keys too
    # the gateway still serves good documents, PDFs included
    ok = gw.client.post("/ocr", json={"base64": b64(pdf_bytes(2))})
    assert ok.status_code == 200 and ok.json()["pages"] == 2


def test_page_cap_and_pdf_time_bound_from_config(fleet, start_gateway):
    gw = start_gateway(gateway_config(fleet.urls, input={"max_pages": 3}))
    r = gw.client.post("/ocr-file", files={"file": ("a.pdf", pdf_bytes(4))})
    _assert_refused(r, 413, "too_many_pages", fleet, "the limit is 3 (input.max_pages)")
    # no PDF can be read in a millisecond by a process that is started for it: the bound holds
    slow = start_gateway(gateway_config(fleet.urls, input={"pdf_timeout_s": 0.001}))
    r = slow.client.post("/ocr", json={"base64": b64(pdf_bytes(2))})
    _assert_refused(r, 422, "pdf_timeout", fleet, "input.pdf_timeout_s")
    assert slow.client.get("/health").status_code == 200
    assert slow.client.post("/ocr", json={"base64": b64(png_bytes())}).status_code == 200


def test_native_base64_is_checked_and_passed_unchanged(fleet, start_gateway):
    gw = start_gateway(gateway_config(fleet.urls))
    r = gw.client.post("/layout-parsing", json={"file": "@@@", "fileType": 1})
    _assert_refused(r, 400, "invalid_base64", fleet)
    body = {"file": b64(png_bytes()), "fileType": 1, "visualize": False}
    r = gw.client.post("/layout-parsing", content=json.dumps(body))
    assert r.status_code == 200
    served = next(d for d in fleet.doubles if d.requests)
    assert served.layout_requests()[-1].body["file"] == body["file"]
