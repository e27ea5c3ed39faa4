"""`fleetctl ocr` through a job and through /ocr give the same markdown file with the genuine
PaddleX serving app (the PaddleX simulator: PaddleX's own app, restructure and markdown
rendering, over a vLLM simulator) behind the real gateway: fleetctl's join of the job's pages
is checked against PaddleX's own ``concatenatePages``, not against our double."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from fleetctl.cli import main
from gateway.config.settings import parse_settings
from gateway.server.app import create_app
from tests.gateway.conftest import RunningGateway, gateway_config
from tests.sim.helpers import (
    Processes,
    free_port,
    paddlex_python_or_skip,
    pdf_b64,
    pipeline_config,
    wait_http_ok,
)

SERVING = {"visualize": False, "extra": {"max_num_input_imgs": None}}


@pytest.fixture(scope="module")
def genuine_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One vLLM simulator and one genuine PaddleX app bound to it."""
    python = paddlex_python_or_skip("the genuine PaddleX app needs `pip install -e '.[sim]'`")
    tmp = tmp_path_factory.mktemp("genuine-jobs")
    procs = Processes(tmp)
    try:
        vllm_port, port = free_port(), free_port()
        wait_http_ok(f"http://127.0.0.1:{vllm_port}/health", 60, procs.vllm(vllm_port))
        config = tmp / "pipeline.yaml"
        config.write_text(
            yaml.safe_dump(pipeline_config(f"http://127.0.0.1:{vllm_port}/v1", serving=SERVING))
        )
        argv = ["-m", "sim.paddlex", "--serve", "--device", "cpu", "--port", str(port)]
        proc = procs.start(
            [python, *argv, "--pipeline", str(config), "--host", "127.0.0.1"],
            {"PADDLEX_SIM_LOAD_SECONDS": "0"},
        )
        url = f"http://127.0.0.1:{port}"
        wait_http_ok(f"{url}/health", 120, proc)
        yield url
    finally:
        procs.stop_all()


def test_job_and_ocr_give_the_same_file(
    genuine_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = gateway_config(
        [genuine_url],
        load_balance={"mode": "queue"},
        fanout={"threshold_pages": 4, "max_slice_pages": 4},
        jobs={"dir": str(tmp_path / "jobs"), "poll_interval_s": 0.1},
    )
    gw = RunningGateway(create_app(parse_settings(config)))
    try:
        pdf = tmp_path / "in" / "ten.pdf"
        pdf.parent.mkdir()
        pdf.write_bytes(base64.b64decode(pdf_b64(10)))
        base = ["ocr", str(pdf), "--gateway", gw.url, "--no-progress"]
        assert main([*base, "--out", str(tmp_path / "job")]) == 0
        assert "1 done (10 pages, 1 via jobs)" in capsys.readouterr().err
        assert main([*base, "--out", str(tmp_path / "ocr"), "--jobs", "never"]) == 0
        assert "1 done (10 pages)," in capsys.readouterr().err
    finally:
        gw.stop()
    via_job = (tmp_path / "job" / "ten.md").read_text()
    assert via_job == (tmp_path / "ocr" / "ten.md").read_text()
    assert via_job.count("sim-vllm:") == 10
