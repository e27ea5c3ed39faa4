"""Which job store a gateway opens: PostgreSQL when ``jobs.store_url`` names one (every gateway
shares it), else the embedded SQLite store in ``jobs.dir``. Apart from
:mod:`gateway.jobs.backend` so that the interface does not import its own implementations.

Usage::

    store = await open_backend(settings.jobs)
"""

from __future__ import annotations

from pathlib import Path

from gateway.config.settings import JobsSettings
from gateway.jobs.backend import JobBackend
from gateway.jobs.postgres import PostgresBackend
from gateway.jobs.sqlite_backend import SqliteBackend


async def open_backend(jobs: JobsSettings) -> JobBackend:
    """The store ``jobs`` names: PostgreSQL at ``jobs.store_url`` (schema created or migrated
    now), else SQLite in ``jobs.dir``."""
    if jobs.store_url is not None:
        return await PostgresBackend.open(
            jobs.store_url,
            max_bytes=jobs.max_disk_bytes,
            timeout_s=jobs.store_timeout_s,
            pool_size=jobs.store_pool_size,
        )
    if jobs.dir is None:
        raise ValueError("jobs.dir or jobs.store_url is required for a job store")
    return await SqliteBackend.open(Path(jobs.dir))
