"""The gateway in front of the genuine PaddleX serving app (the PaddleX simulator: PaddleX's own
`create_pipeline_app` with a stand-in pipeline that asks a vLLM simulator), configured with the
pipeline config the fleet renders. This is the real wire protocol, not our double."""

from __future__ import annotations

import base64
from collections.abc import Iterator

import httpx
import pytest
import yaml

from components import render
from components.plan import build_plan
from components.settings import load_settings
from gateway.config.settings import parse_settings
from gateway.server.app import create_app
from tests.gateway.conftest import RunningGateway, gateway_config
from tests.gateway.jobs_helpers import done_pages, jobs_config, submit_pdf
from tests.sim.helpers import (
    Processes,
    free_port,
    paddlex_python_or_skip,
    pdf_b64,
    png_b64,
    wait_http_ok,
)


class GenuineStack:
    """One vLLM simulator, two genuine PaddleX apps bound to it (the second without the
    rendered Serving block, i.e. PaddleX's default 10-page limit), and a gateway for each."""

    def __init__(self, procs: Processes, python: str, tmp_path) -> None:
        self.vllm_port = free_port()
        procs.vllm(self.vllm_port)
        settings, paddlex = self._one_paddlex_plan()
        self.fleet_url = self._paddlex(
            procs, python, tmp_path, paddlex.port, render.pipeline_config(settings, paddlex)
        )
        settings, paddlex = self._one_paddlex_plan()
        without_serving = render.pipeline_config(settings, paddlex)
        del without_serving["Serving"]
        self.default_url = self._paddlex(procs, python, tmp_path, paddlex.port, without_serving)
        wait_http_ok(f"http://127.0.0.1:{self.vllm_port}/health", 60)

    def _one_paddlex_plan(self):
        """A one-card plan with one PaddleX on a free port, bound to our vLLM simulator."""
        settings = load_settings(
            {
                "cards": "1",
                "vllmPerCard": "1",
                "paddlexPerVllm": "1",
                "vllmBasePort": str(self.vllm_port),
                "paddlexBasePort": str(free_port()),
            }
        )
        return settings, build_plan(settings).paddlex[0]

    @staticmethod
    def _paddlex(procs: Processes, python: str, tmp_path, port: int, config: dict) -> str:
        path = tmp_path / f"pipeline_config_vllm-{port}.yaml"
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        proc = procs.start(
            [
                python,
                "-m",
                "sim.paddlex",
                "--serve",
                "--device",
                "cpu",
                "--port",
                str(port),
                "--pipeline",
                str(path),
            ],
            {"PADDLEX_SIM_LOAD_SECONDS": "0"},
        )
        url = f"http://127.0.0.1:{port}"
        wait_http_ok(f"{url}/health", 120, proc)
        return url


@pytest.fixture(scope="module")
def genuine(tmp_path_factory) -> Iterator[GenuineStack]:
    python = paddlex_python_or_skip("the genuine PaddleX app needs `pip install -e '.[sim]'`")
    tmp_path = tmp_path_factory.mktemp("genuine")
    procs = Processes(tmp_path)
    try:
        yield GenuineStack(procs, python, tmp_path)
    finally:
        procs.stop_all()


@pytest.fixture(scope="module")
def gateway(genuine) -> Iterator[RunningGateway]:
    config = gateway_config([genuine.fleet_url], load_balance={"mode": "queue"})
    running = RunningGateway(create_app(parse_settings(config)))
    yield running
    running.stop()


@pytest.fixture(scope="module")
def truncating_gateway(genuine) -> Iterator[RunningGateway]:
    running = RunningGateway(create_app(parse_settings(gateway_config([genuine.default_url]))))
    yield running
    running.stop()


@pytest.fixture(scope="module")
def slicing_gateway(genuine) -> Iterator[RunningGateway]:
    """Cuts PDFs of more than 4 pages into slices of 4 (three requests for 12 pages)."""
    config = gateway_config(
        [genuine.fleet_url],
        load_balance={"mode": "queue"},
        fanout={"threshold_pages": 4, "max_slice_pages": 4},
    )
    running = RunningGateway(create_app(parse_settings(config)))
    yield running
    running.stop()


@pytest.fixture(scope="module")
def jobs_gateway(genuine, tmp_path_factory) -> Iterator[RunningGateway]:
    """Runs jobs in slices of 4 pages (jobs_helpers.jobs_config)."""
    config = jobs_config([genuine.fleet_url], tmp_path_factory.mktemp("jobs"))
    running = RunningGateway(create_app(parse_settings(config)))
    yield running
    running.stop()


def test_a_jobs_pages_keep_their_place_in_the_document_through_the_restructure(jobs_gateway):
    """PaddleX's /restructure-pages answers pages without `page_index` (its prune_result drops
    it); the job's result keeps each page's position, as a fanned-out request's pages have."""
    answer = submit_pdf(jobs_gateway.client, 10)
    assert answer.status_code == 200, answer.text
    pages = done_pages(jobs_gateway.client, answer.json()["data"]["jobId"])
    assert [page["prunedResult"]["page_index"] for page in pages] == list(range(10))
    assert all(page["markdown"]["text"] for page in pages)


def test_a_pdf_parsed_in_slices_reads_as_one_parsed_whole(gateway, slicing_gateway):
    whole = gateway.client.post("/ocr", json={"base64": pdf_b64(12)}).json()
    sliced = slicing_gateway.client.post("/ocr", json={"base64": pdf_b64(12)}).json()
    assert (whole["slices"], sliced["slices"]) == (1, 3)
    assert sliced["pages"] == 12
    assert sliced["text"] == whole["text"]  # same pages, same order, one restructure


def test_png_through_the_gateway_is_ocred_by_the_bound_vllm(gateway, genuine):
    response = gateway.client.post(
        "/ocr-file", files={"file": ("doc.png", base64.b64decode(png_b64()), "image/png")}
    )
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["upstream"] == genuine.fleet_url and body["pages"] == 1
    assert f"sim-vllm:{genuine.vllm_port}" in body["text"]


def test_a_twelve_page_pdf_comes_back_whole_with_the_rendered_config(gateway, genuine):
    response = gateway.client.post("/ocr", json={"base64": pdf_b64(12)})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["pages"] == 12
    assert body["text"].count(f"sim-vllm:{genuine.vllm_port}") == 12


def test_paddlex_default_page_limit_is_caught_not_silently_passed_on(truncating_gateway):
    response = truncating_gateway.client.post("/ocr", json={"base64": pdf_b64(12)})
    assert response.status_code == 502
    message = response.json()["error"]["message"]
    assert "12" in message and "10" in message and "max_num_input_imgs" in message


def test_native_routes_pass_the_genuine_envelopes_through(gateway):
    bad = gateway.client.post("/layout-parsing", json={"file": png_b64()})
    assert bad.status_code == 422
    assert bad.json()["errorMsg"] == "File type cannot be determined"
    parsed = gateway.client.post(
        "/layout-parsing", json={"file": pdf_b64(2), "fileType": 0, "visualize": False}
    )
    assert parsed.status_code == 200, parsed.text
    envelope = parsed.json()
    assert envelope["errorCode"] == 0 and envelope["errorMsg"] == "Success"
    results = envelope["result"]["layoutParsingResults"]
    assert len(results) == 2 and "outputImages" not in results[0]
    pages = [
        {"prunedResult": r["prunedResult"], "markdownImages": r["markdown"]["images"] or {}}
        for r in results
    ]
    joined = gateway.client.post(
        "/restructure-pages", json={"pages": pages, "concatenatePages": True}
    )
    assert joined.status_code == 200, joined.text
    assert len(joined.json()["result"]["layoutParsingResults"]) == 1
    assert httpx.get(f"{gateway.url}/ready", timeout=10).status_code == 200
