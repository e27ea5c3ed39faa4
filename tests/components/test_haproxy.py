"""The balancer's HAProxy config, run by the real HAProxy on loopback in front of gateway doubles:
least connections by weight, `/ready` checks, the job API on one gateway, its own health URI,
a reload that keeps requests in flight; and the install command's check-then-swap."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

from components import haproxy
from components import plan as plan_module
from components.plan import build_plan
from components.settings import load_settings
from tests.ports import free_port
from tests.real_components import unavailable
from tests.waiting import wait_for

HAPROXY = shutil.which("haproxy") or next(
    (p for p in ("/usr/sbin/haproxy", "/sbin/haproxy") if os.access(p, os.X_OK)), None
)


@pytest.fixture(scope="module")
def haproxy_bin() -> str:
    if HAPROXY is None:
        unavailable("HAProxy", "haproxy is not installed (apt-get install haproxy)")
    return HAPROXY


class _QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: object, client_address: object) -> None:
        pass  # HAProxy's checks close their connection once they have read the status


@dataclass
class GatewayDouble:
    """Answers like a gateway for what the balancer sees: `/ready`, documents, job routes."""

    name: str
    ready: bool = True
    hold: threading.Event = field(default_factory=threading.Event)
    """Documents wait until this is set (those sent to `/slow` alone, if `hold_slow_only`)."""
    hold_slow_only: bool = False
    ready_after_s: float = 0.0
    """How long `/ready` takes to answer."""
    in_flight: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self.hold.set()
        double = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def _answer(self, status: int, body: dict) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                if self.path == "/ready":
                    time.sleep(double.ready_after_s)
                    self._answer(200 if double.ready else 503, {"ready": double.ready})
                else:
                    self._answer(200, {"gateway": double.name, "path": self.path})

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                with double.lock:
                    double.in_flight += 1
                if self.path == "/slow" or not double.hold_slow_only:
                    double.hold.wait(30)
                with double.lock:
                    double.in_flight -= 1
                self._answer(200, {"gateway": double.name})

        self.server = _QuietServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def backend(self, weight: int = 1) -> haproxy.Backend:
        return haproxy.Backend(self.name, "127.0.0.1", self.port, weight)

    def close(self) -> None:
        self.hold.set()
        self.server.shutdown()
        self.server.server_close()


class Balancer:
    """`haproxy -W -db -f FILE` as the balancer container runs it."""

    def __init__(self, binary: str, spec: haproxy.HaproxySpec, folder: Path):
        self.spec, self.path = spec, folder / "haproxy.cfg"
        self.path.write_text(haproxy.render_haproxy(spec))
        self.url = f"http://127.0.0.1:{spec.port}"
        self.process = subprocess.Popen(
            [binary, "-W", "-db", "-f", str(self.path)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        assert wait_for(self._listening, timeout=20), "haproxy did not start"

    def _listening(self) -> bool:
        try:
            return httpx.get(self.url + haproxy.HEALTH_URI, timeout=2).status_code in (200, 503)
        except httpx.HTTPError:
            return False

    def reload(self, spec: haproxy.HaproxySpec) -> None:
        self.path.write_text(haproxy.render_haproxy(spec))
        os.kill(self.process.pid, signal.SIGUSR2)

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(10)


@pytest.fixture
def doubles() -> Iterator[list[GatewayDouble]]:
    made = [GatewayDouble(name) for name in ("npu-a", "npu-b", "npu-c")]
    yield made
    for double in made:
        double.close()


def _spec(
    *backends: haproxy.Backend,
    jobs: str | None = None,
    per_client: int | None = 100,
    shared_jobs: bool = False,
) -> haproxy.HaproxySpec:
    return haproxy.HaproxySpec(
        port=free_port(),
        backends=backends,
        jobs_backend=jobs,
        shared_jobs=shared_jobs,
        bind_address="127.0.0.1",
        check_interval_s=0.1,
        max_conn_per_client=per_client,
        log=False,
    )


@pytest.fixture
def run_balancer(haproxy_bin, tmp_path) -> Iterator:
    started: list[Balancer] = []

    def start(spec: haproxy.HaproxySpec) -> Balancer:
        started.append(Balancer(haproxy_bin, spec, tmp_path))
        return started[-1]

    yield start
    for balancer in started:
        balancer.stop()


def _post(url: str, path: str = "/ocr") -> str:
    """The gateway that answered a document ("" for an answer of the balancer's own)."""
    answer = httpx.post(url + path, json={"base64": "x"}, timeout=30)
    return answer.json()["gateway"] if answer.status_code == 200 else ""


def _spread(balancer: Balancer, doubles: list[GatewayDouble], requests: int) -> dict[str, int]:
    """How many of `requests` concurrent documents each gateway holds at once."""
    for double in doubles:
        double.hold.clear()
    pool = ThreadPoolExecutor(requests)
    futures = [pool.submit(_post, balancer.url) for _ in range(requests)]
    try:
        assert wait_for(lambda: sum(d.in_flight for d in doubles) == requests)
        return {d.name: d.in_flight for d in doubles}
    finally:
        for double in doubles:
            double.hold.set()
        for future in futures:
            future.result()
        pool.shutdown()


def _only(balancer: Balancer, name: str, path: str = "/ocr") -> bool:
    """Whether the next 10 documents (or GETs of `path`) all reach gateway `name`."""
    for _ in range(10):
        if path == "/ocr":
            got = _post(balancer.url)
        else:
            answer = httpx.get(balancer.url + path, timeout=10)
            got = answer.json().get("gateway") if answer.status_code == 200 else ""
        if got != name:
            return False
    return True


def test_the_stacks_config_is_valid_haproxy(haproxy_bin, tmp_path):
    hosts = [
        {"name": "npu-a", "endpoint": "unix:///var/run/docker.sock", "cards": 1},
        {"name": "npu-b", "endpoint": "ssh://ops@10.0.0.2", "cards": 2},
    ]
    settings = load_settings({"hosts": json.dumps(hosts), "gatewayLayout": "per-host"})
    path = tmp_path / "haproxy.cfg"
    path.write_text(haproxy.balancer_config(settings, build_plan(settings)))
    check = subprocess.run([haproxy_bin, "-c", "-f", str(path)], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr


def test_documents_go_to_the_gateway_with_the_fewest_in_progress_by_weight(doubles, run_balancer):
    a, b, _ = doubles
    balancer = run_balancer(_spec(a.backend(weight=6), b.backend(weight=18)))
    # Weights are the gateways' PaddleX counts: 1 to 3, so 8 documents at once split 2 and 6.
    assert _spread(balancer, [a, b], 8) == {"npu-a": 2, "npu-b": 6}
    equal = run_balancer(_spec(a.backend(), b.backend()))
    assert _spread(equal, [a, b], 6) == {"npu-a": 3, "npu-b": 3}


def test_a_gateway_that_is_not_ready_gets_nothing_until_it_is_again(doubles, run_balancer):
    a, b, _ = doubles
    balancer = run_balancer(_spec(a.backend(), b.backend()))
    assert httpx.get(balancer.url + haproxy.HEALTH_URI, timeout=5).status_code == 200
    a.ready = False  # none of its host's PaddleX can serve
    assert wait_for(lambda: _only(balancer, "npu-b"))
    b.ready = False
    assert wait_for(
        lambda: httpx.get(balancer.url + haproxy.HEALTH_URI, timeout=5).status_code == 503
    )
    assert httpx.post(f"{balancer.url}/ocr", json={}, timeout=10).status_code == 503
    a.ready = True
    assert wait_for(lambda: _only(balancer, "npu-a"))


def test_a_gateway_slower_to_answer_its_check_than_the_check_interval_stays_in(
    doubles, run_balancer
):
    a, b, _ = doubles
    a.ready_after_s = 0.3  # three check intervals: a busy gateway on a loaded machine
    balancer = run_balancer(_spec(a.backend(), b.backend()))
    time.sleep(1.5)
    assert _spread(balancer, [a, b], 6) == {"npu-a": 3, "npu-b": 3}


def test_the_job_api_goes_to_its_gateway_and_to_a_backup_only_while_it_is_down(
    doubles, run_balancer
):
    a, b, _ = doubles
    balancer = run_balancer(_spec(a.backend(), b.backend(), jobs="npu-b"))
    for path in ("/api/v2/ocr/jobs/42", "/api/v2/ocr/results/42.jsonl?sig=x"):
        assert _only(balancer, "npu-b", path)
    assert {_post(balancer.url) for _ in range(10)} == {"npu-a", "npu-b"}
    b.ready = False
    assert wait_for(lambda: _only(balancer, "npu-a", "/api/v2/ocr/jobs/42"))


def test_with_a_shared_job_store_the_job_api_goes_to_every_gateway(doubles, run_balancer):
    a, b, _ = doubles
    balancer = run_balancer(_spec(a.backend(), b.backend(), jobs="npu-b", shared_jobs=True))
    answers = [
        httpx.get(balancer.url + "/api/v2/ocr/jobs/42", timeout=10).json()["gateway"]
        for _ in range(10)
    ]
    assert set(answers) == {"npu-a", "npu-b"}
    hosts = [{"name": n, "endpoint": "unix:///var/run/docker.sock", "cards": 1} for n in "ab"]
    url = {"jobsStoreUrl": "postgresql://fleet:pw-pw-pw@127.0.0.1:5432/jobs"}
    for config, shared in (({}, False), (url, True)):
        settings = load_settings(
            {"hosts": json.dumps(hosts), "gatewayLayout": "per-host", **config}, set(config)
        )
        assert haproxy.haproxy_spec(settings, build_plan(settings)).shared_jobs is shared


def test_a_reload_adds_a_gateway_and_finishes_the_requests_in_flight(doubles, run_balancer):
    a, b, c = doubles
    spec = _spec(a.backend())
    balancer = run_balancer(spec)
    a.hold_slow_only = True
    a.hold.clear()
    with ThreadPoolExecutor(1) as pool:
        in_flight = pool.submit(_post, balancer.url, "/slow")
        assert wait_for(lambda: a.in_flight == 1)
        balancer.reload(replace(spec, backends=(a.backend(), b.backend(), c.backend())))
        assert wait_for(lambda: {_post(balancer.url) for _ in range(6)} >= {"npu-b", "npu-c"})
        a.hold.set()
        assert in_flight.result() == "npu-a"  # the old worker finished it


def test_a_client_over_its_connection_bound_gets_the_gateways_429(doubles, run_balancer):
    a, _, _ = doubles
    balancer = run_balancer(_spec(a.backend(), per_client=2))
    a.hold.clear()
    with ThreadPoolExecutor(2) as pool:
        held = [pool.submit(_post, balancer.url) for _ in range(2)]  # 2 connections open
        assert wait_for(lambda: a.in_flight == 2)
        third = httpx.post(f"{balancer.url}/ocr", json={}, timeout=10)
        a.hold.set()
        assert [f.result() for f in held] == ["npu-a", "npu-a"]
    assert third.status_code == 429 and third.headers["retry-after"] == "1"
    assert third.json()["error"]["code"] == "too_many_connections"
    assert "more than 2 connections" in third.json()["error"]["message"]
    assert _post(balancer.url) == "npu-a"  # the connections are closed: below the bound again


def test_the_install_command_checks_then_swaps_then_reloads(haproxy_bin, tmp_path, monkeypatch):
    monkeypatch.setattr(plan_module, "CONFIG_DIR_IN_CONTAINER", str(tmp_path))
    settings = load_settings({"cards": "1", "gatewayLayout": "per-host"})
    plan = build_plan(settings)
    assert plan.balancer is not None
    command = shlex.split(haproxy.balancer_config_install_command(plan.balancer))
    assert command[:6] == ["docker", "exec", "-i", "paddleocr-fleet-balancer", "sh", "-c"]
    signals = tmp_path / "signals"
    # What runs in the container, with `kill` (a shell builtin) recorded instead of sent.
    script = f'kill() {{ echo "$*" >> {signals}; }}; {command[-1]}'
    env = {**os.environ, "PATH": f"{Path(haproxy_bin).parent}:{os.environ['PATH']}"}
    target = tmp_path / "haproxy.cfg"
    good = haproxy.balancer_config(settings, plan)
    done = subprocess.run(["bash", "-c", script], input=good, text=True, env=env)
    assert done.returncode == 0 and target.read_text() == good
    assert signals.read_text() == "-USR2 1\n"
    broken = good.replace("balance leastconn", "balance fewest-please")
    refused = subprocess.run(
        ["bash", "-c", script], input=broken, text=True, env=env, capture_output=True
    )
    assert refused.returncode != 0 and "balance only supports" in refused.stderr
    assert target.read_text() == good and signals.read_text() == "-USR2 1\n"
