"""Durability of jobs: a gateway process killed with SIGKILL mid-job, then started again on the
same ``jobs.dir``, finishes the job whole and in order without redoing finished slices; two
processes on one store share the work, each slice done once."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.doubles.paddlex_double import DoubleFleet
from tests.doubles.servers import bind_loopback
from tests.gateway.jobs_helpers import (
    AUTH,
    jobs_config,
    numbered_pdf,
    read_jsonl,
    result_pages,
    source_page,
    wait_job,
)

ROOT = Path(__file__).resolve().parents[2]


class GatewayProcess:
    """``python -m gateway`` in a child process on a loopback port."""

    def __init__(self, config_path: Path, log_path: Path) -> None:
        sock = bind_loopback(0)
        self.port = sock.getsockname()[1]
        sock.close()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = open(log_path, "ab")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "gateway", "--config", str(config_path), "--host",
             "127.0.0.1", "--port", str(self.port), "--no-access-log"],
            cwd=ROOT, stdout=self.log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        self.client = httpx.Client(base_url=self.url, timeout=30, trust_env=False)
        deadline = time.monotonic() + 30
        while True:
            assert self.proc.poll() is None, f"gateway exited: {log_path.read_text()[-2000:]}"
            try:
                if self.client.get("/health").status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "gateway did not start"
            time.sleep(0.05)

    def kill(self) -> None:
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        self.client.close()
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.log.close()


@pytest.fixture
def processes() -> Iterator[list[GatewayProcess]]:
    started: list[GatewayProcess] = []
    yield started
    for gw in started:
        gw.stop()


def _write_config(tmp_path: Path, fleet: DoubleFleet) -> Path:
    config = jobs_config(fleet.urls, tmp_path / "jobs", jobs={"lease_s": 1})
    path = tmp_path / "gateway.json"
    path.write_text(json.dumps(config))
    return path


def _slices(jobs_dir: Path, job_id: str) -> dict[int, str]:
    with sqlite3.connect(jobs_dir / "jobs.sqlite3") as db:
        rows = db.execute("SELECT first, state FROM slices WHERE job_id=?", (job_id,))
        return dict(rows.fetchall())


def _log_ids(fleet: DoubleFleet) -> list[str]:
    return [str(r.body.get("logId")) for d in fleet for r in d.layout_requests()]


def test_killed_gateway_resumes_the_job_on_restart(
    tmp_path: Path, processes: list[GatewayProcess]
) -> None:
    with DoubleFleet(3, per_page_s=0.1) as fleet:
        config = _write_config(tmp_path, fleet)
        first = GatewayProcess(config, tmp_path / "gw1.log")
        processes.append(first)
        answer = first.client.post(
            "/api/v2/ocr/jobs", headers=AUTH, files={"file": ("d.pdf", numbered_pdf(36))}
        )
        job_id = answer.json()["data"]["jobId"]
        # kill once some slices are done and others are not
        for _ in range(600):
            data = first.client.get(f"/api/v2/ocr/jobs/{job_id}", headers=AUTH).json()["data"]
            if 0 < data["extractProgress"]["extractedPages"] < 36:
                break
            time.sleep(0.02)
        first.kill()
        done_before = {
            f for f, state in _slices(tmp_path / "jobs", job_id).items() if state == "done"
        }
        # some slices are done, not all pages (pages are cut into slices as they are leased)
        with sqlite3.connect(tmp_path / "jobs" / "jobs.sqlite3") as db:
            (extracted,) = db.execute("SELECT extracted FROM jobs WHERE id=?", (job_id,)).fetchone()
        assert done_before and extracted < 36
        seen_before = [len(d.layout_requests()) for d in fleet]

        second = GatewayProcess(config, tmp_path / "gw2.log")
        processes.append(second)
        data = wait_job(second.client, job_id, limit_s=120)
        assert data["state"] == "done", data
        pages = result_pages(read_jsonl(data["resultUrl"]["jsonUrl"]))
        redone = [
            str(r.body.get("logId"))
            for d, seen in zip(fleet, seen_before, strict=True)
            for r in d.layout_requests()[seen:]
        ]
    assert [source_page(p) for p in pages] == list(range(36))
    assert not {f"{job_id}-{f}" for f in done_before} & set(redone), "finished slices redone"


def test_two_processes_share_one_store(tmp_path: Path, processes: list[GatewayProcess]) -> None:
    with DoubleFleet(3, per_page_s=0.02) as fleet:
        config = _write_config(tmp_path, fleet)
        a = GatewayProcess(config, tmp_path / "a.log")
        b = GatewayProcess(config, tmp_path / "b.log")
        processes.extend([a, b])
        ids = [
            gw.client.post(
                "/api/v2/ocr/jobs", headers=AUTH, files={"file": ("d.pdf", numbered_pdf(20))}
            ).json()["data"]["jobId"]
            for gw in (a, b, a)
        ]
        results: dict[str, Any] = {}
        for job_id in ids:
            data = wait_job(b.client, job_id, limit_s=120)
            assert data["state"] == "done", data
            results[job_id] = result_pages(read_jsonl(data["resultUrl"]["jsonUrl"]))
        log_ids = _log_ids(fleet)
    for pages in results.values():
        assert [source_page(p) for p in pages] == list(range(20))
    assert len(log_ids) == len(set(log_ids)), "a slice was done twice"
