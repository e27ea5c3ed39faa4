"""Fairness, interactive priority and retention on a job store two gateways share, on SQLite
(one ``jobs.dir``) and on a real PostgreSQL (one ``jobs.store_url``: :func:`job_store`).

The store tests hold two stores opened on one store as two gateways open theirs
(:func:`gateway.jobs.stores.open_backend`): which tenant's slice goes next counts the slices
leased by either gateway, and a purge by one gateway deletes what finished before its cut-off
and nothing the other gateway still works on. The interactive test runs two gateways
(uvicorn, in this process) on one store: on each, a request goes before the job slices waiting
there, whichever gateway leased them."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx

from gateway.config.settings import parse_settings
from gateway.jobs.backend import JobBackend
from gateway.jobs.stores import open_backend
from tests.doubles.paddlex_double import DoubleFleet
from tests.gateway.conftest import RunningGateway
from tests.gateway.jobs_helpers import (
    AUTH,
    JOBS,
    done_pages,
    jobs_config,
    page_order,
    pending_job,
    submit_pdfs,
)
from tests.gateway.samples import b64, png_bytes
from tests.waiting import wait_for

PNG = b64(png_bytes())


@contextlib.asynccontextmanager
async def two_gateways(store: dict[str, Any]) -> AsyncIterator[tuple[JobBackend, JobBackend]]:
    """The job store of ``store`` (``jobs`` settings) opened twice, as two gateways do; both
    closed even when the test fails."""
    jobs = parse_settings({"jobs": store}).jobs
    opened: list[JobBackend] = []
    try:
        for _ in range(2):
            opened.append(await open_backend(jobs))
        yield opened[0], opened[1]
    finally:
        for backend in opened:
            await backend.close()


def fixed(pages: int) -> Callable[[int, int, int, int], int]:
    """A slice size for ``claim_slices``: always ``pages``."""
    return lambda total, left, waiting, claimed: pages


def test_a_tenants_turn_counts_the_slices_leased_by_either_gateway(
    job_store: dict[str, Any],
) -> None:
    """The tenant with the fewest slices running across both gateways goes first, then its
    oldest job; a slice one gateway gives back is taken again as it is by the other."""

    async def run() -> None:
        async with two_gateways(job_store) as (a, b):
            for number, (job_id, tenant) in enumerate((("a1", "a"), ("a2", "a"), ("b1", "b")), 1):
                await a.create_job(pending_job(job_id, tenant, float(number), 40), b"%PDF-1")
            on_a = await a.claim_slices("A", 30, 1, fixed(8))
            assert [(c.job.id, c.first) for c in on_a] == [("a1", 0)]
            # b has none running, then a and b one each: a's older job, then b again
            on_b = await b.claim_slices("B", 30, 3, fixed(8))
            assert [(c.job.id, c.first) for c in on_b] == [("b1", 0), ("a1", 8), ("b1", 8)]
            more = await a.claim_slices("A", 30, 2, fixed(8))
            assert [(c.job.id, c.first) for c in more] == [("a1", 16), ("b1", 16)]
            # A gives its first slice back: B takes it again before any uncut page
            await a.retry_slice(on_a[0], "A", ["http://u1"], counted=True, split=False)
            again = await b.claim_slices("B", 30, 1, fixed(8))
            assert [(c.job.id, c.first, c.count, c.failed) for c in again] == [
                ("a1", 0, 8, ["http://u1"])
            ]

    asyncio.run(run())


def test_two_gateways_taking_turns_give_every_tenant_its_share(job_store: dict[str, Any]) -> None:
    """Tenant a has six jobs waiting, b and c one each: gateways A and B, one slice at a time
    in turn, give each tenant a third of the slices, each tenant's oldest pages first."""

    async def run() -> None:
        async with two_gateways(job_store) as (a, b):
            jobs = [(f"a{i}", "a") for i in range(6)] + [("b0", "b"), ("c0", "c")]
            for number, (job_id, tenant) in enumerate(jobs, 1):
                await a.create_job(pending_job(job_id, tenant, float(number), 12), b"%PDF")
            taken: list[tuple[str, int]] = []
            for turn in range(9):
                store, owner = (a, "A") if turn % 2 == 0 else (b, "B")
                (claim,) = await store.claim_slices(owner, 30, 1, fixed(4))
                taken.append((claim.job.id, claim.first))
            by_tenant = {t: [s for s in taken if s[0][0] == t] for t in "abc"}
            assert {t: len(s) for t, s in by_tenant.items()} == {"a": 3, "b": 3, "c": 3}, taken
            assert by_tenant["a"] == [("a0", 0), ("a0", 4), ("a0", 8)]  # the oldest job first
            assert by_tenant["b"] == [("b0", 0), ("b0", 4), ("b0", 8)]

    asyncio.run(run())


def test_a_tenant_behind_another_tenants_backlog_is_leased_at_once(
    job_store: dict[str, Any],
) -> None:
    """Issue 24: the lease candidates were the 500 oldest jobs of all tenants, so a tenant
    that submitted after another's backlog of thousands of jobs waited for most of it."""

    async def run() -> None:
        async with two_gateways(job_store) as (a, b):
            for index in range(520):
                job = pending_job(f"big-{index:04d}", "big", 1.0 + index, 4)
                await a.create_job(job, b"%PDF-big")
            await a.create_job(pending_job("late-0", "late", 1000.0, 4), b"%PDF-late")
            claims = await b.claim_slices("B", 30, 2, fixed(2))
            got = [(c.job.id, c.first, c.count) for c in claims]
            assert got == [("big-0000", 0, 2), ("late-0", 0, 2)]
            # the next lease, by the other gateway: fewest running first, oldest pages
            claims = await a.claim_slices("A", 30, 3, fixed(2))
            assert [(c.job.id, c.first) for c in claims] == [
                ("big-0000", 2),
                ("late-0", 2),
                ("big-0001", 0),
            ]

    asyncio.run(run())


def test_a_purge_deletes_the_jobs_finished_before_the_cut_and_nothing_else(
    job_store: dict[str, Any],
) -> None:
    """Gateway B purges (``jobs.retention_s``) while A works: the jobs done or failed before
    the cut-off go with their slices and results; a job finished after it, a running job
    (leased by A) and a pending one stay, and A goes on with them."""

    async def run() -> None:
        async with two_gateways(job_store) as (a, b):
            for number, job_id in enumerate(("old-done", "old-failed", "new-done", "run")):
                await a.create_job(pending_job(job_id, "t", float(number), 2), b"%PDF")
            leased = {c.job.id: c for c in await a.claim_slices("A", 30, 4)}
            assert sorted(leased) == ["new-done", "old-done", "old-failed", "run"]
            await a.create_job(pending_job("wait", "t", 9.0, 2), b"%PDF")

            async def finish(job_id: str) -> None:
                assert await a.finish_slice(leased[job_id], [{"n": 0}, {"n": 1}], "A")
                assembly = await a.claim_assembly("A", 30)
                assert assembly is not None and assembly.id == job_id
                assert await a.finish_job(job_id, b'{"result": {}}\n', "A")

            await finish("old-done")
            assert await b.fail("old-failed", "cancelled by the caller")
            await asyncio.sleep(0.05)
            cut = time.time()
            await asyncio.sleep(0.05)
            await finish("new-done")

            assert await b.purge(cut) == 2
            for gone in ("old-done", "old-failed"):
                assert await a.get(gone) is None and await b.get(gone) is None
            assert await a.result("old-done") is None
            kept = {job_id: await a.get(job_id) for job_id in ("new-done", "run", "wait")}
            assert {k: j.state if j else None for k, j in kept.items()} == {
                "new-done": "done",
                "run": "running",
                "wait": "pending",
            }
            assert await b.result("new-done") is not None
            assert await b.purge(cut) == 0  # nothing left before the cut
            # A's lease on the running job survived, and the pending one is still claimable
            assert ("run", 0) in (await a.renew_owned("A", 30))[0]
            assert await a.finish_slice(leased["run"], [{"n": 0}, {"n": 1}], "A")
            (waiting,) = await b.claim_slices("B", 30, 5)
            assert waiting.job.id == "wait"
            stats = await b.stats()
            assert stats["jobs"] == {"pending": 0, "running": 2, "done": 1, "failed": 0}

    asyncio.run(run())


def test_a_request_goes_before_the_job_slices_waiting_on_its_gateway(
    tmp_path: Path,
    start_gateway: Callable[..., RunningGateway],
    job_store: dict[str, Any],
) -> None:
    """Two gateways on one store, each with its own PaddleX (one request at a time): B's
    runner leases slices of a job submitted through A, one of them at B's PaddleX (held) and
    one waiting in B's queue; an ``/ocr`` request to B then goes to B's PaddleX before that
    slice. The job still finishes whole and in order."""
    with DoubleFleet(1, per_page_s=0.05) as fleet_a, DoubleFleet(1) as fleet_b:
        hold = {"health": {"enabled": False}, "http": {"timeout_s": 60, "request_deadline_s": 120}}
        a = start_gateway(jobs_config(fleet_a.urls, tmp_path / "a", job_store, **hold))
        b = start_gateway(jobs_config(fleet_b.urls, tmp_path / "b", job_store, **hold))
        double = fleet_b[0]
        double.knobs.hang = True  # holds B's first slice until released
        answers: list[httpx.Response] = []
        try:
            (job_id,) = submit_pdfs([a.client], 40)
            assert wait_for(lambda: double.stats.hung >= 1, timeout=30)
            queue = b.runtime.pool.queue
            assert wait_for(lambda: queue.background_waiting >= 1, timeout=30)
            request = threading.Thread(
                target=lambda: answers.append(
                    b.client.post("/ocr", json={"base64": PNG}, headers=AUTH)
                )
            )
            request.start()
            assert wait_for(lambda: queue.interactive_waiting == 1, timeout=30)
        finally:
            double.knobs.hang = False
        request.join(60)
        assert answers and answers[0].status_code == 200, answers
        order = ["image" if r.body["fileType"] == 1 else "slice" for r in double.layout_requests()]
        assert order[:2] == ["slice", "image"], order  # the held slice, then the request
        assert page_order(done_pages(a.client, job_id, limit_s=90)) == list(range(40))
        status = b.client.get(f"{JOBS}/{job_id}", headers=AUTH)  # any gateway serves it
        assert status.json()["data"]["state"] == "done"
