"""Units of the job protocol: the central queue's background priority, pageRanges, options,
slice planning, signed URLs and the store's leases (no HTTP)."""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import time
from pathlib import Path

import pytest

from gateway.jobs.protocol import (
    ProtocolError,
    check_result_signature,
    parse_page_ranges,
    sign_result_url,
    split_options,
)
from gateway.jobs.store import Job, JobStore
from gateway.upstream.fanout import plan_slices, spread_size
from tests.gateway.test_pool import make_pool


def test_interactive_requests_go_before_job_slices_and_slices_are_fair_among_tenants() -> None:
    async def main() -> list[str]:
        pool = make_pool(1, load_balance={"mode": "queue", "queue_max_depth": 10})
        busy = await pool.acquire()
        order: list[str] = []

        async def waiter(tag: str, tenant: str, background: bool) -> None:
            lease = await pool.acquire(timeout=5, tenant=tenant, background=background)
            order.append(tag)
            await asyncio.sleep(0)
            pool.release(lease, "success", 0.1)

        tasks = [
            asyncio.create_task(waiter("a-slice-1", "a", True)),
            asyncio.create_task(waiter("a-slice-2", "a", True)),
            asyncio.create_task(waiter("b-slice-1", "b", True)),
            asyncio.create_task(waiter("interactive", "c", False)),
        ]
        await asyncio.sleep(0.01)
        assert pool.queue_depth == 1  # job slices are not counted against the depth
        pool.release(busy, "success", 0.1)
        await asyncio.gather(*tasks)
        return order

    assert asyncio.run(main()) == ["interactive", "a-slice-1", "b-slice-1", "a-slice-2"]


def test_a_job_slice_waits_behind_a_queued_request_even_for_a_free_upstream() -> None:
    async def main() -> None:
        pool = make_pool(2, load_balance={"mode": "queue"})
        first = await pool.acquire()
        second = await pool.acquire()
        queued = asyncio.create_task(pool.acquire(timeout=5))
        await asyncio.sleep(0.01)
        slice_task = asyncio.create_task(pool.acquire(timeout=5, background=True))
        await asyncio.sleep(0.01)
        pool.release(first, "success", 0.1)
        await asyncio.sleep(0.01)
        assert queued.done() and not slice_task.done()
        pool.release(second, "success", 0.1)
        lease = await slice_task
        pool.release(lease, "success", 0.1)
        pool.release(await queued, "success", 0.1)

    asyncio.run(main())


def test_page_ranges() -> None:
    assert parse_page_ranges(None, 3) == [0, 1, 2]
    assert parse_page_ranges("2-3, 1,3", 5) == [1, 2, 0]
    for bad in ("0", "3-2", "1-6", "a", "1-", "-"):
        with pytest.raises(ProtocolError) as info:
            parse_page_ranges(bad, 5)
        assert info.value.status == 400 and "pageRanges" in info.value.message


def test_options_split_into_layout_and_restructure() -> None:
    layout, restructure = split_options(
        {"useLayoutDetection": False, "mergeTables": False, "outputFormats": ["md"], "topP": None}
    )
    assert layout == {"useLayoutDetection": False}
    assert restructure == {"mergeTables": False}
    with pytest.raises(ProtocolError, match="nope"):
        split_options({"nope": 1})
    with pytest.raises(ProtocolError):
        split_options([1])


def test_slices_adapt_to_free_capacity() -> None:
    assert plan_slices(8, 8, 16, 4) == [(0, 8)]
    assert plan_slices(40, 8, 16, 4) == [(0, 10), (10, 10), (20, 10), (30, 10)]
    assert plan_slices(40, 8, 16, 1) == [(0, 16), (16, 16), (32, 8)]
    assert plan_slices(9, 8, 16, 48) == [(i, 1) for i in range(9)]
    for count, free in ((9, 48), (40, 4), (40, 1), (200_000, 48), (1, 0)):
        assert spread_size(count, 16, free) == plan_slices(count, 0, 16, free)[0][1]


def test_result_urls_are_signed_and_expire() -> None:
    key = b"k" * 32
    url = sign_result_url(key, "http://gw/", "job-1", ttl_s=60)
    query = dict(part.split("=") for part in url.split("?")[1].split("&"))
    assert url.startswith("http://gw/api/v2/ocr/results/job-1.jsonl?")
    assert check_result_signature(key, "job-1", query["expires"], query["sig"])
    assert not check_result_signature(key, "job-2", query["expires"], query["sig"])
    assert not check_result_signature(b"x" * 32, "job-1", query["expires"], query["sig"])
    past = str(int(time.time()) - 1)
    assert not check_result_signature(key, "job-1", past, query["sig"])
    # what a fuzzer sent: a digit that int() refuses, a signature that is not ASCII
    assert not check_result_signature(key, "job-1", "\u00b2", query["sig"])
    assert not check_result_signature(key, "job-1", query["expires"], "\u00ae\u00a3\udcff")


def _job(job_id: str, tenant: str, created: float) -> Job:
    return Job(
        job_id, None, tenant, "PaddleOCR-VL-1.5", "pending", "pdf", list(range(4)), {}, None,
        None, created, None, None, 0,
    )  # fmt: skip


def test_store_leases_fairness_and_retention(tmp_path: Path) -> None:
    store = JobStore(tmp_path)
    again = JobStore(tmp_path)  # a second process's view of the same store
    assert again.key == store.key and (tmp_path / "key").stat().st_mode & 0o777 == 0o600
    store.create_job(_job("j1", "a", 1.0), b"%PDF-1", [(0, 2), (2, 2)])
    store.create_job(_job("j2", "b", 2.0), b"%PDF-2", [(0, 4)])
    first = store.claim_slice("p1", lease_s=30)
    second = again.claim_slice("p2", lease_s=30)
    assert first is not None and second is not None
    assert (first.job.id, second.job.id) == ("j1", "j2")  # tenant b before a's second slice
    assert ("j2", 0) not in store.renew_owned("p1", 30)[0]  # not p1's lease
    assert store.finish_slice(first, [{"n": 0}, {"n": 1}], "p1")
    assert not store.finish_slice(first, [], "p1")  # done once
    expired = store.claim_slice("p1", lease_s=-1)
    assert expired is not None and (expired.job.id, expired.first) == ("j1", 2)
    taken = again.claim_slice("p2", lease_s=30)
    assert taken is not None and (taken.job.id, taken.first) == ("j1", 2)  # lease expired
    assert not store.finish_slice(expired, [], "p1")
    assert again.finish_slice(taken, [{"n": 2}, {"n": 3}], "p2")
    # the runner that lost the lease finishes late: it must not overwrite the new owner's pages
    assert not store.finish_slice(expired, [{"late": 1}], "p1")
    assert json.loads(store.pages_path("j1", 2).read_bytes()) == [{"n": 2}, {"n": 3}]
    assert not list(store.pages_path("j1", 2).parent.glob(".*.tmp"))
    job = store.claim_assembly("p1", lease_s=30)
    assert job is not None and job.id == "j1" and store.get("j1").extracted == 4
    assert store.finish_job("j1", b'{"result": {}}\n', "p1")
    assert not store.input_path("j1").exists()
    held = store.claim_slice("p3", lease_s=30)
    assert held is None  # j2's only slice is p2's, leased
    again.release_owner("p2")  # p2 stops cleanly: its leases are free at once
    freed = store.claim_slice("p3", lease_s=30)
    assert freed is not None and (freed.job.id, freed.first) == ("j2", 0)
    assert store.fail("j2", "cancelled by the caller")
    assert store.purge(time.time() + 1) == 2
    assert store.get("j1") is None and not store.result_path("j1").exists()
    store.close()
    again.close()


def test_a_clients_change_is_fsynced_the_runners_marks_are_not(tmp_path: Path) -> None:
    """A submit or a cancel is on disk when answered (SQLite ``synchronous=FULL``); a lease
    or a slice mark commits without waiting for the disk (``NORMAL``: a power loss may take
    it back, and the slice is parsed again), which keeps a backlog's commits off a submit's
    path. The mode is the connection's at each commit."""
    store = JobStore(tmp_path)

    def mode() -> int:
        return int(store._db.execute("PRAGMA synchronous").fetchone()[0])

    store.create_job(_job("j1", "a", 1.0), b"%PDF-1")
    assert mode() == 2  # FULL
    claim = store.claim_slice("p1", lease_s=30)
    assert claim is not None and mode() == 1  # NORMAL
    assert store.finish_slice(claim, [{"n": 0}], "p1") and mode() == 1
    store.create_job(_job("j2", "a", 2.0), b"%PDF-2")
    assert mode() == 2
    assert store.claim_assembly("p1", lease_s=30) is not None and mode() == 1
    assert store.finish_job("j1", b"{}\n", "p1") and mode() == 2
    assert store.fail("j2", "cancelled by the caller") and mode() == 2
    store.close()


def _open_when_all_are_ready(root: Path, ready, errors) -> None:
    ready.wait()
    try:
        JobStore(root).close()
    except Exception as exc:  # reported to the test, which names it
        errors.put(repr(exc))


def test_processes_opening_a_new_store_at_once_all_open_it(tmp_path: Path) -> None:
    """A gateway's workers open the store together when it starts; on a new store SQLite
    refused one of them at once ("database is locked") without waiting for the other."""
    context = multiprocessing.get_context("fork")
    for trial in range(25):
        ready, errors = context.Barrier(8), context.Queue()
        root = tmp_path / str(trial)
        opening = [
            context.Process(target=_open_when_all_are_ready, args=(root, ready, errors))
            for _ in range(8)
        ]
        for process in opening:
            process.start()
        for process in opening:
            process.join(60)
        failed = [errors.get() for _ in range(errors.qsize())]
        assert not failed, f"trial {trial}: {failed}"
        assert [p.exitcode for p in opening] == [0] * 8
