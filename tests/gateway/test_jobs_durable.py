"""Durability of jobs: a gateway process killed with SIGKILL mid-job, then started again on the
same ``jobs.dir``, finishes the job whole and in order without redoing finished slices; two
processes on one store share the work, each slice done once."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from gateway.keeper.server import KeeperApp, KeeperConfig, Upstreams
from tests.doubles.paddlex_double import DoubleFleet
from tests.doubles.servers import ServerThread
from tests.gateway.jobs_helpers import (
    done_pages,
    jobs_config,
    page_order,
    submit_pdfs,
    wait_part_extracted,
)
from tests.gateway.multiworker_helpers import GatewayProcess


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
        first = GatewayProcess(config, tmp_path / "gw1.log", workers=None)
        processes.append(first)
        (job_id,) = submit_pdfs([first.client], 36)
        wait_part_extracted(first.client, job_id, 36)  # some slices done, others not
        first.kill()
        done_before = {
            f for f, state in _slices(tmp_path / "jobs", job_id).items() if state == "done"
        }
        # some slices are done, not all pages (pages are cut into slices as they are leased)
        with sqlite3.connect(tmp_path / "jobs" / "jobs.sqlite3") as db:
            (extracted,) = db.execute("SELECT extracted FROM jobs WHERE id=?", (job_id,)).fetchone()
        assert done_before and extracted < 36
        seen_before = [len(d.layout_requests()) for d in fleet]

        second = GatewayProcess(config, tmp_path / "gw2.log", workers=None)
        processes.append(second)
        pages = done_pages(second.client, job_id, limit_s=120)
        redone = [
            str(r.body.get("logId"))
            for d, seen in zip(fleet, seen_before, strict=True)
            for r in d.layout_requests()[seen:]
        ]
    assert page_order(pages) == list(range(36))
    assert not {f"{job_id}-{f}" for f in done_before} & set(redone), "finished slices redone"


@pytest.mark.parametrize("per_page_s", [0.2, 0.75])  # done by the restart / still running
def test_with_keepers_a_kill_parses_no_page_twice(
    tmp_path: Path, processes: list[GatewayProcess], per_page_s: float
) -> None:
    """The slices running at the kill are not sent again: the restarted gateway takes their
    answers from the keeper, or waits there for the parse still running."""
    with DoubleFleet(3, per_page_s=per_page_s) as fleet:
        keeper = ServerThread(KeeperApp(KeeperConfig(upstreams=Upstreams(fleet.urls)))).start()
        try:
            upstreams = [{"url": url, "keeper": keeper.url} for url in fleet.urls]
            gateway = jobs_config(upstreams, tmp_path / "jobs", jobs={"lease_s": 1})
            path = tmp_path / "gateway.json"
            path.write_text(json.dumps(gateway))
            first = GatewayProcess(path, tmp_path / "gw1.log", workers=None)
            processes.append(first)
            (job_id,) = submit_pdfs([first.client], 36)
            # kill with slices done and slices running on instances
            wait_part_extracted(first.client, job_id, 24)
            first.kill()
            running = httpx.get(keeper.url + "/health", trust_env=False).json()["running"]
            second = GatewayProcess(path, tmp_path / "gw2.log", workers=None)
            processes.append(second)
            pages = done_pages(second.client, job_id, limit_s=120)
            stats = httpx.get(keeper.url + "/health", trust_env=False).json()
        finally:
            keeper.stop()
        log_ids = _log_ids(fleet)
    assert page_order(pages) == list(range(36))
    assert running > 0, "nothing was running at the kill: the test proves nothing"
    assert stats["calls_attached"] + stats["calls_kept"] + stats["calls_looked_up"] >= running
    assert len(log_ids) == len(set(log_ids)), f"a slice was parsed twice: {sorted(log_ids)}"
    assert "answer taken from a keeper" in second.log() or "waiting for it there" in second.log()


def test_two_processes_share_one_store(tmp_path: Path, processes: list[GatewayProcess]) -> None:
    with DoubleFleet(3, per_page_s=0.02) as fleet:
        config = _write_config(tmp_path, fleet)
        a = GatewayProcess(config, tmp_path / "a.log", workers=None)
        b = GatewayProcess(config, tmp_path / "b.log", workers=None)
        processes.extend([a, b])
        ids = submit_pdfs([a.client, b.client, a.client], 20)
        results = {job_id: done_pages(b.client, job_id, limit_s=120) for job_id in ids}
        log_ids = _log_ids(fleet)
    for pages in results.values():
        assert page_order(pages) == list(range(20))
    assert len(log_ids) == len(set(log_ids)), "a slice was done twice"
