"""Docker parts against the real engine (skipped, saying why, where none answers)."""

from __future__ import annotations

import json
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from fleetctl.cli import main
from tests.fleetctl.conftest import one_card_topology
from tests.ports import free_port
from tests.real_components import unavailable

IMAGE = "paddleocr-fleet/base:bookworm"  # the sim base image (python3 inside)

pytestmark = pytest.mark.docker

SERVER = """import http.server as h
class H(h.BaseHTTPRequestHandler):
    def do_GET(s):
        s.send_response(200); s.send_header("Content-Type", "application/json"); s.end_headers()
        s.wfile.write(b"{\\"errorCode\\": 0, \\"errorMsg\\": \\"Healthy\\"}")
print("fake paddlex listening", flush=True)
h.HTTPServer(("127.0.0.1", PORT), H).serve_forever()
"""


def _docker_ok() -> str | None:
    if not shutil.which("docker"):
        return "no docker CLI"
    if subprocess.run(["docker", "info"], capture_output=True, check=False).returncode != 0:
        return "no Docker engine answers (run .ci/docker-up.sh)"
    if (
        subprocess.run(
            ["docker", "image", "inspect", IMAGE], capture_output=True, check=False
        ).returncode
        != 0
    ):
        return f"image {IMAGE} not built (sim/base/build.sh)"
    return None


@pytest.fixture
def container() -> Iterator[tuple[str, int]]:
    why = _docker_ok()
    if why:
        unavailable("Docker", why)
    port = free_port()
    name = f"fleetctl-test-paddle-{port}-{uuid.uuid4().hex[:6]}"
    subprocess.run(
        [
            "docker",
            "create",
            "--init",
            "--name",
            name,
            "--network",
            "host",
            IMAGE,
            "sleep",
            "infinity",
        ],
        check=True,
        capture_output=True,
    )
    try:
        yield name, port
    finally:
        subprocess.run(["docker", "rm", "-f", name], capture_output=True, check=False)


def test_start_all_status_restart_logs(
    container: tuple[str, int], tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    name, port = container
    start = f"docker exec -d {name} python3 -c '{SERVER.replace('PORT', str(port))}'"
    topo = one_card_topology(
        [
            {
                "port": free_port(),
                "container": name,
                "paddlex": [{"port": port, "container": name, "start_command": start}],
            }
        ]
    )
    outputs = tmp_path / "outputs.json"
    outputs.write_text(json.dumps({"topology": topo}))
    common = ["--outputs", str(outputs), "--kind", "paddlex"]
    assert main(["status", *common, "--json"]) == 1
    row = json.loads(capfd.readouterr().out)["instances"][0]
    assert row["container_state"].startswith("created") and not row["ok"]
    assert main(["start-all", *common, "--wait", "20"]) == 0
    out = capfd.readouterr().out
    assert f"docker start {name} (was created)" in out and "docker exec -d" in out
    assert main(["status", *common, "--json"]) == 0
    row = json.loads(capfd.readouterr().out)["instances"][0]
    assert row["container_state"] == "running" and row["health"] == "ok"
    assert main(["restart", "paddlex", str(port), "--outputs", str(outputs), "--wait", "20"]) == 0
    capfd.readouterr()
    assert main(["logs", "paddlex", str(port), "--outputs", str(outputs), "-n", "5"]) == 0
