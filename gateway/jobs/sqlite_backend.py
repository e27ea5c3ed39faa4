"""The SQLite job store (:class:`gateway.jobs.store.JobStore`) behind the async interface of
:mod:`gateway.jobs.backend`: each call runs in a thread, since SQLite and its fsyncs block.

Usage::

    store = await SqliteBackend.open(Path("/var/lib/paddleocr-fleet/jobs"))
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from gateway.jobs.backend import ResultBody
from gateway.jobs.fairness import SliceSize
from gateway.jobs.store import Job, JobStore, SliceClaim


class SqliteBackend:
    """See module doc."""

    name = "sqlite"

    def __init__(self, store: JobStore) -> None:
        self.store = store
        self.key = store.key

    @classmethod
    async def open(cls, root: Path) -> SqliteBackend:
        return cls(await asyncio.to_thread(JobStore, root))

    async def close(self) -> None:
        await asyncio.to_thread(self.store.close)

    async def disk_bytes(self) -> int:
        return await asyncio.to_thread(self.store.disk_bytes)

    async def stats(self, running: bool = True) -> dict[str, Any]:
        return await asyncio.to_thread(self.store.stats, None, running)

    def scrape_stats(self) -> dict[str, Any]:
        return self.store.stats(running=False)

    async def refresh(self) -> None:
        return None

    async def create_job(self, job: Job, data: bytes) -> None:
        try:
            await asyncio.to_thread(self.store.create_job, job, data)
        except OSError:
            self.store.input_path(job.id).unlink(missing_ok=True)
            raise

    async def get(self, job_id: str) -> Job | None:
        return await asyncio.to_thread(self.store.get, job_id)

    async def batch(self, batch_id: str) -> list[Job]:
        return await asyncio.to_thread(self.store.batch, batch_id)

    async def fail(self, job_id: str, error: str) -> bool:
        return await asyncio.to_thread(self.store.fail, job_id, error)

    async def claim_slices(
        self, owner: str, lease_s: float, count: int, size: SliceSize | None = None
    ) -> list[SliceClaim]:
        return await asyncio.to_thread(self.store.claim_slices, owner, lease_s, count, size)

    async def renew_owned(
        self, owner: str, lease_s: float
    ) -> tuple[set[tuple[str, int]], set[str]]:
        return await asyncio.to_thread(self.store.renew_owned, owner, lease_s)

    async def finish_slice(
        self, claim: SliceClaim, pages: list[dict[str, Any]], owner: str
    ) -> bool:
        return await asyncio.to_thread(self.store.finish_slice, claim, pages, owner)

    async def retry_slice(
        self, claim: SliceClaim, owner: str, failed: list[str], counted: bool, split: bool
    ) -> None:
        await asyncio.to_thread(self.store.retry_slice, claim, owner, failed, counted, split)

    async def claim_assembly(self, owner: str, lease_s: float) -> Job | None:
        return await asyncio.to_thread(self.store.claim_assembly, owner, lease_s)

    async def release_owner(self, owner: str) -> None:
        await asyncio.to_thread(self.store.release_owner, owner)

    async def register_owner(self, owner: str) -> None:
        await asyncio.to_thread(self.store.register_owner, owner)

    async def reap_dead_owners(self) -> list[str]:
        return await asyncio.to_thread(self.store.reap_dead_owners)

    async def read_input(self, job_id: str) -> bytes:
        return await asyncio.to_thread(self.store.input_path(job_id).read_bytes)

    async def read_pages(self, job_id: str) -> list[dict[str, Any]]:
        def read() -> list[dict[str, Any]]:
            pages: list[dict[str, Any]] = []
            for first in self.store.slice_firsts(job_id):
                pages.extend(json.loads(self.store.pages_path(job_id, first).read_bytes()))
            return pages

        return await asyncio.to_thread(read)

    async def finish_job(self, job_id: str, result: bytes, owner: str) -> bool:
        return await asyncio.to_thread(self.store.finish_job, job_id, result, owner)

    async def result(self, job_id: str) -> ResultBody | None:
        path = self.store.result_path(job_id)
        return path if await asyncio.to_thread(path.is_file) else None

    async def callbacks_due(self) -> list[Job]:
        return await asyncio.to_thread(self.store.callbacks_due)

    async def mark_callback(self, job_id: str) -> bool:
        return await asyncio.to_thread(self.store.mark_callback, job_id)

    async def purge(self, older_than: float) -> int:
        return await asyncio.to_thread(self.store.purge, older_than)
