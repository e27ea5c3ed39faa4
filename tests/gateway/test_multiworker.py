"""``python -m gateway --workers N``: real worker processes on loopback, PaddleX doubles that
record how many documents each instance holds at once.

- With 2 and 3 workers and many concurrent clients no instance ever holds two documents.
- A worker killed with SIGKILL: its occupancy is freed and the supervisor starts it again.
- Token quotas (``max_in_flight``, ``rate_per_s``) hold across workers.
- ``/metrics`` has every worker's series; SIGHUP reloads every worker; SIGTERM stops them all.
- ``--workers 1`` is one process, as before; a bad ``GATEWAY_WORKERS`` is refused.
- Jobs with two workers: every slice done once, every job whole.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.doubles.paddlex_double import DoubleFleet
from tests.doubles.servers import bind_loopback
from tests.gateway.conftest import gateway_config
from tests.gateway.jobs_helpers import done_pages, jobs_config, page_order, submit_pdfs
from tests.gateway.jobs_helpers import sha as token_sha
from tests.gateway.multiworker_helpers import ROOT, GatewayProcess, pid_alive
from tests.gateway.samples import b64, png_bytes
from tests.waiting import wait_for

PNG = b64(png_bytes())


def _write(tmp_path: Path, config: dict[str, Any]) -> Path:
    path = tmp_path / "gateway.json"
    path.write_text(json.dumps(config))
    return path


def _queue_config(urls: list[str], **sections: Any) -> dict[str, Any]:
    return gateway_config(urls, load_balance={"mode": "queue", "queue_timeout_s": 60}, **sections)


def _ocr_many(url: str, total: int, clients: int, headers: dict[str, str] | None = None) -> list:
    """``total`` /ocr requests from ``clients`` threads, each on its own connections."""

    def one(_: int) -> int:
        with httpx.Client(base_url=url, timeout=60, trust_env=False, headers=headers) as c:
            return c.post("/ocr", json={"base64": PNG}).status_code

    with ThreadPoolExecutor(clients) as pool:
        return list(pool.map(one, range(total)))


def _ocr_ignoring_errors(url: str) -> None:
    """One /ocr whose connection may be cut (its worker gets killed)."""
    try:
        with httpx.Client(base_url=url, timeout=60, trust_env=False) as client:
            client.post("/ocr", json={"base64": PNG})
    except httpx.HTTPError:
        pass


def _requests_per_worker(metrics: str) -> dict[str, float]:
    served: dict[str, float] = {}
    for line in metrics.splitlines():
        if line.startswith("gateway_requests_total{") and 'route="/ocr"' in line:
            worker = line.split('worker="', 1)[1].split('"', 1)[0]
            served[worker] = served.get(worker, 0) + float(line.rsplit(" ", 1)[1])
    return served


@pytest.mark.parametrize("workers", [2, 3])
def test_no_instance_ever_holds_two_documents(tmp_path: Path, workers: int) -> None:
    with DoubleFleet(3, service_time_s=0.01) as fleet:
        config = _write(tmp_path, _queue_config(fleet.urls))
        with GatewayProcess(config, tmp_path / "gw.log", workers=workers) as gw:
            statuses = _ocr_many(gw.url, total=90, clients=24)
            metrics = gw.fresh_get("/metrics").text
    assert statuses == [200] * 90
    assert [d.stats.max_pending for d in fleet] == [1, 1, 1], "an instance held two documents"
    assert sum(d.stats.layout_served for d in fleet) == 90
    served = _requests_per_worker(metrics)
    assert len(served) == workers and all(served.values()), served  # every worker took part


def test_killed_worker_frees_its_occupancy_and_is_restarted(tmp_path: Path) -> None:
    with DoubleFleet(1, service_time_s=1.0) as fleet:
        config = _write(tmp_path, _queue_config(fleet.urls))
        with GatewayProcess(config, tmp_path / "gw.log", workers=2) as gw:
            before = gw.answers_from_every_worker(2)
            pids = {doc["workers"]["pid"] for doc in before.values()}
            assert set(gw.children()) == pids
            slow = threading.Thread(target=_ocr_ignoring_errors, args=(gw.url,), daemon=True)
            slow.start()
            holder: dict[str, Any] = {}

            def held() -> bool:  # the worker whose attempt occupies the one instance
                doc = gw.fresh_get("/upstreams").json()
                if doc["upstreams"][0]["in_flight_worker"] == 1:
                    holder.update(doc)
                return bool(holder)

            assert wait_for(held, timeout=20)
            victim = holder["workers"]["pid"]
            os.kill(victim, signal.SIGKILL)
            survivor = next(iter(pids - {victim}))
            # the occupancy the dead worker held is released at once (the instance is free)
            assert wait_for(
                lambda: (
                    (doc := gw.fresh_get("/upstreams").json())["workers"]["pid"] == survivor
                    and doc["upstreams"][0]["in_flight"] == 0
                ),
                timeout=20,
            )
            after = gw.answers_from_every_worker(2)
            new_pids = {doc["workers"]["pid"] for doc in after.values()}
            assert victim not in new_pids and survivor in new_pids and len(new_pids) == 2
            assert not pid_alive(victim)
            assert _ocr_many(gw.url, 4, 4) == [200] * 4
            assert "worker" in gw.log() and "died" in gw.log()
            slow.join(30)


def test_token_quotas_hold_across_workers(tmp_path: Path) -> None:
    tokens = [
        {"name": "two-at-once", "sha256": token_sha("t-inflight"), "max_in_flight": 2},
        {"name": "one-per-s", "sha256": token_sha("t-rate"), "rate_per_s": 0.1},
    ]
    with DoubleFleet(4, service_time_s=2.5) as fleet:
        config = _write(tmp_path, _queue_config(fleet.urls, auth={"tokens": tokens}))
        with GatewayProcess(config, tmp_path / "gw.log", workers=2) as gw:
            inflight = _ocr_many(gw.url, 12, 12, {"Authorization": "Bearer t-inflight"})
            rate = _ocr_many(gw.url, 8, 8, {"Authorization": "Bearer t-rate"})
    # all 12 arrive while the first two are still being served (2.5 s each)
    assert sorted(inflight).count(200) == 2 and inflight.count(429) == 10, inflight
    assert rate.count(200) == 1 and rate.count(429) == 7, rate


def test_metrics_reload_and_sigterm_cover_every_worker(tmp_path: Path) -> None:
    with DoubleFleet(2) as fleet:
        config = gateway_config(fleet.urls[:1], reload={"enabled": False})
        path = _write(tmp_path, config)
        gw = GatewayProcess(path, tmp_path / "gw.log", workers=2)
        try:
            assert _ocr_many(gw.url, 10, 10) == [200] * 10
            metrics = gw.fresh_get("/metrics").text
            assert 'gateway_upstream_healthy{worker="0",' in metrics
            assert 'gateway_upstream_healthy{worker="1",' in metrics
            assert sum(_requests_per_worker(metrics).values()) == 10
            # polling is off: only SIGHUP (to the supervisor, passed on) reloads
            path.write_text(json.dumps({**config, "upstreams": fleet.urls}))
            gw.proc.send_signal(signal.SIGHUP)
            assert wait_for(
                lambda: all(
                    len(doc["upstreams"]) == 2 for doc in gw.answers_from_every_worker(2).values()
                ),
                timeout=20,
            )
            workers = gw.children()
            assert len(workers) == 2
            assert gw.terminate() == 0
            assert not any(pid_alive(pid) for pid in workers)
            assert "all workers stopped" in gw.log()
        finally:
            gw.stop()


def test_one_worker_is_one_process(tmp_path: Path) -> None:
    with DoubleFleet(1) as fleet:
        config = _write(tmp_path, _queue_config(fleet.urls))
        with GatewayProcess(config, tmp_path / "gw.log", workers=1) as gw:
            doc = gw.client.get("/upstreams").json()
            assert "workers" not in doc and "in_flight_worker" not in doc["upstreams"][0]
            assert gw.children() == []
            assert _ocr_many(gw.url, 3, 3) == [200] * 3
            assert 'worker="' not in gw.client.get("/metrics").text


def test_bad_worker_count_is_refused(tmp_path: Path) -> None:
    config = _write(tmp_path, gateway_config(["http://127.0.0.1:9"]))
    for argv, env in (
        (["--workers", "0"], {}),
        (["--workers", "many"], {}),
        ([], {"GATEWAY_WORKERS": "-3"}),
    ):
        proc = subprocess.run(
            [sys.executable, "-m", "gateway", "--config", str(config), *argv],
            capture_output=True,
            text=True,
            cwd=ROOT,
            env={**os.environ, **env},
            timeout=30,
        )
        assert proc.returncode == 2, proc.stderr
        assert "must be a whole number from 1 to" in proc.stderr


def test_jobs_with_two_workers(tmp_path: Path) -> None:
    with DoubleFleet(3, per_page_s=0.01) as fleet:
        config = _write(tmp_path, jobs_config(fleet.urls, tmp_path / "jobs"))
        with GatewayProcess(config, tmp_path / "gw.log", workers=2) as gw:
            ids = []
            for _ in range(4):  # new connections: the submissions reach both workers
                with httpx.Client(base_url=gw.url, timeout=30, trust_env=False) as client:
                    ids += submit_pdfs([client], 24)
            results = {job_id: done_pages(gw.client, job_id, limit_s=120) for job_id in ids}
    log_ids = [str(r.body.get("logId")) for d in fleet for r in d.layout_requests()]
    for pages in results.values():
        assert page_order(pages) == list(range(24))
    assert len(log_ids) == len(set(log_ids)), "a slice was sent twice"
    assert [d.stats.max_pending for d in fleet] == [1, 1, 1]


def test_start_up_failures_stop_the_gateway(tmp_path: Path) -> None:
    taken = bind_loopback(0)
    taken.listen()
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    runs = {
        # the port is held by someone else (without SO_REUSEPORT)
        "port": (gateway_config(["http://127.0.0.1:9"]), str(taken.getsockname()[1])),
        # every worker fails in its start-up (the job store cannot be created)
        "worker": (gateway_config(["http://127.0.0.1:9"], jobs={"dir": str(blocker)}), "0"),
    }
    try:
        for name, (config, port) in runs.items():
            path = tmp_path / f"{name}.json"
            path.write_text(json.dumps(config))
            proc = subprocess.run(
                [sys.executable, "-m", "gateway", "--config", str(path), "--host", "127.0.0.1",
                 "--port", port, "--workers", "2"],
                capture_output=True, text=True, cwd=ROOT, timeout=60,
            )  # fmt: skip
            assert proc.returncode == 3, (name, proc.stderr[-2000:])
            expected = "cannot listen on" if name == "port" else "failed to start"
            assert expected in proc.stderr, (name, proc.stderr[-2000:])
    finally:
        taken.close()
