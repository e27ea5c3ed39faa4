"""The fleet on a real Docker engine, in sim mode, applied from the stack program's own record.

`cards = 2`: 4 vLLM simulators, 12 PaddleX simulators (the genuine PaddleX serving app with a
stand-in pipeline that calls its vLLM) and the gateway. The tests run in file order against one
fleet; the last one tears it down.
"""

from __future__ import annotations

import base64
import io
import json
import re
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from PIL import Image

from components.plan import build_plan
from components.settings import load_settings
from tests.e2e.engine import StandInEngine, temp_model_dir
from tests.pulumi_harness import REPO, record_stack
from tests.sim.helpers import wait_http_ok

pytestmark = pytest.mark.docker

VLLM_BASE, PADDLEX_BASE, GATEWAY_PORT = 19025, 19120, 19101


def fleet_config(model_dir: str) -> dict[str, str]:
    return {
        "accelerator": "sim",
        "cards": "2",
        "modelDir": model_dir,
        "vllmBasePort": str(VLLM_BASE),
        "paddlexBasePort": str(PADDLEX_BASE),
        "gatewayPort": str(GATEWAY_PORT),
        "gatewayImage": "paddleocr-fleet/gateway:latest",
        "vllmReadyTimeout": "180",
        "paddlexReadyTimeout": "180",
        "readyPollInterval": "1",
    }


class Fleet:
    def __init__(self, config: dict[str, str]):
        self.settings = load_settings(config)
        self.plan = build_plan(self.settings)
        self.recording = record_stack(config)
        self.engine = StandInEngine(self.recording)
        self.gateway = self.plan.gateway.url
        self.apply_seconds = 0.0

    def up(self) -> None:
        self.engine.destroy()  # leftovers of an interrupted run
        started = time.monotonic()
        self.applied = self.engine.apply()
        self.apply_seconds = time.monotonic() - started


@pytest.fixture(scope="module")
def fleet(docker_engine):
    fleet = Fleet(fleet_config(temp_model_dir()))
    try:
        fleet.up()
        yield fleet
    finally:
        fleet.engine.destroy()


def png_bytes(text: str = "hello") -> bytes:
    image = Image.new("RGB", (160, 60), "white")
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


def pdf_bytes(pages: int) -> bytes:
    images = [Image.new("RGB", (120, 160), (255, 255, 255 - i)) for i in range(pages)]
    buffer = io.BytesIO()
    images[0].save(buffer, format="PDF", save_all=True, append_images=images[1:])
    return buffer.getvalue()


def vllm_port_named_in(text: str) -> int:
    ports = {int(p) for p in re.findall(r"sim-vllm:(\d+)", text)}
    assert len(ports) == 1, f"expected one answering vLLM in {text[:300]!r}"
    return ports.pop()


def binding(fleet: Fleet) -> dict[str, int]:
    return {p.url: p.vllm.port for p in fleet.plan.paddlex}


def test_startup_ran_in_order_through_the_programs_own_readiness_commands(fleet, capsys):
    steps = {s.name: s for s in fleet.applied.steps}
    for paddlex in fleet.plan.paddlex:
        prefix = f"local-card-{paddlex.card}"
        vllm_ready = steps[f"{prefix}-vllm-{paddlex.vllm.port}-ready"]
        start = steps[f"{prefix}-paddlex-{paddlex.port}-start"]
        ready = steps[f"{prefix}-paddlex-{paddlex.port}-ready"]
        assert vllm_ready.ok and start.ok and ready.ok
        assert start.started >= vllm_ready.ended, f"{paddlex.container_name} started too early"
        assert ready.started >= start.ended
        assert "ready at" in vllm_ready.output
    gateway_steps = [s for s in fleet.applied.steps if s.name.startswith("local-gateway")]
    last_paddlex_ready = max(
        s.ended for s in fleet.applied.steps if "-paddlex-" in s.name and s.name.endswith("ready")
    )
    assert min(s.started for s in gateway_steps) >= last_paddlex_ready
    with capsys.disabled():
        print(f"\n[e2e] fleet of 2 sim cards up in {fleet.apply_seconds:.1f} s")


def test_each_pipeline_config_names_its_bound_vllm_inside_the_container(fleet):
    for paddlex in fleet.plan.paddlex:
        config = subprocess.run(
            ["docker", "exec", paddlex.container_name, "cat", paddlex.pipeline_config_path],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        assert f"server_url: {paddlex.vllm.local_url}/v1" in config
        assert "max_num_input_imgs: null" in config


def test_ocr_a_png_through_the_gateway(fleet):
    response = httpx.post(
        f"{fleet.gateway}/ocr-file",
        files={"file": ("doc.png", png_bytes(), "image/png")},
        timeout=60,
    )
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["upstream"] in binding(fleet)
    assert vllm_port_named_in(body["text"]) == binding(fleet)[body["upstream"]]


def test_ocr_a_multipage_pdf_is_one_document_with_every_page(fleet):
    document = pdf_bytes(12)  # over PaddleX's default 10-page limit
    response = httpx.post(
        f"{fleet.gateway}/ocr",
        json={"base64": base64.b64encode(document).decode()},
        timeout=120,
    )
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["pages"] == 12
    assert vllm_port_named_in(body["text"]) == binding(fleet)[body["upstream"]]


def _ocr(client: httpx.Client, gateway: str) -> httpx.Response:
    return client.post(
        f"{gateway}/ocr",
        json={"base64": base64.b64encode(png_bytes()).decode()},
        timeout=120,
    )


def test_every_paddlex_serves_and_answers_from_the_vllm_its_config_names(fleet):
    seen: dict[str, set[int]] = {}
    with httpx.Client() as client, ThreadPoolExecutor(max_workers=24) as pool:
        for _ in range(8):
            for response in pool.map(lambda _: _ocr(client, fleet.gateway), range(48)):
                assert response.status_code == 200, response.text
                body = response.json()
                seen.setdefault(body["upstream"], set()).add(vllm_port_named_in(body["text"]))
            if len(seen) == len(fleet.plan.paddlex):
                break
    assert set(seen) == set(binding(fleet)), "some PaddleX instance never served"
    assert all(len(ports) == 1 for ports in seen.values()), seen
    assert {url: next(iter(ports)) for url, ports in seen.items()} == binding(fleet)


def fleetctl(fleet: Fleet, tmp_path, *args: str) -> subprocess.CompletedProcess:
    outputs = tmp_path / "outputs.json"
    outputs.write_text(json.dumps(fleet.recording.outputs))
    return subprocess.run(
        [sys.executable, "-m", "fleetctl", *args[:1], "--outputs", str(outputs), *args[1:]],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def test_fleetctl_status_and_verify_see_a_healthy_fleet(fleet, tmp_path):
    status = fleetctl(fleet, tmp_path, "status", "--json")
    assert status.returncode == 0, status.stdout + status.stderr
    rows = json.loads(status.stdout)
    rows = rows["instances"] if isinstance(rows, dict) else rows
    containers = {row["container"] for row in rows}
    assert {p.container_name for p in fleet.plan.paddlex} <= containers
    assert {v.container_name for v in fleet.plan.vllm} <= containers
    verify = fleetctl(fleet, tmp_path, "verify")
    assert verify.returncode == 0, verify.stdout + verify.stderr


def test_fleetctl_restarts_a_paddlex_and_batch_ocrs_a_folder(fleet, tmp_path):
    paddlex = fleet.plan.paddlex[7]
    restart = fleetctl(fleet, tmp_path, "restart", "paddlex", str(paddlex.port), "--wait", "120")
    assert restart.returncode == 0, restart.stdout + restart.stderr
    assert httpx.get(f"{paddlex.url}/health", timeout=5).status_code == 200
    inbox = tmp_path / "inbox" / "2026"
    inbox.mkdir(parents=True)
    for i in range(3):
        (inbox / f"scan-{i}.png").write_bytes(png_bytes())
    (inbox / "contract.pdf").write_bytes(pdf_bytes(3))
    out = tmp_path / "markdown"
    batch = fleetctl(
        fleet,
        tmp_path,
        "ocr",
        str(tmp_path / "inbox"),
        "--out",
        str(out),
        "--no-progress",
        "--gateway",
        fleet.gateway,
    )
    assert batch.returncode == 0, batch.stdout + batch.stderr
    written = sorted(p.relative_to(out).as_posix() for p in out.rglob("*.md"))
    assert written == ["2026/contract.md", "2026/scan-0.md", "2026/scan-1.md", "2026/scan-2.md"]
    assert "sim-vllm:" in (out / "2026" / "contract.md").read_text()


def test_killing_a_paddlex_container_mid_traffic_costs_the_clients_nothing(fleet):
    victim = fleet.plan.paddlex[3]
    after_kill = 60  # responses that must still come back once `docker kill` has returned
    statuses: list[object] = []  # status codes, or the exception a request raised
    lock = threading.Lock()
    killed = threading.Event()
    answered_at_kill = 0
    give_up = time.monotonic() + 600

    def worker(client: httpx.Client) -> None:
        # Open-ended traffic: keep asking until the kill is done and enough answers came after.
        while time.monotonic() < give_up:
            with lock:
                if killed.is_set() and len(statuses) >= answered_at_kill + after_kill:
                    return
            try:
                outcome: object = _ocr(client, fleet.gateway).status_code
            except Exception as exc:  # any failure of a request is an answer the client lost
                outcome = repr(exc)
            with lock:
                statuses.append(outcome)

    with httpx.Client() as client:
        workers = [threading.Thread(target=worker, args=(client,)) for _ in range(6)]
        for thread in workers:
            thread.start()
        try:
            while len(statuses) < 20 and time.monotonic() < give_up:
                time.sleep(0.01)
            assert len(statuses) >= 20, "no traffic before the kill"
            subprocess.run(
                ["docker", "kill", victim.container_name], capture_output=True, check=True
            )
        finally:
            with lock:
                answered_at_kill = len(statuses)
                killed.set()
            for thread in workers:
                thread.join(timeout=max(1.0, give_up - time.monotonic() + 130))
    assert not any(thread.is_alive() for thread in workers), "traffic did not finish"
    assert len(statuses) >= answered_at_kill + after_kill, "too few answers after the kill"
    assert statuses == [200] * len(statuses), [s for s in statuses if s != 200][:5]
    deadline = time.monotonic() + 40  # active probes: 3 failures at the configured interval
    state = "healthy"
    while state == "healthy" and time.monotonic() < deadline:
        upstreams = httpx.get(f"{fleet.gateway}/upstreams", timeout=10).json()["upstreams"]
        state = next(u["state"] for u in upstreams if u["url"] == victim.url)
        time.sleep(0.5)
    assert state in ("unhealthy", "ejected")


def test_a_restarted_paddlex_container_serves_again_without_a_new_start_command(fleet):
    paddlex = fleet.plan.paddlex[5]
    subprocess.run(["docker", "restart", paddlex.container_name], capture_output=True, check=True)
    wait_http_ok(f"{paddlex.url}/health", 90)  # nothing but the container itself restarts it
    response = httpx.post(
        f"{paddlex.url}/layout-parsing",
        json={"file": base64.b64encode(png_bytes()).decode(), "fileType": 1, "visualize": False},
        timeout=60,
    )
    assert response.status_code == 200
    markdown = response.json()["result"]["layoutParsingResults"][0]["markdown"]["text"]
    assert vllm_port_named_in(markdown) == paddlex.vllm.port


def test_teardown_leaves_no_container_behind(fleet):
    errors = fleet.engine.destroy()
    assert errors == []
    names = (
        {p.container_name for p in fleet.plan.paddlex}
        | {v.container_name for v in fleet.plan.vllm}
        | {fleet.plan.gateway.container_name}
    )
    left = subprocess.run(
        ["docker", "ps", "-a", "--format", "{{.Names}}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert names.isdisjoint(left)
    labelled = subprocess.run(
        ["docker", "ps", "-aq", "--filter", "label=paddleocr-fleet.role"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert labelled == []
