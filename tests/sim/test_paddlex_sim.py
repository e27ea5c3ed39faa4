"""The PaddleX simulator: genuine PaddleX serving app, stand-in pipeline asking a vLLM simulator."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from sim.vllm.faults import FAULTS_ENV, FaultInjector, Faults, garble

from .helpers import (
    MODEL,
    REPO,
    Processes,
    free_port,
    normalised_edit_distance,
    pdf_b64,
    pipeline_config,
    png_b64,
    port_open,
    wait_http_ok,
)

WriteYaml = Callable[..., Path]
"""The `write_yaml` fixture: (config, name=...) -> the file written."""
FLEET_SERVING = {"visualize": False, "extra": {"max_num_input_imgs": None}}


class Stack:
    """One vLLM simulator and the PaddleX simulators started against it."""

    def __init__(
        self,
        procs: Processes,
        px_python: str,
        write_yaml: WriteYaml,
        vllm_env: dict[str, str] | None = None,
    ) -> None:
        self.procs, self.px_python, self.write_yaml = procs, px_python, write_yaml
        self.vllm_port = free_port()
        proc = procs.vllm(self.vllm_port, env=vllm_env)
        wait_http_ok(f"http://127.0.0.1:{self.vllm_port}/health", timeout=20, proc=proc)

    @property
    def server_url(self) -> str:
        return f"http://127.0.0.1:{self.vllm_port}/v1"

    def start_paddlex(
        self, config_path: Path, *, load_seconds: float = 0.0, port: int | None = None
    ) -> tuple[subprocess.Popen[str], str]:
        """Run `paddlex --serve ...` as the fleet does; return the process and base URL."""
        port = port or free_port()
        proc = self.procs.start(
            [
                self.px_python,
                "-m",
                "sim.paddlex",
                "--serve",
                "--device",
                "npu",
                "--port",
                str(port),
                "--pipeline",
                str(config_path),
                "--host",
                "127.0.0.1",
            ],
            {"PADDLEX_SIM_LOAD_SECONDS": str(load_seconds)},
        )
        return proc, f"http://127.0.0.1:{port}"

    def paddlex(
        self, serving: dict[str, Any] | None = FLEET_SERVING, server_url: str | None = None
    ) -> str:
        """A ready PaddleX simulator bound to this stack's vLLM (or to `server_url`)."""
        config = pipeline_config(server_url or self.server_url, serving=serving)
        proc, url = self.start_paddlex(self.write_yaml(config, f"p-{free_port()}.yaml"))
        wait_http_ok(f"{url}/health", timeout=60, proc=proc)
        return url


@pytest.fixture
def stack(procs: Processes, px_python: str, write_yaml: WriteYaml) -> Stack:
    """A fresh vLLM simulator for one test."""
    return Stack(procs, px_python, write_yaml)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory, px_python: str) -> Iterator[tuple[Stack, str]]:
    """One vLLM + one PaddleX with the fleet's Serving block, shared by the read-only tests."""
    tmp = tmp_path_factory.mktemp("fleet")
    procs = Processes(tmp)

    def write(config: dict[str, Any], name: str) -> Path:
        (tmp / name).write_text(yaml.safe_dump(config))
        return tmp / name

    try:
        shared = Stack(procs, px_python, write)
        yield shared, shared.paddlex()
    finally:
        procs.stop_all()


def layout_parsing(url: str, file_b64: str, file_type: int, **extra: Any) -> httpx.Response:
    return httpx.post(
        f"{url}/layout-parsing", json={"file": file_b64, "fileType": file_type, **extra}, timeout=60
    )


def test_png_gives_the_real_envelope_and_the_vllm_answer(fleet: tuple[Stack, str]) -> None:
    stack, url = fleet
    health = httpx.get(f"{url}/health").json()
    assert health["errorCode"] == 0 and health["errorMsg"] == "Healthy" and health["logId"]
    response = layout_parsing(url, png_b64(400, 300), 1, logId="req-1")
    assert response.status_code == 200
    body = response.json()
    assert set(body) == {"logId", "result", "errorCode", "errorMsg"}
    assert (body["logId"], body["errorCode"], body["errorMsg"]) == ("req-1", 0, "Success")
    result = body["result"]
    assert result["dataInfo"] == {"width": 400, "height": 300, "type": "image"}
    (page,) = result["layoutParsingResults"]
    assert "outputImages" not in page and "inputImage" not in page  # visualize: false
    assert page["markdown"]["images"] == {}
    text = page["markdown"]["text"]
    assert text.startswith(f"sim-vllm:{stack.vllm_port} model={MODEL}")
    assert "image=jpeg 400x300" in text  # PaddleX sends JPEG crops
    pruned = page["prunedResult"]
    assert "input_path" not in pruned and "page_index" not in pruned
    block = pruned["parsing_res_list"][0]
    assert block["block_label"] == "text" and block["block_content"] == text
    assert block["block_bbox"] == [0, 0, 400, 300]


def test_multi_page_pdf_every_page_asks_the_bound_vllm(fleet: tuple[Stack, str]) -> None:
    stack, url = fleet
    body = layout_parsing(url, pdf_b64(3), 0).json()
    info = body["result"]["dataInfo"]
    assert info["type"] == "pdf" and info["numPages"] == 3 and len(info["pages"]) == 3
    pages = body["result"]["layoutParsingResults"]
    texts = [p["markdown"]["text"] for p in pages]
    assert len(texts) == 3
    assert all(t.startswith(f"sim-vllm:{stack.vllm_port} ") for t in texts)
    assert len({t.split("sha256:")[1] for t in texts}) == 3, "each page sent its own image"
    restructured = httpx.post(
        f"{url}/restructure-pages",
        json={
            "pages": [{"prunedResult": p["prunedResult"], "markdownImages": {}} for p in pages],
            "concatenatePages": True,
        },
    ).json()
    (merged,) = restructured["result"]["layoutParsingResults"]
    assert all(t in merged["markdown"]["text"] for t in texts)


def test_default_serving_truncates_pdfs_at_ten_pages_and_visualizes(stack: Stack) -> None:
    url = stack.paddlex(serving=None)  # no Serving block, like the seed's config
    result = layout_parsing(url, pdf_b64(12), 0).json()["result"]
    assert result["dataInfo"]["numPages"] == 10
    assert len(result["layoutParsingResults"]) == 10
    page = result["layoutParsingResults"][0]
    assert "inputImage" in page and "outputImages" in page  # AppConfig.visualize defaults true


def test_max_num_input_imgs_null_keeps_every_page(fleet: tuple[Stack, str]) -> None:
    stack, url = fleet
    result = layout_parsing(url, pdf_b64(12), 0).json()["result"]
    assert result["dataInfo"]["numPages"] == 12
    texts = [p["markdown"]["text"] for p in result["layoutParsingResults"]]
    assert len(texts) == 12 and all(t.startswith(f"sim-vllm:{stack.vllm_port} ") for t in texts)


def test_protocol_errors(fleet: tuple[Stack, str]) -> None:
    _, url = fleet
    no_type = httpx.post(f"{url}/layout-parsing", json={"file": png_b64()}).json()
    assert no_type["errorCode"] == 422 and no_type["errorMsg"] == "File type cannot be determined"
    bad = layout_parsing(url, "bm90IGFuIGltYWdl", 1)
    assert bad.status_code == 422 and bad.json()["errorMsg"] == "Invalid input file"
    missing = httpx.post(f"{url}/layout-parsing", json={"fileType": 1})
    assert missing.status_code == 422 and missing.json()["errorMsg"].startswith("[")


def test_unreachable_vllm_gives_500_at_inference(stack: Stack) -> None:
    url = stack.paddlex(server_url=f"http://127.0.0.1:{free_port()}/v1")
    response = layout_parsing(url, png_b64(), 1)
    assert response.status_code == 500
    body = response.json()
    assert body["errorCode"] == 500 and body["errorMsg"] == "Internal server error"
    assert httpx.get(f"{url}/health").status_code == 200  # /health does not check the VLM


def test_wrong_model_name_gives_500(stack: Stack, write_yaml: WriteYaml) -> None:
    config = pipeline_config(stack.server_url, serving=FLEET_SERVING, model_name="PaddleOCR-VL")
    proc, url = stack.start_paddlex(write_yaml(config))
    wait_http_ok(f"{url}/health", timeout=60, proc=proc)
    assert layout_parsing(url, png_b64(), 1).status_code == 500


def test_port_opens_only_after_the_pipeline_is_built(stack: Stack, write_yaml: WriteYaml) -> None:
    port = free_port()
    config = pipeline_config(stack.server_url, serving=FLEET_SERVING)
    proc, url = stack.start_paddlex(write_yaml(config), load_seconds=3.0, port=port)
    time.sleep(1.5)
    assert proc.poll() is None and not port_open(port)
    assert wait_http_ok(f"{url}/health", timeout=60, proc=proc) > 0.5


def test_bad_config_fails_to_create_the_pipeline(stack: Stack, write_yaml: WriteYaml) -> None:
    config = pipeline_config(stack.server_url)
    del config["SubModules"]["VLRecognition"]["genai_config"]["server_url"]
    proc, _ = stack.start_paddlex(write_yaml(config))
    assert proc.wait(timeout=60) == 1
    assert proc.stdout is not None and "Failed to create the pipeline" in proc.stdout.read()


def test_unknown_paddlex_option_is_refused(px_python: str) -> None:
    result = subprocess.run(
        [px_python, "-m", "sim.paddlex", "--serve", "--pipeline", "x.yaml", "--devcie", "npu"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2 and "unrecognized arguments: --devcie" in result.stderr


def test_in_process_build_app(procs: Processes, write_yaml: WriteYaml) -> None:
    """`sim.paddlex.app.build_app` serves the genuine app in-process (for gateway tests)."""
    pytest.importorskip("paddlex", reason="PaddleX is not installed in this interpreter")
    from fastapi.testclient import TestClient

    from sim.paddlex.app import build_app

    port = free_port()
    wait_http_ok(f"http://127.0.0.1:{port}/health", timeout=20, proc=procs.vllm(port))
    app = build_app(
        write_yaml(pipeline_config(f"http://127.0.0.1:{port}/v1", serving=FLEET_SERVING))
    )
    with TestClient(app) as client:
        body = client.post("/layout-parsing", json={"file": png_b64(), "fileType": 1}).json()
    assert body["errorMsg"] == "Success"
    assert body["result"]["layoutParsingResults"][0]["markdown"]["text"].startswith(
        f"sim-vllm:{port} "
    )


def test_a_faulty_vllm_garbles_empties_and_fails_paddlex_documents(
    procs: Processes, px_python: str, write_yaml: WriteYaml
) -> None:
    """The genuine PaddleX app passes a bad release's answers on: a garbled answer is a garbled
    markdown, an empty one an empty markdown, a failed one a 500 (one page: one completion)."""
    faults = Faults(garble=0.4, empty=0.2, fail=0.2, seed=5)
    env = {FAULTS_ENV: json.dumps({"garble": 0.4, "empty": 0.2, "fail": 0.2, "seed": 5})}
    stack = Stack(procs, px_python, write_yaml, vllm_env=env)
    url = stack.paddlex()
    injector = FaultInjector(faults)
    expected = [injector.next().kind for _ in range(10)]
    assert expected[0] is None and {"garble", "empty", "fail"} <= set(expected), expected
    image = png_b64(400, 300)
    responses = [layout_parsing(url, image, 1) for _ in expected]
    good = responses[0].json()["result"]["layoutParsingResults"][0]["markdown"]["text"]
    assert good.startswith(f"sim-vllm:{stack.vllm_port} model={MODEL}")
    for number, (kind, response) in enumerate(zip(expected, responses, strict=True)):
        if kind == "fail":
            assert response.status_code == 500, number
            assert response.json()["errorMsg"] == "Internal server error"
            continue
        assert response.status_code == 200, (number, response.text)
        (page,) = response.json()["result"]["layoutParsingResults"]
        text = page["markdown"]["text"]
        if kind is None:
            assert text == good, number
        elif kind == "empty":
            assert text == "", (number, text)
        else:
            assert text == garble(good, faults.seed, number), (number, text)
            assert normalised_edit_distance(text, good) > 0.5, (number, text)
