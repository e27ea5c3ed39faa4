"""The PostgreSQL job store (``jobs.store_url``) on a real PostgreSQL the tests start: several
gateways share one queue and every job, a lease keeps a slice to one gateway until it
expires, and a database restart mid-job costs 503s with ``Retry-After``, never a job."""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from doubles.postgres_server import PostgresServer
from gateway.config.settings import ConfigError, parse_settings
from gateway.jobs.postgres import MIGRATIONS, PostgresBackend
from tests.doubles.paddlex_double import DoubleFleet
from tests.gateway.conftest import RunningGateway
from tests.gateway.jobs_helpers import (
    AUTH,
    JOBS,
    TOKEN,
    done_pages,
    jobs_config,
    page_order,
    pending_job,
    source_page,
    submit_pdf,
    submit_pdfs,
    wait_job,
    wait_part_extracted,
    write_pdf,
)
from tests.gateway.multiworker_helpers import GatewayProcess
from tests.real_components import start_postgres


@contextlib.asynccontextmanager
async def gateways(url: str, count: int = 2) -> AsyncIterator[list[PostgresBackend]]:
    """``count`` stores on one database, as ``count`` gateways have; closed even when the
    test fails (an open pool would keep ``asyncio.run`` from returning)."""
    stores: list[PostgresBackend] = []
    try:
        for _ in range(count):
            stores.append(await PostgresBackend.open(url, max_bytes=10**9))
        yield stores
    finally:
        for store in stores:
            await store.close()


def test_store_url_errors_name_the_key_and_hide_the_password() -> None:
    for url, word in (
        ("mysql://u:secret@h/db", "not a mysql URL"),
        ("postgresql://u:secret@h:port/db", "port"),
        ("postgresql://u:secret@h:5432", "no database"),
        ("postgresql://u:secret@/db", "no host"),
    ):
        with pytest.raises(ConfigError) as caught:
            parse_settings({"jobs": {"store_url": url}})
        assert "jobs.store_url" in str(caught.value) and word in str(caught.value), caught.value
        assert "secret" not in str(caught.value)
    ok = parse_settings({"jobs": {"store_url": "postgresql://u:pw@127.0.0.1:5432/jobs"}})
    assert ok.jobs.enabled and ok.jobs.dir is None


def test_schema_created_versioned_and_a_newer_one_refused(
    postgres_server: PostgresServer,
) -> None:
    url = postgres_server.new_database()

    async def run() -> None:
        async with gateways(url) as (first, again):  # the second migration is a no-op
            assert first.key == again.key and len(first.key) == 32  # one key for all

    asyncio.run(run())
    with psycopg.connect(url) as conn:
        versions = [row[0] for row in conn.execute("SELECT version FROM schema_version")]
        assert versions == list(range(1, len(MIGRATIONS) + 1))
        conn.execute("INSERT INTO schema_version VALUES (99)")
    with pytest.raises(RuntimeError, match="version 99"):
        asyncio.run(PostgresBackend.open(url, max_bytes=10**9))


def test_a_lease_keeps_a_slice_to_one_gateway_until_it_expires(
    postgres_server: PostgresServer,
) -> None:
    """Two stores on one database are two gateways: claims racing take disjoint slices; a
    slice leased by A is not leased by B until A's lease expires, then B takes it over and
    A can no longer store it."""
    url = postgres_server.new_database()

    async def run() -> None:
        async with gateways(url) as (a, b):
            await race(a, b)

    async def race(a: PostgresBackend, b: PostgresBackend) -> None:
        now = time.time()
        for index in range(6):
            await a.create_job(pending_job(f"j{index}", f"t{index % 2}", now + index, 40), b"%PDF")
        # 12 claimers, 6 per gateway, at once: every page in exactly one slice
        size: Callable[[int, int, int, int], int] = lambda pages, left, waiting, k: 3  # noqa: E731
        claims = await asyncio.gather(
            *(
                store.claim_slices(f"{name}{i}", 30, 8, size)
                for i in range(6)
                for name, store in (("a", a), ("b", b))
            )
        )
        seen: dict[str, list[int]] = {}
        for claim in (c for batch in claims for c in batch):
            seen.setdefault(claim.job.id, []).extend(range(claim.first, claim.first + claim.count))
        for pages in seen.values():
            assert sorted(pages) == sorted(set(pages)), "a page leased twice"
        # a short lease held by A: B gets nothing while it holds
        await a.create_job(pending_job("short", "t9", now - 100, 4), b"%PDF")
        (held,) = [c for c in await a.claim_slices("A", 1.5, 1) if c.job.id == "short"]
        assert [c for c in await b.claim_slices("B", 30, 100) if c.job.id == "short"] == []
        await asyncio.sleep(1.7)  # A stops renewing (a gateway lost): the lease expires
        taken = [c for c in await b.claim_slices("B", 30, 100) if c.job.id == "short"]
        assert [(c.first, c.count, c.fresh) for c in taken] == [(0, 4, False)]
        assert not await a.finish_slice(held, [{"n": i} for i in range(4)], "A")
        assert await b.finish_slice(taken[0], [{"n": i} for i in range(4)], "B")
        assert await a.renew_owned("A", 30) == (set(), set())  # nothing left to A

    asyncio.run(run())


@pytest.fixture
def shared_store(postgres_server: PostgresServer) -> dict[str, Any]:
    return {"dir": None, "store_url": postgres_server.new_database(), "store_timeout_s": 2}


def test_two_gateways_share_jobs(
    tmp_path: Path,
    start_gateway: Callable[..., RunningGateway],
    shared_store: dict[str, Any],
) -> None:
    """A job submitted through A is polled and fetched through B; both run its slices."""
    with DoubleFleet(4, per_page_s=0.02) as fleet:
        a = start_gateway(jobs_config(fleet.urls, tmp_path / "a", shared_store))
        b = start_gateway(jobs_config(fleet.urls, tmp_path / "b", shared_store))
        ids = submit_pdfs([a.client] * 3, 24)
        for job_id in ids:
            assert page_order(done_pages(b.client, job_id)) == list(range(24))
        with psycopg.connect(shared_store["store_url"]) as conn:
            row = conn.execute("SELECT COUNT(*) FROM slices").fetchone()
        assert row is not None and row[0] >= 3 * 24 // 4  # slices of at most 4 pages
        served = sum(d.stats.layout_served for d in fleet)
        assert served == row[0], "a slice was parsed twice (or not at all)"


@pytest.fixture
def own_server() -> Iterator[PostgresServer]:
    """A PostgreSQL of this test's own: it is stopped and started again mid-test."""
    server = start_postgres()
    yield server
    server.destroy()


def test_database_restart_mid_job_costs_503s_not_jobs(
    tmp_path: Path,
    start_gateway: Callable[..., RunningGateway],
    own_server: PostgresServer,
) -> None:
    store = {"dir": None, "store_url": own_server.new_database(), "store_timeout_s": 1}
    with DoubleFleet(2, per_page_s=0.1) as fleet:
        gw = start_gateway(jobs_config(fleet.urls, tmp_path / "jobs", store))
        ids = submit_pdfs([gw.client] * 3, 16)
        wait_job(gw.client, ids[0], states=("running",))
        own_server.stop()
        try:
            status = gw.client.get(f"{JOBS}/{ids[0]}", headers=AUTH)
            submit = submit_pdf(gw.client, 2)
            for answer in (status, submit):
                assert answer.status_code == 503, answer.text
                assert answer.headers["Retry-After"] == "5"
                assert answer.json()["code"] == 503 and "unavailable" in answer.json()["msg"]
            time.sleep(1.5)  # slices end meanwhile: their pages wait for the database
        finally:
            own_server.start()
        back = time.monotonic()
        # as a client does: a 503 is retried (the pool reconnects within a few seconds)
        while gw.client.get(f"{JOBS}/{ids[0]}", headers=AUTH).status_code == 503:
            assert time.monotonic() - back < 30, "the store did not come back"
            time.sleep(0.2)
        for job_id in ids:
            assert page_order(done_pages(gw.client, job_id, limit_s=90)) == list(range(16))


def test_gateways_racing_for_assembly_assemble_once(postgres_server: PostgresServer) -> None:
    """Two gateways looking for finished jobs at once: each job is assembled by one."""
    url = postgres_server.new_database()

    async def run() -> None:
        async with gateways(url) as (a, b):
            await race(a, b)

    async def race(a: PostgresBackend, b: PostgresBackend) -> None:
        for index in range(5):
            await a.create_job(pending_job(f"j{index}", "t", float(index), 2), b"%PDF")
        for claim in await a.claim_slices("A", 30, 10):
            assert await a.finish_slice(claim, [{"n": 0}, {"n": 1}], "A")
        got = await asyncio.gather(
            *(s.claim_assembly(n, 30) for _ in range(5) for n, s in (("A", a), ("B", b)))
        )
        assert sorted(j.id for j in got if j is not None) == [f"j{i}" for i in range(5)]

    asyncio.run(run())


def test_official_client_submits_through_one_gateway_and_waits_through_another(
    tmp_path: Path,
    start_gateway: Callable[..., RunningGateway],
    shared_store: dict[str, Any],
) -> None:
    """The official ``paddleocr`` client (3.7.0) on two gateways sharing one PostgreSQL."""
    paddleocr = pytest.importorskip("paddleocr")
    path = write_pdf(tmp_path / "doc.pdf", 12)
    with DoubleFleet(3, per_page_s=0.01) as fleet:
        a = start_gateway(jobs_config(fleet.urls, tmp_path / "a", shared_store))
        b = start_gateway(jobs_config(fleet.urls, tmp_path / "b", shared_store))

        def client(gw: RunningGateway) -> Any:
            return paddleocr.PaddleOCRClient(
                token=TOKEN, base_url=gw.url, request_timeout=30, poll_timeout=60
            )

        with client(a) as on_a, client(b) as on_b:
            job = on_a.submit_document_parsing(model="PaddleOCR-VL-1.5", file_path=str(path))
            result = on_b.wait_document_parsing_result(job)
            assert on_a.get_status(job.job_id).state == "done"
    assert [source_page(p.raw) for p in result.pages] == list(range(12))


def test_a_gateway_killed_with_its_disk_lost_its_jobs_finish_through_another(
    tmp_path: Path, postgres_server: PostgresServer
) -> None:
    """Two gateway processes on one PostgreSQL; A is killed (SIGKILL) mid-job and its job
    folder deleted: every job, A's slices included once their leases expire, finishes whole
    and in order through B."""
    store = {"dir": None, "store_url": postgres_server.new_database(), "lease_s": 1}
    started: list[GatewayProcess] = []
    try:
        with DoubleFleet(3, per_page_s=0.05) as fleet:
            paths = []
            for name in ("a", "b"):
                config = jobs_config(fleet.urls, tmp_path / name, {**store, "dir": None})
                (tmp_path / name).mkdir()
                paths.append(tmp_path / name / "gateway.json")
                paths[-1].write_text(json.dumps(config))
            a = GatewayProcess(paths[0], tmp_path / "a.log", workers=1)
            started.append(a)
            ids = submit_pdfs([a.client] * 3, 24)
            data = wait_part_extracted(a.client, ids[0], 24)  # kill with pages done and not
            assert 0 < data["extractProgress"]["extractedPages"] < 24, data
            a.kill()
            shutil.rmtree(tmp_path / "a")  # its config and anything else it had on disk
            b = GatewayProcess(paths[1], tmp_path / "b.log", workers=1)
            started.append(b)
            for job_id in ids:
                assert page_order(done_pages(b.client, job_id, limit_s=120)) == list(range(24))
    finally:
        for gw in started:
            gw.stop()


def test_a_gateway_started_while_the_database_is_down_serves_and_takes_jobs_later(
    tmp_path: Path,
    start_gateway: Callable[..., RunningGateway],
    own_server: PostgresServer,
) -> None:
    """The job database down at start does not keep the gateway down: documents are parsed,
    the job routes answer 503 (result URLs included: no key, no signature checked), and the
    schema is made once the database is there."""
    store = {"dir": None, "store_url": own_server.new_database(), "store_timeout_s": 1}
    own_server.stop()
    try:
        with DoubleFleet(2) as fleet:
            gw = start_gateway(jobs_config(fleet.urls, tmp_path / "jobs", store))
            assert gw.client.get("/health").status_code == 200
            status = gw.client.get(f"{JOBS}/job-x", headers=AUTH)
            result = gw.client.get("/api/v2/ocr/results/job-x.jsonl?expires=9999999999&sig=00")
            for answer in (status, result):
                assert answer.status_code == 503 and answer.headers["Retry-After"] == "5"
            own_server.start()
            deadline = time.monotonic() + 30
            while (submitted := submit_pdf(gw.client, 6)).status_code == 503:
                assert time.monotonic() < deadline, submitted.text
                time.sleep(0.2)
            pages = done_pages(gw.client, submitted.json()["data"]["jobId"])
            assert page_order(pages) == list(range(6))
    finally:
        with contextlib.suppress(RuntimeError):
            own_server.start()  # (already started: pg_ctl says so, which is fine)
