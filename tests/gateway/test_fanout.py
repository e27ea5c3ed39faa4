"""Synchronous fan-out of long PDFs over real HTTP: page slices on several doubles at once, the
pages back in order for one restructure, failover of a slice, the page that fails everywhere
named, and slices that grow when the fleet is busy."""

from __future__ import annotations

import threading
import time

import httpx
import pytest

from doubles.paddlex import pdf_page_sizes
from gateway.inputs.pdf import cut_slices
from gateway.upstream.fanout import plan_slices
from tests.doubles.paddlex_double import DoubleFleet
from tests.gateway.conftest import gateway_config
from tests.gateway.samples import b64, pdf_bytes
from tests.waiting import wait_for

WIDTHS = [100 + i for i in range(20)]  # page i is 100+i points wide: its order is visible


def _config(fleet: DoubleFleet, **fanout):
    return gateway_config(
        fleet.urls,
        load_balance={"mode": "queue"},
        fanout={"threshold_pages": 8, "max_slice_pages": 16, **fanout},
    )


def _start(start_gateway, config):
    """A gateway whose every upstream has passed its first probe (so all count as free)."""
    gw = start_gateway(config)
    total = len(config["upstreams"])
    pool = gw.runtime.pool
    assert wait_for(
        lambda: [u.state(time.monotonic()) for u in pool.upstreams] == ["healthy"] * total,
        timeout=10,
    )
    return gw


@pytest.fixture
def fleet4():
    with DoubleFleet(4, max_num_input_imgs=None) as fleet:
        yield fleet


def test_a_long_pdf_is_parsed_in_slices_on_every_free_instance(fleet4, start_gateway):
    for double in fleet4.doubles:
        double.knobs.service_time_s = 0.5
    gw = _start(start_gateway, _config(fleet4))
    r = gw.client.post("/ocr", json={"base64": b64(pdf_bytes(20, WIDTHS))})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["pages"] == 20 and body["slices"] == 4
    sent = sorted(
        (len(req.body["file"]), d.url) for d in fleet4.doubles for req in d.layout_requests()
    )
    assert len(sent) == 4 and len({url for _, url in sent}) == 4  # one slice per instance
    arrivals = [req.at for d in fleet4.doubles for req in d.layout_requests()]
    assert max(arrivals) - min(arrivals) < 0.5  # each arrived before any other could finish
    restructures = [req for d in fleet4.doubles for req in d.restructure_requests()]
    assert len(restructures) == 1
    pages = restructures[0].body["pages"]
    assert [p["prunedResult"]["width"] for p in pages] == [2 * w for w in WIDTHS]
    assert [p["prunedResult"]["page_index"] for p in pages] == list(range(20))
    assert restructures[0].body["concatenatePages"] is True
    # the markdown is the slices' pages in document order: 4 slices of 5 pages
    lines = body["text"].split("\n\n")
    assert len(lines) == 20
    assert [line.split(" page ")[1] for line in lines] == [f"{i % 5 + 1}/5" for i in range(20)]


def test_a_failed_slice_moves_to_another_instance(fleet4, start_gateway):
    for double in fleet4.doubles:
        double.knobs.service_time_s = 0.3  # the four slices run at once, one per instance
    fleet4[0].knobs.fail_next = 1
    gw = _start(start_gateway, _config(fleet4))
    r = gw.client.post("/ocr", json={"base64": b64(pdf_bytes(20, WIDTHS))})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["pages"] == 20
    assert [a["upstream"] for a in body["failed_attempts"]] == [fleet4.urls[0]]
    pages = next(req for d in fleet4.doubles for req in d.restructure_requests()).body["pages"]
    assert [p["prunedResult"]["page_index"] for p in pages] == list(range(20))


def test_a_page_that_fails_everywhere_is_named(fleet4, start_gateway):
    for double in fleet4.doubles:
        double.knobs.poison_width = 2 * WIDTHS[6]  # page 7 crashes every instance
    gw = _start(start_gateway, _config(fleet4))
    r = gw.client.post("/ocr", json={"base64": b64(pdf_bytes(20, WIDTHS))})
    assert r.status_code == 502, r.text
    error = r.json()["error"]
    assert error["code"] == "all_upstreams_failed"
    assert error["message"].startswith("page 7: ")
    assert error["pages"] == [7]
    assert "text" not in r.json()


def test_slices_grow_when_the_fleet_is_busy(fleet4, start_gateway):
    for double in fleet4.doubles:
        double.knobs.service_time_s = 2.0
    gw = _start(start_gateway, _config(fleet4))
    busy = [
        threading.Thread(
            target=lambda: httpx.post(
                gw.url + "/ocr", json={"base64": b64(pdf_bytes(1))}, timeout=30
            )
        )
        for _ in range(2)
    ]
    for thread in busy:
        thread.start()
    pool = gw.runtime.pool
    assert wait_for(lambda: sum(u.in_flight for u in pool.upstreams) == 2, timeout=10)
    free = [d for d in fleet4.doubles if not pool.get(d.url).in_flight]
    for double in free:
        double.knobs.service_time_s = 0.0
    r = gw.client.post("/ocr", json={"base64": b64(pdf_bytes(20, WIDTHS))})
    assert r.status_code == 200, r.text
    assert r.json()["slices"] == 2  # 2 free instances: 2 slices of 10
    # both slices on the free instances (one may take both: the first can finish before the
    # second is cut); none waited for a busy one
    assert sum(len(d.layout_requests()) for d in free) == 2
    for thread in busy:
        thread.join()


def test_short_pdfs_and_sync_off_are_one_request(fleet4, start_gateway):
    gw = _start(start_gateway, _config(fleet4))
    short = gw.client.post("/ocr", json={"base64": b64(pdf_bytes(8))})
    assert short.status_code == 200 and short.json()["slices"] == 1
    off = _start(start_gateway, _config(fleet4, sync=False))
    whole = off.client.post("/ocr-file", files={"file": ("a.pdf", pdf_bytes(20, WIDTHS))})
    assert whole.status_code == 200 and whole.json()["slices"] == 1
    assert sum(len(d.layout_requests()) for d in fleet4.doubles) == 2


def test_uploads_fan_out_too(fleet4, start_gateway):
    gw = _start(start_gateway, _config(fleet4))
    r = gw.client.post("/ocr-file", files={"file": ("a.pdf", pdf_bytes(20, WIDTHS))})
    assert r.status_code == 200 and r.json()["slices"] == 4


def test_plan_and_extract_units() -> None:
    assert plan_slices(100, 8, 16, 48) == [(i, 3) for i in range(0, 99, 3)] + [(99, 1)]
    assert plan_slices(100, 8, 16, 0) == [(i, min(16, 100 - i)) for i in range(0, 100, 16)]
    first, second = cut_slices(pdf_bytes(20, WIDTHS), [[3, 4, 5], [19]])
    assert pdf_page_sizes(first) == [(206, 600), (208, 600), (210, 600)]
    assert pdf_page_sizes(second) == [(238, 600)]
