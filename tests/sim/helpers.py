"""Helpers for the simulator tests: real processes on loopback, documents, pipeline YAMLs."""

from __future__ import annotations

import base64
import io
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from PIL import Image, ImageDraw

from components.render import PIPELINE_TEMPLATE
from tests.ports import free_port as free_port
from tests.ports import free_ports as free_ports
from tests.real_components import unavailable

REPO = Path(__file__).resolve().parents[2]
MODEL = "PaddleOCR-VL-1.5-0.9B"
VLLM_FLAGS = [
    "--served-model-name",
    MODEL,
    "--max-num-batched-tokens",
    "16384",
    "--trust-remote-code",
    "--no-enable-prefix-caching",
    "--mm-processor-cache-gb",
    "0",
    "--gpu-memory-utilization",
    "0.45",
    "--compilation-config",
    '{"cudagraph_mode":"FULL_DECODE_ONLY"}',
    "--additional_config",
    '{"enable_cpu_binding":true}',
]


def port_open(port: int) -> bool:
    """True when something accepts connections on 127.0.0.1:port."""
    with socket.socket() as sock:
        sock.settimeout(0.2)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def wait_http_ok(url: str, timeout: float, proc: subprocess.Popen[str] | None = None) -> float:
    """Poll `url` until it answers 200; return the seconds waited. Fails on timeout/exit."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if proc is not None and proc.poll() is not None:
            out = proc.stdout.read() if proc.stdout else ""
            pytest.fail(f"process exited with {proc.returncode} before {url} answered:\n{out}")
        try:
            if httpx.get(url, timeout=1).status_code == 200:
                return time.monotonic() - start
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    pytest.fail(f"{url} did not answer 200 within {timeout}s")


def paddlex_python() -> str | None:
    """An interpreter that has the genuine PaddleX serving package, or None."""
    candidates = [os.environ.get("PADDLEX_SIM_PYTHON"), sys.executable]
    for python in filter(None, candidates):
        probe = subprocess.run(
            [python, "-c", "import paddlex.inference.serving.basic_serving"],
            capture_output=True,
            timeout=60,
            check=False,
        )
        if probe.returncode == 0:
            return python
    return None


class Processes:
    """Starts simulator processes and stops them all at the end of a test."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.procs: list[subprocess.Popen[str]] = []

    def start(self, argv: list[str], env: dict[str, str] | None = None) -> subprocess.Popen[str]:
        """Run `argv` from the repository root with the repo on PYTHONPATH."""
        full_env = {
            **os.environ,
            "PYTHONPATH": str(REPO),
            "PADDLE_PDX_CACHE_HOME": str(self.tmp_path / "paddlex-cache"),
            **(env or {}),
        }
        proc = subprocess.Popen(
            argv,
            cwd=REPO,
            env=full_env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.procs.append(proc)
        return proc

    def vllm(
        self,
        port: int,
        load_seconds: float = 0.0,
        extra: list[str] | None = None,
        env: dict[str, str] | None = None,
    ) -> subprocess.Popen[str]:
        """Start the vLLM simulator with the fleet's launch flags on 127.0.0.1:port (`env`: more
        environment, e.g. `{"VLLM_SIM_FAULTS": '{"garble": 0.25}'}`)."""
        argv = [
            sys.executable,
            "-m",
            "sim.vllm",
            "serve",
            f"/data/{MODEL}",
            *VLLM_FLAGS,
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            *(extra or []),
        ]
        return self.start(argv, {"VLLM_SIM_LOAD_SECONDS": str(load_seconds), **(env or {})})

    def stop_all(self) -> None:
        """Terminate every started process (kill if it does not stop in 10 s)."""
        for proc in self.procs:
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def pipeline_config(
    server_url: str, *, serving: dict[str, Any] | None = None, model_name: str = MODEL
) -> dict[str, Any]:
    """The project's pipeline template bound to `server_url` and `model_name`, with `serving`
    as its Serving block (none when None).

    >>> pipeline_config("http://127.0.0.1:9000/v1")["SubModules"]["VLRecognition"]["model_name"]
    'PaddleOCR-VL-1.5-0.9B'
    """
    config: dict[str, Any] = yaml.safe_load(PIPELINE_TEMPLATE.read_text(encoding="utf-8"))
    recognition = config["SubModules"]["VLRecognition"]
    recognition["model_name"] = model_name
    recognition["genai_config"]["server_url"] = server_url
    config.pop("Serving", None)
    if serving is not None:
        config["Serving"] = serving
    return config


def png_b64(width: int = 400, height: int = 300, text: str = "hello") -> str:
    """A small PNG with some text on it, as raw base64."""
    img = Image.new("RGB", (width, height), "white")
    ImageDraw.Draw(img).text((20, 20), text, fill="black")
    buf = io.BytesIO()
    img.save(buf, "PNG")
    return base64.b64encode(buf.getvalue()).decode()


def pdf_b64(pages: int) -> str:
    """A PDF of `pages` distinct pages (each a different shade, numbered), as raw base64."""
    images = []
    for i in range(pages):
        img = Image.new("RGB", (300, 400), (255, 255 - 10 * i, 255))
        ImageDraw.Draw(img).text((30, 30), f"page {i + 1}", fill="black")
        images.append(img)
    buf = io.BytesIO()
    images[0].save(buf, "PDF", save_all=True, append_images=images[1:], resolution=72)
    return base64.b64encode(buf.getvalue()).decode()


def paddlex_python_or_skip(message: str) -> str:
    """:func:`paddlex_python`, else skip with ``message`` (fail under CI, where it must run)."""
    python = paddlex_python()
    if python is None:
        unavailable("PaddleX", message)
    return python


def normalised_edit_distance(a: str, b: str) -> float:
    """Levenshtein distance of `a` and `b` over the longer one's length (0: equal, 1: nothing
    in common); two empty texts are at 0.

    >>> normalised_edit_distance("kitten", "sitting")
    0.42857142857142855
    """
    if not a and not b:
        return 0.0
    previous = list(range(len(b) + 1))
    for i, char_a in enumerate(a, 1):
        current = [i]
        for j, char_b in enumerate(b, 1):
            current.append(
                min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (char_a != char_b))
            )
        previous = current
    return previous[-1] / max(len(a), len(b))
