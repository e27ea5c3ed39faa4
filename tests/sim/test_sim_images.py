"""Both simulator images on the local Docker engine, started the way the fleet starts them."""

from __future__ import annotations

import shlex
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
import yaml

from tests.real_components import unavailable

from .helpers import MODEL, REPO, VLLM_FLAGS, free_ports, pdf_b64, pipeline_config, png_b64

pytestmark = pytest.mark.docker

IMAGES = (
    "paddleocr-fleet/base:bookworm",
    "paddleocr-fleet/vllm-sim:latest",
    "paddleocr-fleet/paddlex-sim:latest",
)


def docker(*args: str, timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess:
    """Run the docker CLI."""
    return subprocess.run(
        ["docker", *args], capture_output=True, text=True, timeout=timeout, check=check
    )


@pytest.fixture(scope="module")
def engine() -> None:
    """A Docker engine with the simulator images; skip only if no engine can start."""
    if shutil.which("docker") is None or docker("info", check=False).returncode != 0:
        up = subprocess.run(
            ["bash", str(REPO / ".ci/docker-up.sh")],
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        if up.returncode != 0:
            unavailable("Docker", f"no engine could start: {(up.stderr or up.stdout)[-1500:]}")
    missing = [i for i in IMAGES if docker("image", "inspect", i, check=False).returncode]
    if missing:
        build = subprocess.run(
            ["bash", str(REPO / ".ci/build-images.sh"), "--only", "base,vllm,paddlex"],
            capture_output=True,
            text=True,
            timeout=1800,
            check=False,
        )
        assert build.returncode == 0, f"building {missing} failed:\n{build.stderr[-3000:]}"


@pytest.fixture
def containers(engine: None) -> Iterator[list[str]]:
    """Names of containers started by a test; all removed afterwards."""
    names: list[str] = []
    yield names
    if names:
        docker("rm", "-f", *names, check=False)
    leftover = docker("ps", "-aq", *[f"--filter=name=^{n}$" for n in names], check=False)
    assert not leftover.stdout.strip(), "containers left behind"


def wait_ok(url: str, timeout: float, logs: Callable[[], str]) -> None:
    """Poll until `url` answers 200, or fail with the container's log."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if httpx.get(url, timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.3)
    pytest.fail(f"{url} not ready after {timeout}s:\n{logs()[-3000:]}")


def test_images_serve_over_host_network(containers: list[str], tmp_path: Path) -> None:
    vllm_port, px_port = free_ports(2)
    vllm_name = f"vllm-sim-paddleocr-{vllm_port}-sim-0"
    px_name = f"paddle-{px_port}-sim-0"
    containers += [vllm_name, px_name]
    launch = " ".join(
        shlex.quote(a)
        for a in ["vllm", "serve", f"/data/{MODEL}", *VLLM_FLAGS, "--port", str(vllm_port)]
    )
    docker(
        "run",
        "-d",
        "--name",
        vllm_name,
        "--network",
        "host",
        "-e",
        "VLLM_SIM_LOAD_SECONDS=1",
        "paddleocr-fleet/vllm-sim:latest",
        "bash",
        "-c",
        f"{launch} > /tmp/vllm-{vllm_port}.log 2>&1",
    )
    config_dir = tmp_path / "etc"
    config_dir.mkdir()
    yaml_name = f"pipeline_config_vllm-{px_port}.yaml"

    (config_dir / yaml_name).write_text(
        yaml.safe_dump(
            pipeline_config(
                f"http://127.0.0.1:{vllm_port}/v1",
                serving={"visualize": False, "extra": {"max_num_input_imgs": None}},
            )
        )
    )
    docker(
        "run",
        "-d",
        "--name",
        px_name,
        "--network",
        "host",
        "-v",
        f"{config_dir}:/etc/paddleocr-fleet:ro",
        "paddleocr-fleet/paddlex-sim:latest",
    )
    wait_ok(
        f"http://127.0.0.1:{vllm_port}/health",
        60,
        lambda: docker("exec", vllm_name, "cat", f"/tmp/vllm-{vllm_port}.log", check=False).stdout,
    )
    models = httpx.get(f"http://127.0.0.1:{vllm_port}/v1/models").json()
    assert models["data"][0]["id"] == MODEL
    docker(
        "exec",
        "-d",
        px_name,
        "bash",
        "-c",
        f"source ~/.bashrc && paddlex --serve --device cpu --port {px_port} "
        f"--pipeline /etc/paddleocr-fleet/{yaml_name} > /tmp/paddle-{px_port}.log 2>&1 & wait",
    )
    wait_ok(
        f"http://127.0.0.1:{px_port}/health",
        90,
        lambda: docker("exec", px_name, "cat", f"/tmp/paddle-{px_port}.log", check=False).stdout,
    )

    png = httpx.post(
        f"http://127.0.0.1:{px_port}/layout-parsing",
        json={"file": png_b64(), "fileType": 1},
        timeout=60,
    ).json()
    assert png["errorCode"] == 0 and png["errorMsg"] == "Success"
    (page,) = png["result"]["layoutParsingResults"]
    assert page["markdown"]["text"].startswith(f"sim-vllm:{vllm_port} ")

    pdf = httpx.post(
        f"http://127.0.0.1:{px_port}/layout-parsing",
        json={"file": pdf_b64(12), "fileType": 0},
        timeout=60,
    ).json()
    assert pdf["result"]["dataInfo"]["numPages"] == 12
    texts = [p["markdown"]["text"] for p in pdf["result"]["layoutParsingResults"]]
    assert len(texts) == 12 and all(t.startswith(f"sim-vllm:{vllm_port} ") for t in texts)

    # `docker stop` sends SIGTERM and SIGKILLs (exit code 137) only after the grace period, so
    # any other exit code means the container ended on SIGTERM. The grace period is long so that
    # a slow machine cannot make a container that does stop on SIGTERM look as if it did not.
    docker("stop", "-t", "30", vllm_name, px_name)
    for name in (vllm_name, px_name):
        state = docker("inspect", "-f", "{{.State.Status}} {{.State.ExitCode}}", name).stdout
        status, code = state.split()
        assert status == "exited" and code != "137", f"{name} did not stop on SIGTERM: {state}"
