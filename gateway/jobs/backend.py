"""The job store's interface, shared by its two backends (:mod:`gateway.jobs.stores` opens one).

- :class:`gateway.jobs.sqlite_backend.SqliteBackend` (``jobs.dir``, the default): SQLite plus
  files on the gateway's host; one gateway, or several processes of one host.
- :class:`gateway.jobs.postgres.PostgresBackend` (``jobs.store_url``): every table, input and
  result in one PostgreSQL, so every gateway takes slices from one queue and serves every job.

Every call is a coroutine that never blocks the event loop. A backend that cannot reach its
storage raises :class:`StoreUnavailable`; the job routes answer it with 503 and
``Retry-After``, the runner tries again on its next tick.

Usage::

    store = await open_backend(settings.jobs)   # gateway.jobs.stores
    await store.create_job(job, data)
    claims = await store.claim_slices(owner, 30, count=4, size=size)
    await store.close()
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

from gateway.jobs.fairness import SliceSize
from gateway.jobs.store import Job, SliceClaim

RETRY_AFTER_S = 5  # what a 503 of an unreachable store tells the client to wait


class StoreUnavailable(Exception):
    """The job store cannot be reached now (a database restarting): retry later."""


# a done job's result: a file to send as it is, or its bytes
ResultBody = Path | bytes


class JobBackend(Protocol):
    """What the router and the runner need of a job store (see each method's backend)."""

    name: str  # "sqlite" or "postgres", for logs

    @property
    def key(self) -> bytes:
        """The HMAC key of result URLs, the same for every gateway sharing the store."""
        ...

    async def close(self) -> None: ...

    async def disk_bytes(self) -> int:
        """Bytes of inputs, page results and results held (what ``jobs.max_disk_bytes`` caps)."""
        ...

    async def stats(self, running: bool = True) -> dict[str, Any]:
        """Jobs by state, progress, pages waiting (see :meth:`JobStore.stats`)."""
        ...

    def scrape_stats(self) -> dict[str, Any]:
        """:meth:`stats` without the running jobs, for ``/metrics``: a synchronous call that
        may answer the last snapshot taken by :meth:`refresh`."""
        ...

    async def refresh(self) -> None:
        """Housekeeping the runner calls every tick (a snapshot of the stats)."""
        ...

    async def create_job(self, job: Job, data: bytes) -> None: ...
    async def get(self, job_id: str) -> Job | None: ...
    async def batch(self, batch_id: str) -> list[Job]: ...
    async def fail(self, job_id: str, error: str) -> bool: ...
    async def claim_slices(
        self, owner: str, lease_s: float, count: int, size: SliceSize | None = None
    ) -> list[SliceClaim]: ...
    async def renew_owned(
        self, owner: str, lease_s: float
    ) -> tuple[set[tuple[str, int]], set[str]]: ...
    async def finish_slice(
        self, claim: SliceClaim, pages: list[dict[str, Any]], owner: str
    ) -> bool: ...
    async def retry_slice(
        self, claim: SliceClaim, owner: str, failed: list[str], counted: bool, split: bool
    ) -> None: ...
    async def claim_assembly(self, owner: str, lease_s: float) -> Job | None: ...
    async def release_owner(self, owner: str) -> None: ...
    async def register_owner(self, owner: str) -> None: ...
    async def reap_dead_owners(self) -> list[str]: ...
    async def read_input(self, job_id: str) -> bytes: ...
    async def read_pages(self, job_id: str) -> list[dict[str, Any]]:
        """Every slice's page results, in document order."""
        ...

    async def finish_job(self, job_id: str, result: bytes, owner: str) -> bool: ...
    async def result(self, job_id: str) -> ResultBody | None:
        """A done job's result, or None."""
        ...

    async def callbacks_due(self) -> list[Job]: ...
    async def mark_callback(self, job_id: str) -> bool: ...
    async def purge(self, older_than: float) -> int: ...
