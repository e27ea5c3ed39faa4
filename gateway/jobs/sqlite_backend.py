"""The SQLite job store (:class:`gateway.jobs.store.JobStore`) behind the async interface of
:mod:`gateway.jobs.backend`. SQLite and its fsyncs block, so the calls run on the threads of
:class:`gateway.jobs.lanes.Lanes`: reads and file work on reader threads, row changes on the
one writer thread, a client's (a submit, a cancel) before the runner's. A job's status, one
read by primary key, is read on the event loop (see :meth:`SqliteBackend.get`).

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
from gateway.jobs.lanes import Lanes
from gateway.jobs.store import Job, JobStore, SliceClaim, write_atomic


class SqliteBackend:
    """See module doc."""

    name = "sqlite"

    def __init__(self, store: JobStore) -> None:
        self.store = store
        self.key = store.key
        self.lanes = Lanes()

    @classmethod
    async def open(cls, root: Path) -> SqliteBackend:
        return cls(await asyncio.to_thread(JobStore, root))

    async def close(self) -> None:
        await self.lanes.write(self.store.close)
        await asyncio.to_thread(self.lanes.close)

    async def disk_bytes(self) -> int:
        return await self.lanes.read(self.store.disk_bytes)

    async def stats(self, running: bool = True) -> dict[str, Any]:
        return await self.lanes.read(self.store.stats, None, running)

    def scrape_stats(self) -> dict[str, Any]:
        return self.store.stats(running=False)

    async def refresh(self) -> None:
        return None

    async def create_job(self, job: Job, data: bytes) -> None:
        path = self.store.input_path(job.id)
        try:
            await self.lanes.read(write_atomic, path, data)
            await self.lanes.write(self.store.insert_job, job, len(data), urgent=True)
        except OSError:
            path.unlink(missing_ok=True)
            raise

    async def get(self, job_id: str) -> Job | None:
        # on the event loop: a read by primary key on a WAL reader never waits for the writer
        # and takes tens of microseconds, less than a hop to a thread and back, whose wait
        # for the GIL was the tail of every status poll on a busy gateway
        return self.store.get(job_id)

    async def batch(self, batch_id: str) -> list[Job]:
        return await self.lanes.read(self.store.batch, batch_id)

    async def fail(self, job_id: str, error: str) -> bool:
        failed = await self.lanes.write(self.store.mark_failed, job_id, error, urgent=True)
        if failed:
            await self.lanes.read(self.store.drop_files, job_id)
        return failed

    async def claim_slices(
        self, owner: str, lease_s: float, count: int, size: SliceSize | None = None
    ) -> list[SliceClaim]:
        return await self.lanes.write(self.store.claim_slices, owner, lease_s, count, size)

    async def renew_owned(
        self, owner: str, lease_s: float
    ) -> tuple[set[tuple[str, int]], set[str]]:
        return await self.lanes.write(self.store.renew_owned, owner, lease_s)

    async def finish_slice(
        self, claim: SliceClaim, pages: list[dict[str, Any]], owner: str
    ) -> bool:
        staged, size = await self.lanes.read(self.store.stage_pages, claim, pages)
        return await self.lanes.write(self.store.commit_slice, claim, owner, staged, size)

    async def retry_slice(
        self, claim: SliceClaim, owner: str, failed: list[str], counted: bool, split: bool
    ) -> None:
        await self.lanes.write(self.store.retry_slice, claim, owner, failed, counted, split)

    async def claim_assembly(self, owner: str, lease_s: float) -> Job | None:
        return await self.lanes.write(self.store.claim_assembly, owner, lease_s)

    async def release_owner(self, owner: str) -> None:
        await self.lanes.write(self.store.release_owner, owner)

    async def register_owner(self, owner: str) -> None:
        await self.lanes.read(self.store.register_owner, owner)

    async def reap_dead_owners(self) -> list[str]:
        return await self.lanes.write(self.store.reap_dead_owners)

    async def read_input(self, job_id: str) -> bytes:
        return await self.lanes.read(self.store.input_path(job_id).read_bytes)

    async def read_pages(self, job_id: str) -> list[dict[str, Any]]:
        def read() -> list[dict[str, Any]]:
            pages: list[dict[str, Any]] = []
            for first in self.store.slice_firsts(job_id):
                pages.extend(json.loads(self.store.pages_path(job_id, first).read_bytes()))
            return pages

        return await self.lanes.read(read)

    async def finish_job(self, job_id: str, result: bytes, owner: str) -> bool:
        await self.lanes.read(write_atomic, self.store.result_path(job_id), result)
        done = await self.lanes.write(self.store.mark_done, job_id, len(result), owner)
        if done:
            await self.lanes.read(self.store.drop_files, job_id)
        return done

    async def result(self, job_id: str) -> ResultBody | None:
        path = self.store.result_path(job_id)
        return path if await self.lanes.read(path.is_file) else None

    async def callbacks_due(self) -> list[Job]:
        return await self.lanes.read(self.store.callbacks_due)

    async def mark_callback(self, job_id: str) -> bool:
        return await self.lanes.write(self.store.mark_callback, job_id)

    async def purge(self, older_than: float) -> int:
        ids = await self.lanes.write(self.store.purge_rows, older_than)
        for job_id in ids:
            await self.lanes.read(self.store.drop_files, job_id, True)
        return len(ids)
