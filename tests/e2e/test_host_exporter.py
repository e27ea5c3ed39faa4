"""The host exporter (monitoring/exporter.py) against the real Docker engine: a container of
one stack that holds memory is reported with its labels, a stopped one as not running, another
stack's not at all."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.ports import free_port
from tests.waiting import wait_for

pytestmark = pytest.mark.docker
EXPORTER = Path(__file__).resolve().parents[2] / "monitoring" / "exporter.py"
IMAGE = "paddleocr-fleet/base:bookworm"
HOLD = "import time; x = bytearray(80_000_000); x[::4096] = b'1' * len(x[::4096]); time.sleep(120)"


def docker(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["docker", *args], capture_output=True, text=True, check=False)


def scrape(url: str) -> dict[str, dict[str, float]]:
    """metric name -> container -> value."""
    out: dict[str, dict[str, float]] = {}
    for family in text_string_to_metric_families(httpx.get(url, timeout=10).text):
        for sample in family.samples:
            key = sample.labels.get("container", "")
            out.setdefault(sample.name, {})[key] = sample.value
    return out


def test_memory_and_state_of_one_stacks_containers(docker_engine) -> None:
    stack = f"paddleocr-fleet/exporter-{os.urandom(3).hex()}"
    names = [f"exporter-test-{os.urandom(3).hex()}-{i}" for i in range(2)]
    labels = [f"stack={stack}", "role=paddlex", "card=3", "host=local"]
    labels = [arg for label in labels for arg in ("--label", f"paddleocr-fleet.{label}")]
    port = free_port()
    exporter = subprocess.Popen(
        [sys.executable, str(EXPORTER), "--port", str(port), "--stack", stack,
         "--address", "127.0.0.1"],
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        for name in names:
            run = docker("run", "-d", "--name", name, *labels, IMAGE, "python3", "-c", HOLD)
            assert run.returncode == 0, run.stderr
        docker("run", "-d", "--name", names[0] + "-other", IMAGE, "sleep", "120")
        url = f"http://127.0.0.1:{port}/metrics"
        memory_series = "paddleocr_fleet_container_memory_bytes"
        assert wait_for(lambda: len(scrape(url).get(memory_series, {})) == 2, 20)
        time.sleep(1)  # the bytearray is touched
        got = scrape(url)
        memory = got[memory_series]
        assert set(memory) == set(names)
        assert all(70_000_000 < value < 300_000_000 for value in memory.values()), memory
        assert got["paddleocr_fleet_exporter_docker_up"][""] == 1
        docker("stop", "-t", "1", names[1])
        got = scrape(url)
        assert got["paddleocr_fleet_container_running"] == {names[0]: 1, names[1]: 0}
        assert set(got[memory_series]) == {names[0]}
    finally:
        exporter.terminate()
        exporter.wait(10)
        for name in (*names, names[0] + "-other"):
            docker("rm", "-f", name)
