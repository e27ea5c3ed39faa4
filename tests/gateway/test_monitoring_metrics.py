"""The series monitoring reads from the gateway: jobs, queue by priority and token, process."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from gateway.jobs.store import JobStore
from gateway.observability.metrics import GatewayMetrics
from tests.gateway.test_jobs_units import _job
from tests.gateway.test_pool import make_pool


def samples(body: bytes) -> dict[str, float]:
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(body.decode()):
        for s in family.samples:
            labels = ",".join(f"{k}={v}" for k, v in sorted(s.labels.items()))
            out[f"{s.name}{{{labels}}}" if labels else s.name] = s.value
    return out


def test_job_store_stats_follow_progress_and_age(tmp_path: Path) -> None:
    store = JobStore(tmp_path)
    now = time.time()
    store.create_job(_job("old", "a", now - 120), b"%PDF-1", [(0, 2), (2, 2)])
    store.create_job(_job("new", "b", now - 5), b"%PDF-2")  # cut when leased
    stats = store.stats(now)
    assert stats["jobs"] == {"pending": 2, "running": 0, "done": 0, "failed": 0}
    assert stats["pages_waiting"] == 8
    assert 119 < stats["oldest_waiting_s"] < 121
    claim = store.claim_slice("p1", lease_s=30)
    assert claim is not None and claim.job.id == "old"
    store.finish_slice(claim, [{"n": 0}, {"n": 1}], "p1")
    stats = store.stats(now)
    old = next(job for job in stats["running"] if job["id"] == "old")
    assert (old["pages"], old["done"]) == (4, 2)
    assert stats["pages_waiting"] == 6
    assert stats["disk_total_bytes"] >= stats["disk_free_bytes"] > 0
    assert store.stats(now, running=False)["running"] == []

    metrics = GatewayMetrics()
    metrics.job_stats = lambda: store.stats(now)
    body, _ = metrics.render(lambda: {"upstreams": [], "queue_depth": 0, "panic": False})
    got = samples(body)
    assert got["gateway_jobs{state=running}"] == 1
    assert got["gateway_job_pages_waiting"] == 6
    assert 119 < got["gateway_job_oldest_waiting_seconds"] < 121
    # read again from the file system: other processes write meanwhile
    assert abs(got["gateway_jobs_disk_free_bytes"] - stats["disk_free_bytes"]) < 256 * 2**20
    assert got["process_resident_memory_bytes"] > 0 and "process_cpu_seconds_total" in got
    store.close()


def test_queue_waiting_by_priority_and_token() -> None:
    async def main() -> dict[str, float]:
        pool = make_pool(1, load_balance={"mode": "queue", "queue_max_depth": 10})
        busy = await pool.acquire()
        tasks = [
            asyncio.create_task(pool.acquire(timeout=5, tenant="a")),
            asyncio.create_task(pool.acquire(timeout=5, tenant="a")),
            asyncio.create_task(pool.acquire(timeout=5, tenant="b", background=True)),
        ]
        await asyncio.sleep(0.01)
        body, _ = pool.metrics.render(pool.gauge_snapshot)
        pool.release(busy, "success", 0.1)
        for task in tasks:
            pool.release(await task, "success", 0.1)
        return samples(body)

    got = asyncio.run(main())
    assert got["gateway_queue_waiting{priority=interactive,token=a}"] == 2
    assert got["gateway_queue_waiting{priority=background,token=b}"] == 1
