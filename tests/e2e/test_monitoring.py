"""Monitoring on the real Pulumi engine and a real Docker engine, in sim mode: Prometheus
deployed by the stack (`monitoring`), the status page in headless Chromium against the deployed
gateway, and the alerts of a stopped PaddleX.

One stack, in file order: up with one card (1 vLLM, 2 PaddleX) and `monitoring`: Prometheus
scrapes the gateway, the keeper and the vLLM, all up; `cards 2`: the targets follow without a
restart of Prometheus; the status page shows every upstream of the two cards; `docker stop` of
one PaddleX turns it unhealthy on the page within seconds and fires InstanceDown in Prometheus;
every PromQL of the Grafana dashboard parses and returns data; destroy, and the data folder
stays.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.pulumi_stack import changed
from tests.e2e.sim_stack import SimStack, sim_stack, tokens
from tests.e2e.test_fleet_on_docker import docker, labelled_containers, png_bytes
from tests.monitoring.status_page import log_in, save_screenshot, seconds_until_unhealthy

pytestmark = pytest.mark.docker

PROMETHEUS_PORT, EXPORTER_PORT = 20090, 20104
ADMIN = "monitoring-admin-" + os.urandom(12).hex()
USER = "monitoring-user-" + os.urandom(12).hex()
PROMETHEUS = f"http://127.0.0.1:{PROMETHEUS_PORT}"


@pytest.fixture(scope="module")
def fleet(docker_engine) -> Iterator[SimStack]:
    folder = Path(tempfile.mkdtemp(prefix="paddleocr-fleet-prometheus-"))
    try:
        with sim_stack(
            "monitoring",
            ports=20000,
            secrets=tokens(USER, ADMIN),
            gatewayImage=None,  # built by the stack, as Prometheus's image is
            gateway=json.dumps({"health": {"interval_s": 1}}),
            monitoring="true",
            prometheusPort=str(PROMETHEUS_PORT),
            # in the module's block: a fleet elsewhere on this machine may hold the default 9104
            exporterPort=str(EXPORTER_PORT),
            prometheusDataDir=str(folder),
            # No image registry here: the gateway and Prometheus images build on the base image.
            buildArgs=json.dumps({"BASE_IMAGE": "paddleocr-fleet/base:bookworm"}),
        ) as fleet:
            yield fleet
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def data_dir(fleet: SimStack) -> Path:
    """Prometheus's data folder on the host."""
    return Path(fleet.config["prometheusDataDir"])


def prometheus(path: str, **params: str) -> Any:
    answer = httpx.get(f"{PROMETHEUS}{path}", params=params, timeout=10, trust_env=False)
    answer.raise_for_status()
    body = answer.json()
    assert body["status"] == "success", body
    return body["data"]


def active_targets() -> list[dict[str, Any]]:
    return prometheus("/api/v1/targets", state="active")["activeTargets"]


def wait_until(what: str, check: Any, timeout: float) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: not after {timeout:.0f}s")
        time.sleep(1)


def all_up(expected: dict[str, int]) -> list[dict[str, Any]] | None:
    """The active targets once there are `expected` of each job and every one is up."""
    targets = active_targets()
    jobs: dict[str, int] = {}
    for target in targets:
        jobs[target["labels"]["job"]] = jobs.get(target["labels"]["job"], 0) + 1
    if jobs != expected or any(t["health"] != "up" for t in targets):
        return None
    return targets


def prometheus_started(fleet: SimStack) -> str:
    name = f"{fleet.gateway_name}-prometheus"
    return docker("inspect", "-f", "{{.Id}} {{.State.StartedAt}}", name).stdout.strip()


def test_up_deploys_prometheus_scraping_every_target(fleet):
    fleet.stack.up()
    outputs = fleet.stack.outputs()
    assert outputs["prometheus_url"] == fleet.plan.monitoring.url == PROMETHEUS
    targets = wait_until(
        "every target up", lambda: all_up({"gateway": 1, "keeper": 1, "vllm": 1, "host": 1}), 90
    )
    vllm = next(t for t in targets if t["labels"]["job"] == "vllm")
    assert vllm["labels"]["card"] == "0" and vllm["labels"]["host"] == "local"
    running = prometheus("/api/v1/query", query="vllm:num_requests_running")["result"]
    assert running and running[0]["metric"]["model_name"] == "PaddleOCR-VL-1.5-0.9B"
    memory = prometheus(
        "/api/v1/query", query='paddleocr_fleet_container_memory_bytes{role="paddlex"}'
    )["result"]
    assert sorted(m["metric"]["container"] for m in memory) == sorted(
        p.container_name for p in fleet.plan.paddlex
    )
    assert all(float(m["value"][1]) > 1_000_000 for m in memory)
    assert any(data_dir(fleet).iterdir()), "Prometheus keeps nothing in its host folder"
    flags = prometheus("/api/v1/status/flags")
    assert flags["storage.tsdb.retention.time"] == "15d"
    assert flags["storage.tsdb.retention.size"] in ("2GB", "2GiB")  # shown in binary units
    assert flags["storage.tsdb.path"] == "/prometheus"


def test_targets_follow_a_second_card_without_a_restart(fleet):
    before = prometheus_started(fleet)
    fleet.set(cards="2")
    fleet.stack.up()
    targets = wait_until(
        "two vLLM up", lambda: all_up({"gateway": 1, "keeper": 1, "vllm": 2, "host": 1}), 60
    )
    assert sorted(t["labels"]["card"] for t in targets if t["labels"]["job"] == "vllm") == [
        "0",
        "1",
    ]
    assert prometheus_started(fleet) == before, "Prometheus was restarted or replaced"
    assert changed(fleet.stack.up()) == {}, "a second up changed something"


def test_status_page_and_alert_of_a_stopped_paddlex(fleet):
    from tests.monitoring.cdp import Browser

    plan = fleet.plan
    gateway = plan.gateway.url
    victim = plan.paddlex[-1]
    with Browser() as browser:
        page = browser.new_page()
        page.goto(f"{gateway}/status")
        assert page.eval("fetch('/status/api/state').then(r => r.status)") == 401
        log_in(page, ADMIN)  # (sent to the login form)
        chips = "[...document.querySelectorAll('.chip.paddlex')]"
        urls = page.wait_for(
            f"{chips}.every(c => c.dataset.state === 'healthy') && {chips}.map(c => c.dataset.url)"
        )
        assert sorted(urls) == sorted(p.url for p in plan.paddlex)
        page.wait_for(
            "[...document.querySelectorAll('.chip.vllm')].filter("
            "c => c.dataset.state === 'healthy').length === 2"
        )
        assert page.eval("document.querySelectorAll('.card').length") == 2

        docker("stop", "-t", "1", victim.container_name)
        stopped = time.monotonic()
        seen = seconds_until_unhealthy(page, victim.url, timeout=15)
        shot = save_screenshot(page, "status-page.png")
        assert shot.stat().st_size > 10_000
    print(f"status page: {victim.container_name} unhealthy {seen:.1f}s after docker stop")

    def firing() -> list[dict[str, Any]]:
        return [
            alert
            for alert in prometheus("/api/v1/alerts")["alerts"]
            if alert["labels"]["alertname"] == "InstanceDown"
            and alert["labels"].get("container") == victim.container_name
            and alert["state"] == "firing"
        ]

    alert = wait_until("InstanceDown firing", firing, 120)[0]
    print(f"InstanceDown of {victim.container_name} firing {time.monotonic() - stopped:.0f}s after")
    assert alert["labels"]["upstream"] == victim.url and alert["labels"]["card"] == "1"


def test_every_dashboard_query_parses_and_returns_data(fleet):
    from tests.monitoring.dashboard import dashboards, queries

    for _ in range(4):  # traffic for the latency and rate panels
        answer = httpx.post(
            f"{fleet.plan.gateway.url}/ocr-file",
            headers={"Authorization": f"Bearer {USER}"},
            files={"file": ("doc.png", png_bytes(), "image/png")},
            timeout=60,
            trust_env=False,
        )
        assert answer.status_code == 200, answer.text
    time.sleep(25)  # two scrapes after it
    empty = []
    for _, dashboard in dashboards():
        for label, expr in queries(dashboard):
            answer = httpx.get(
                f"{PROMETHEUS}/api/v1/query", params={"query": expr}, timeout=10, trust_env=False
            )
            assert answer.status_code == 200, f"{label}: {expr}: {answer.text}"
            if not answer.json()["data"]["result"]:
                empty.append(f"{label}: {expr}")
    assert not empty, "panels without data:\n" + "\n".join(empty)


def test_destroy_leaves_the_data_folder(fleet):
    fleet.stack.destroy()
    assert not labelled_containers(fleet.label)
    assert any(data_dir(fleet).iterdir())
