"""The vLLM simulator: its command line, its loading behaviour and its HTTP API."""

from __future__ import annotations

import subprocess
import sys
import time

import httpx
import pytest

from sim.vllm.args import UsageError, parse_serve
from sim.vllm.images import describe_image_url, image_size

from .helpers import MODEL, REPO, VLLM_FLAGS, free_port, png_b64, port_open, wait_http_ok


def run_vllm_cli(*args: str) -> subprocess.CompletedProcess[str]:
    """Run `python -m sim.vllm ARGS` and capture its output (for arguments that fail fast)."""
    return subprocess.run(
        [sys.executable, "-m", "sim.vllm", *args],
        cwd=REPO,
        text=True,
        capture_output=True,
        timeout=30,
        check=False,
    )


def test_architecture_launch_command_parses() -> None:
    args = parse_serve([f"/data/{MODEL}", *VLLM_FLAGS, "--port", "9031"])
    assert args.served_model_name == MODEL
    assert args.port == 9031
    assert args.gpu_memory_utilization == 0.45
    assert args.compilation_config == {"cudagraph_mode": "FULL_DECODE_ONLY"}
    assert args.additional_config == {"enable_cpu_binding": True}
    assert args.trust_remote_code and not args.enable_prefix_caching


def test_optional_flags_and_equals_form() -> None:
    args = parse_serve(
        [
            "/m",
            "--host=127.0.0.1",
            "--max-model-len",
            "8192",
            "--max_num_seqs=64",
            "--additional-config",
            "{}",
        ]
    )
    assert (args.host, args.max_model_len, args.max_num_seqs) == ("127.0.0.1", 8192, 64)
    assert args.served_model_name == "/m"  # vLLM's default: the model path


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["/m", "--gpu-memory-utilisation", "0.4"],
            "unrecognized arguments: --gpu-memory-utilisation",
        ),
        (["/m", "--enforce-eager"], "unrecognized arguments: --enforce-eager"),
        (["/m", "--gpu-memory-utilization", "1.5"], "must be in (0, 1]"),
        (["/m", "--gpu-memory-utilization", "0"], "must be in (0, 1]"),
        (["/m", "--gpu-memory-utilization", "half"], "--gpu-memory-utilization"),
        (["/m", "--compilation-config", "{cudagraph_mode:FULL}"], "not valid JSON"),
        (["/m", "--additional_config", "[1]"], "must be a JSON object"),
        (["/m", "--port", "70000"], "not a TCP port"),
        (["/m", "--port"], "--port needs a value"),
        (["/m", "--trust-remote-code=yes"], "takes no value"),
        (["--port", "1"], "model path"),
        (["/m", "/n"], "unexpected extra arguments"),
    ],
)
def test_bad_arguments_are_refused(argv: list[str], message: str) -> None:
    with pytest.raises(UsageError, match=None) as info:
        parse_serve(argv)
    assert message in str(info.value)


def test_unknown_flag_exits_non_zero_with_clear_message() -> None:
    result = run_vllm_cli(
        "serve", f"/data/{MODEL}", *VLLM_FLAGS, "--port", "9031", "--max-num-batched-token", "16384"
    )
    assert result.returncode == 2
    assert "unrecognized arguments: --max-num-batched-token" in result.stderr
    assert not result.stdout


def test_only_serve_is_a_command() -> None:
    assert run_vllm_cli("bench", "/m").returncode == 2


def test_image_description_png_and_jpeg() -> None:
    import base64
    import io

    from PIL import Image

    assert describe_image_url("data:image/png;base64," + png_b64(321, 123)).startswith(
        "png 321x123 sha256:"
    )
    buf = io.BytesIO()
    Image.new("RGB", (640, 480), "white").save(buf, "JPEG")
    assert image_size(buf.getvalue()) == ("jpeg", 640, 480)
    jpeg_url = "data:image/jpeg;base64," + base64.b64encode(buf.getvalue()).decode()
    assert describe_image_url(jpeg_url).startswith("jpeg 640x480")


def test_refuses_connections_while_loading_then_serves(procs) -> None:
    port = free_port()
    proc = procs.vllm(port, load_seconds=2.0)
    time.sleep(0.8)
    assert proc.poll() is None
    assert not port_open(port), "the port must stay closed while the model loads"
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"http://127.0.0.1:{port}/health", timeout=1)
    waited = wait_http_ok(f"http://127.0.0.1:{port}/health", timeout=20, proc=proc)
    assert waited > 0.5
    health = httpx.get(f"http://127.0.0.1:{port}/health")
    assert health.status_code == 200 and health.content == b""


@pytest.fixture
def vllm_url(procs) -> str:
    """A loaded vLLM simulator on loopback."""
    port = free_port()
    proc = procs.vllm(port)
    wait_http_ok(f"http://127.0.0.1:{port}/health", timeout=20, proc=proc)
    return f"http://127.0.0.1:{port}"


def test_models_lists_the_served_name(vllm_url: str) -> None:
    body = httpx.get(f"{vllm_url}/v1/models").json()
    assert body["object"] == "list"
    (card,) = body["data"]
    assert card["id"] == MODEL and card["object"] == "model" and card["owned_by"] == "vllm"
    assert card["root"] == f"/data/{MODEL}" and card["parent"] is None
    assert isinstance(card["max_model_len"], int) and isinstance(card["permission"], list)


def test_chat_completion_names_port_and_echoes_request(vllm_url: str) -> None:
    port = vllm_url.rsplit(":", 1)[1]
    request = {
        "model": MODEL,
        "messages": [
            {
                "role": "user",
                "content": [
                    {
                        "type": "image_url",
                        "image_url": {"url": "data:image/png;base64," + png_b64(50, 40)},
                    },
                    {"type": "text", "text": "OCR:"},
                ],
            }
        ],
        "temperature": 0,
        "max_completion_tokens": 4096,
    }
    response = httpx.post(f"{vllm_url}/v1/chat/completions", json=request)
    assert response.status_code == 200
    body = response.json()
    assert body["object"] == "chat.completion" and body["model"] == MODEL
    choice = body["choices"][0]
    assert choice["finish_reason"] == "stop" and choice["message"]["role"] == "assistant"
    text = choice["message"]["content"]
    assert text.startswith(f"sim-vllm:{port} ")
    assert 'prompt="OCR:"' in text and "image=png 50x40 sha256:" in text
    assert body["usage"]["total_tokens"] > 0


def test_wrong_model_is_404_with_vllm_message(vllm_url: str) -> None:
    response = httpx.post(
        f"{vllm_url}/v1/chat/completions",
        json={"model": "PaddleOCR-VL-1.5", "messages": [{"role": "user", "content": "hi"}]},
    )
    assert response.status_code == 404
    error = response.json()["error"]
    assert error["message"] == "The model `PaddleOCR-VL-1.5` does not exist."
    assert error["type"] == "NotFoundError" and error["code"] == 404


def test_bad_body_is_400(vllm_url: str) -> None:
    response = httpx.post(
        f"{vllm_url}/v1/chat/completions",
        content=b"{not json",
        headers={"Content-Type": "application/json"},
    )
    assert response.status_code == 400
    assert response.json()["error"]["type"] == "BadRequestError"
