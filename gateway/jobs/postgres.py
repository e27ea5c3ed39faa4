"""The PostgreSQL job store: one queue, every input and result, shared by every gateway.

Set ``jobs.store_url`` to a ``postgresql://`` URL. Every gateway then leases slices from the
same tables: a claim locks its candidates with ``FOR UPDATE SKIP LOCKED`` (two gateways
claiming at once take different slices, neither waits for the other) and leases them until
``lease_until``, renewed while the slice runs; a lease that is not renewed expires and the
slice is taken over by any gateway. Lease times are the database's clock, so gateways whose
clocks differ agree on when a lease ends. Inputs, each slice's page results and the assembled
results are ``bytea`` in the same database, so any gateway serves any job, and what a gateway
host had on its disk does not matter. Which slice a claim takes follows the same rule as the
SQLite store (:mod:`gateway.jobs.fairness`).

The schema is created and migrated when a gateway opens the store (``schema_version`` holds
the version; an advisory lock makes concurrent starts migrate once). A gateway that finds a
newer schema than it knows refuses to start rather than write to it.

The database unreachable (restarting, a network cut) makes every call raise
:class:`StoreUnavailable` after at most ``jobs.store_timeout_s``: the routes answer 503 with
``Retry-After``, the runner tries again on its next tick, and the leases still in the
database are kept or taken over when it returns. The pool checks each connection before
handing it out, so the connections a restart broke are replaced, not used.

Usage::

    store = await PostgresBackend.open("postgresql://fleet:pw@db:5432/jobs", max_bytes=2**34)
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import psycopg
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool

from gateway.config.store_url import safe_url
from gateway.jobs.backend import ResultBody, StoreUnavailable
from gateway.jobs.fairness import SliceSize, cut_after, plan_claims
from gateway.jobs.store import JOB_COLUMNS, Job, SliceClaim, job_from_row

log = logging.getLogger("gateway.jobs")

T = TypeVar("T")
Cursor = psycopg.AsyncCursor[dict[str, Any]]

# the advisory lock that serializes migrations across gateways starting at once
_MIGRATION_LOCK = 0x6A6F6273  # "jobs"
STATS_EVERY_S = 5.0  # how often the runner's tick refreshes the snapshot /metrics reads
_RETRIES = 5  # of a transaction the database rolled back (a deadlock, a serialization)

_JOB_COLUMNS = ", ".join(JOB_COLUMNS)
_ACTIVE_UNCUT = "state IN ('pending','running') AND cut < npages"

# version N is MIGRATIONS[N - 1]; a new version is appended, never an old one changed
MIGRATIONS: list[str] = [
    """
CREATE TABLE jobs (
  id TEXT PRIMARY KEY, batch_id TEXT, tenant TEXT, model TEXT NOT NULL,
  state TEXT NOT NULL, kind TEXT NOT NULL, pages JSONB NOT NULL, options JSONB NOT NULL,
  callback_url TEXT, error TEXT, created DOUBLE PRECISION NOT NULL,
  started DOUBLE PRECISION, finished DOUBLE PRECISION,
  extracted INTEGER NOT NULL DEFAULT 0, bytes BIGINT NOT NULL DEFAULT 0,
  owner TEXT, lease_until DOUBLE PRECISION, callback_sent BOOLEAN NOT NULL DEFAULT FALSE,
  npages INTEGER NOT NULL, cut INTEGER NOT NULL
);
CREATE INDEX jobs_batch ON jobs (batch_id);
CREATE INDEX jobs_state ON jobs (state);
CREATE INDEX jobs_uncut ON jobs (tenant, created, id)
  WHERE state IN ('pending','running') AND cut < npages;
CREATE INDEX jobs_finished ON jobs (finished) WHERE state IN ('done','failed');
CREATE TABLE slices (
  job_id TEXT NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
  first INTEGER NOT NULL, count INTEGER NOT NULL, state TEXT NOT NULL,
  attempts INTEGER NOT NULL DEFAULT 0, failed JSONB NOT NULL DEFAULT '[]',
  owner TEXT, lease_until DOUBLE PRECISION, pages BYTEA,
  PRIMARY KEY (job_id, first)
);
CREATE INDEX slices_open ON slices (state) WHERE state <> 'done';
CREATE INDEX slices_owner ON slices (owner) WHERE owner IS NOT NULL;
CREATE TABLE inputs (
  job_id TEXT PRIMARY KEY REFERENCES jobs (id) ON DELETE CASCADE, data BYTEA NOT NULL
);
CREATE TABLE results (
  job_id TEXT PRIMARY KEY REFERENCES jobs (id) ON DELETE CASCADE, data BYTEA NOT NULL
);
CREATE TABLE store_keys (name TEXT PRIMARY KEY, value BYTEA NOT NULL);
""",
]


def _job(row: dict[str, Any]) -> Job:
    return job_from_row(row, list(row["pages"]), dict(row["options"]))


async def _jobs_where(cur: Cursor, condition: str, params: tuple[Any, ...] = ()) -> list[Job]:
    """The jobs whose rows meet the SQL ``condition`` (its ``%s`` filled from ``params``)."""
    await cur.execute(f"SELECT {_JOB_COLUMNS} FROM jobs WHERE {condition}", params)
    return [_job(row) for row in await cur.fetchall()]


async def _now(cur: Cursor) -> float:
    """The database's clock (every gateway's leases are measured on it)."""
    await cur.execute("SELECT extract(epoch FROM clock_timestamp())::float8 AS now")
    row = await cur.fetchone()
    assert row is not None
    return float(row["now"])


async def _load_key(cur: Cursor) -> bytes:
    """The result URL key: made by the first gateway, read by every other."""
    await cur.execute(
        "INSERT INTO store_keys (name, value) VALUES ('result_url', %s)"
        " ON CONFLICT (name) DO NOTHING",
        (secrets.token_bytes(32),),
    )
    await cur.execute("SELECT value FROM store_keys WHERE name = 'result_url'")
    row = await cur.fetchone()
    assert row is not None
    return bytes(row["value"])


async def migrate(conn: psycopg.AsyncConnection[Any]) -> tuple[int, int]:
    """Bring the schema to the newest version; (version found, version now)."""
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
        await conn.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
        cur = await conn.execute("SELECT COALESCE(MAX(version), 0) FROM schema_version")
        row = await cur.fetchone()
        found = int(row[0]) if row else 0
        if found > len(MIGRATIONS):
            raise RuntimeError(
                f"the job store's schema is version {found}, this gateway knows versions up to"
                f" {len(MIGRATIONS)}: upgrade the gateway"
            )
        for version in range(found + 1, len(MIGRATIONS) + 1):
            await conn.execute(MIGRATIONS[version - 1].encode())
            await conn.execute("INSERT INTO schema_version (version) VALUES (%s)", (version,))
    return found, len(MIGRATIONS)


class PostgresBackend:
    """See module doc."""

    name = "postgres"

    def __init__(self, pool: AsyncConnectionPool, url: str, max_bytes: int) -> None:
        self.pool = pool
        self.where = safe_url(url)
        self.max_bytes = max_bytes
        self._key: bytes | None = None  # loaded with the schema (:meth:`_setup`)
        self._setup_lock = asyncio.Lock()
        self._snapshot: dict[str, Any] = _empty_stats(max_bytes)
        self._snapshot_at = 0.0

    @property
    def key(self) -> bytes:
        """The result URL key, the same for every gateway on this database; StoreUnavailable
        until the database was reached once (no URL is signed or checked without it)."""
        if self._key is None:
            raise StoreUnavailable(f"job store {self.where}: not reached yet")
        return self._key

    @classmethod
    async def open(
        cls, url: str, *, max_bytes: int, timeout_s: float = 5.0, pool_size: int = 8
    ) -> PostgresBackend:
        """Connect, create or migrate the schema, load the result URL key. A database that
        cannot be reached now does not stop the gateway: the job routes answer 503 and the
        schema is set up by the first call that reaches it. A schema newer than this
        gateway knows is a RuntimeError."""
        pool = AsyncConnectionPool(
            url,
            min_size=1,
            max_size=pool_size,
            timeout=timeout_s,
            open=False,
            check=AsyncConnectionPool.check_connection,
            kwargs={"autocommit": True, "connect_timeout": max(1, round(timeout_s))},
            name="jobs",
        )
        store = cls(pool, url, max_bytes)
        await pool.open(wait=False)
        try:
            await store._ensure_setup()
            await store.refresh()
        except StoreUnavailable as exc:
            log.warning("jobs: the store is unreachable, the job routes answer 503: %s", exc)
        except BaseException:
            await pool.close()
            raise
        return store

    async def close(self) -> None:
        await self.pool.close()

    async def _ensure_setup(self) -> None:
        """Migrate the schema and load the key, once (the first call that reaches the
        database)."""
        if self._key is not None:
            return
        async with self._setup_lock:
            if self._key is not None:
                return
            try:
                async with self.pool.connection() as conn:
                    found, now = await migrate(conn)
                    async with conn.transaction(), conn.cursor(row_factory=dict_row) as cur:
                        key = await _load_key(cur)
            except psycopg.OperationalError as exc:
                raise StoreUnavailable(f"job store {self.where}: {exc}") from None
            if found != now:
                log.info("jobs: store schema migrated from version %d to %d", found, now)
            self._key = key

    async def _run(self, work: Callable[[Cursor], Awaitable[T]]) -> T:
        """``work`` in one transaction, retried when the database rolled it back (a deadlock
        between claims); StoreUnavailable when the database cannot be reached."""
        await self._ensure_setup()
        for attempt in range(_RETRIES):
            try:
                async with (
                    self.pool.connection() as conn,
                    conn.transaction(),
                    conn.cursor(row_factory=dict_row) as cur,
                ):
                    return await work(cur)
            except psycopg.errors.TransactionRollback:
                if attempt + 1 == _RETRIES:
                    raise
            except psycopg.OperationalError as exc:
                raise StoreUnavailable(f"job store {self.where}: {exc}") from None
        raise AssertionError("unreachable")

    # ------------------------------------------------------------------ jobs
    async def disk_bytes(self) -> int:
        async def read(cur: Cursor) -> int:
            await cur.execute("SELECT COALESCE(SUM(bytes), 0)::bigint AS n FROM jobs")
            row = await cur.fetchone()
            return int(row["n"]) if row else 0

        return await self._run(read)

    async def stats(self, running: bool = True) -> dict[str, Any]:
        """As :meth:`gateway.jobs.store.JobStore.stats`; the "disk" is the room under
        ``jobs.max_disk_bytes`` (the database's own disk is its operator's to watch)."""

        async def read(cur: Cursor) -> dict[str, Any]:
            now = time.time()
            await cur.execute("SELECT state, COUNT(*) AS n FROM jobs GROUP BY state")
            states = {row["state"]: int(row["n"]) for row in await cur.fetchall()}
            active: list[dict[str, Any]] = []
            if running:
                await cur.execute(
                    "SELECT j.id, j.tenant, j.created, j.npages, (SELECT SUM(count) FROM slices s"
                    " WHERE s.job_id = j.id AND s.state = 'done') AS done FROM jobs j"
                    " WHERE j.state IN ('pending','running') ORDER BY j.created LIMIT 200"
                )
                active = [
                    {
                        "id": row["id"],
                        "tenant": row["tenant"],
                        "pages": row["npages"] or 0,
                        "done": int(row["done"] or 0),
                        "age_s": round(now - row["created"], 1),
                    }
                    for row in await cur.fetchall()
                ]
            await cur.execute(
                "SELECT MIN(j.created) AS oldest, COALESCE(SUM(s.count), 0) AS n FROM slices s"
                " JOIN jobs j ON j.id = s.job_id WHERE j.state IN ('pending','running')"
                " AND s.state = 'pending'"
            )
            waiting = await cur.fetchone()
            await cur.execute(
                "SELECT MIN(created) AS oldest, COALESCE(SUM(npages - cut), 0) AS n FROM jobs"
                f" WHERE {_ACTIVE_UNCUT}"
            )
            uncut = await cur.fetchone()
            await cur.execute("SELECT COALESCE(SUM(bytes), 0)::bigint AS n FROM jobs")
            held = await cur.fetchone()
            assert waiting is not None and uncut is not None and held is not None
            times = (waiting["oldest"], uncut["oldest"])
            oldest = min((t for t in times if t is not None), default=None)
            return {
                "jobs": {
                    state: states.get(state, 0)
                    for state in ("pending", "running", "done", "failed")
                },
                "running": active,
                "pages_waiting": int(waiting["n"]) + int(uncut["n"]),
                "oldest_waiting_s": 0.0 if oldest is None else max(0.0, now - oldest),
                "disk_free_bytes": max(0, self.max_bytes - int(held["n"])),
                "disk_total_bytes": self.max_bytes,
                "store_bytes": int(held["n"]),
            }

        return await self._run(read)

    def scrape_stats(self) -> dict[str, Any]:
        """The last snapshot :meth:`refresh` took (``/metrics`` must not wait on the
        database)."""
        return self._snapshot

    async def refresh(self) -> None:
        if time.monotonic() - self._snapshot_at < STATS_EVERY_S:
            return
        self._snapshot_at = time.monotonic()
        try:
            self._snapshot = await self.stats(running=False)
        except StoreUnavailable as exc:
            log.warning("jobs: no stats snapshot: %s", exc)

    async def create_job(self, job: Job, data: bytes) -> None:
        """The job and its input in one transaction: durable (committed) when it returns."""

        async def insert(cur: Cursor) -> None:
            await cur.execute(
                "INSERT INTO jobs (id, batch_id, tenant, model, state, kind, pages, options,"
                " callback_url, created, bytes, npages, cut)"
                " VALUES (%s,%s,%s,%s,'pending',%s,%s,%s,%s,%s,%s,%s,0)",
                (
                    job.id, job.batch_id, job.tenant, job.model, job.kind, Jsonb(job.pages),
                    Jsonb(job.options), job.callback_url, job.created, len(data), len(job.pages),
                ),
            )  # fmt: skip
            await cur.execute("INSERT INTO inputs (job_id, data) VALUES (%s, %s)", (job.id, data))

        await self._run(insert)

    async def _jobs(self, condition: str, params: tuple[Any, ...] = ()) -> list[Job]:
        """:func:`_jobs_where` in a transaction of its own."""
        return await self._run(lambda cur: _jobs_where(cur, condition, params))

    async def get(self, job_id: str) -> Job | None:
        jobs = await self._jobs("id = %s", (job_id,))
        return jobs[0] if jobs else None

    async def batch(self, batch_id: str) -> list[Job]:
        return await self._jobs("batch_id = %s ORDER BY created, id", (batch_id,))

    async def fail(self, job_id: str, error: str) -> bool:
        async def write(cur: Cursor) -> bool:
            await cur.execute(
                "UPDATE jobs SET state = 'failed', error = %s, bytes = 0,"
                " finished = extract(epoch FROM clock_timestamp())"
                " WHERE id = %s AND state IN ('pending','running')",
                (error, job_id),
            )
            if not cur.rowcount:
                return False
            await cur.execute("DELETE FROM slices WHERE job_id = %s", (job_id,))
            await cur.execute("DELETE FROM inputs WHERE job_id = %s", (job_id,))
            return True

        return await self._run(write)

    # ------------------------------------------------------------------ slices
    async def claim_slices(
        self, owner: str, lease_s: float, count: int, size: SliceSize | None = None
    ) -> list[SliceClaim]:
        """As :meth:`gateway.jobs.store.JobStore.claim_slices`, across gateways: the
        candidates are locked ``SKIP LOCKED``, so a slice or an uncut job another gateway is
        claiming right now is not a candidate here."""

        async def claim(cur: Cursor) -> list[SliceClaim]:
            now = await _now(cur)
            await cur.execute(
                "SELECT s.job_id, s.first, s.count, s.attempts, s.failed, j.tenant, j.created"
                " FROM slices s JOIN jobs j ON j.id = s.job_id WHERE j.state IN"
                " ('pending','running') AND (s.state = 'pending' OR (s.state = 'running' AND"
                " s.lease_until < %s)) ORDER BY j.created, s.first LIMIT 500"
                " FOR UPDATE OF s SKIP LOCKED",
                (now,),
            )
            units: list[dict[str, Any]] = [
                {**row, "cut": None, "failed": list(row["failed"])} for row in await cur.fetchall()
            ]
            # the oldest uncut jobs of each tenant (as many as this claim can take)
            await cur.execute(
                "SELECT id FROM (SELECT id, ROW_NUMBER() OVER (PARTITION BY tenant ORDER BY"
                f" created, id) AS rank FROM jobs WHERE {_ACTIVE_UNCUT}) ranked WHERE rank <= %s",
                (count,),
            )
            ids = [row["id"] for row in await cur.fetchall()]
            if ids:
                await cur.execute(
                    "SELECT id AS job_id, cut AS first, tenant, created, cut, npages FROM jobs"
                    f" WHERE id = ANY(%s) AND {_ACTIVE_UNCUT} FOR NO KEY UPDATE SKIP LOCKED",
                    (ids,),
                )
                units += await cur.fetchall()
            if not units:
                return []
            await cur.execute(
                f"SELECT COALESCE(SUM(npages - cut), 0) AS n FROM jobs WHERE {_ACTIVE_UNCUT}"
            )
            uncut = await cur.fetchone()
            assert uncut is not None
            waiting = sum(u["count"] for u in units if u["cut"] is None) + int(uncut["n"])
            await cur.execute(
                "SELECT j.tenant, COUNT(*) AS n FROM slices s JOIN jobs j ON j.id = s.job_id"
                " WHERE s.state = 'running' AND s.lease_until >= %s GROUP BY j.tenant",
                (now,),
            )
            running = {row["tenant"]: int(row["n"]) for row in await cur.fetchall()}
            taken = plan_claims(units, running, waiting, count, size)
            until = now + lease_s
            fresh = [(t.job_id, t.first, t.count, owner, until) for t in taken if t.fresh]
            again = [(owner, until, t.job_id, t.first) for t in taken if not t.fresh]
            if fresh:
                await cur.executemany(
                    "INSERT INTO slices (job_id, first, count, state, owner, lease_until)"
                    " VALUES (%s,%s,%s,'running',%s,%s)",
                    fresh,
                )
            if again:
                await cur.executemany(
                    "UPDATE slices SET state = 'running', owner = %s, lease_until = %s"
                    " WHERE job_id = %s AND first = %s",
                    again,
                )
            cuts = cut_after(taken)
            if cuts:
                await cur.executemany(
                    "UPDATE jobs SET cut = %s WHERE id = %s", [(c, j) for j, c in cuts.items()]
                )
            job_ids = sorted({t.job_id for t in taken})
            await cur.execute(
                "UPDATE jobs SET state = 'running', started = COALESCE(started, %s)"
                " WHERE id = ANY(%s) AND state = 'pending'",
                (now, job_ids),
            )
            jobs = {job.id: job for job in await _jobs_where(cur, "id = ANY(%s)", (job_ids,))}
            return [
                SliceClaim(jobs[t.job_id], t.first, t.count, t.attempts, t.failed, t.fresh)
                for t in taken
            ]

        return await self._run(claim)

    async def renew_owned(
        self, owner: str, lease_s: float
    ) -> tuple[set[tuple[str, int]], set[str]]:
        async def renew(cur: Cursor) -> tuple[set[tuple[str, int]], set[str]]:
            until = await _now(cur) + lease_s
            await cur.execute(
                "UPDATE slices SET lease_until = %s WHERE owner = %s AND state = 'running'"
                " AND job_id IN (SELECT id FROM jobs WHERE state = 'running')"
                " RETURNING job_id, first",
                (until, owner),
            )
            slices = {(row["job_id"], row["first"]) for row in await cur.fetchall()}
            await cur.execute(
                "UPDATE jobs SET lease_until = %s WHERE owner = %s AND state = 'running'"
                " RETURNING id",
                (until, owner),
            )
            return slices, {row["id"] for row in await cur.fetchall()}

        return await self._run(renew)

    async def finish_slice(
        self, claim: SliceClaim, pages: list[dict[str, Any]], owner: str
    ) -> bool:
        """Store a slice's pages and mark it done, only while it is still ours."""
        data = json.dumps(pages, ensure_ascii=False).encode()

        async def write(cur: Cursor) -> bool:
            await cur.execute(
                "UPDATE slices SET state = 'done', owner = NULL, pages = %s WHERE job_id = %s"
                " AND first = %s AND owner = %s AND state = 'running'",
                (data, claim.job.id, claim.first, owner),
            )
            if not cur.rowcount:
                return False
            await cur.execute(
                "UPDATE jobs SET extracted = extracted + %s, bytes = bytes + %s WHERE id = %s",
                (claim.count, len(data), claim.job.id),
            )
            return True

        return await self._run(write)

    async def retry_slice(
        self, claim: SliceClaim, owner: str, failed: list[str], counted: bool, split: bool
    ) -> None:
        async def write(cur: Cursor) -> None:
            key = (claim.job.id, claim.first)
            await cur.execute(
                "SELECT 1 FROM slices WHERE job_id = %s AND first = %s AND owner = %s"
                " AND state = 'running' FOR UPDATE",
                (*key, owner),
            )
            if await cur.fetchone() is None:
                return
            if split:
                await cur.execute("DELETE FROM slices WHERE job_id = %s AND first = %s", key)
                await cur.executemany(
                    "INSERT INTO slices (job_id, first, count, state, failed)"
                    " VALUES (%s, %s, 1, 'pending', %s)",
                    [
                        (claim.job.id, first, Jsonb(failed))
                        for first in range(claim.first, claim.first + claim.count)
                    ],
                )
                return
            await cur.execute(
                "UPDATE slices SET state = 'pending', owner = NULL, attempts = attempts + %s,"
                " failed = %s WHERE job_id = %s AND first = %s",
                (int(counted), Jsonb(failed), *key),
            )

        await self._run(write)

    # ------------------------------------------------------------------ assembly
    async def claim_assembly(self, owner: str, lease_s: float) -> Job | None:
        async def claim(cur: Cursor) -> Job | None:
            now = await _now(cur)
            await cur.execute(
                f"SELECT {_JOB_COLUMNS} FROM jobs j WHERE state = 'running' AND (owner IS NULL"
                " OR lease_until < %s) AND cut >= npages AND NOT EXISTS (SELECT 1 FROM slices s"
                " WHERE s.job_id = j.id AND s.state <> 'done') ORDER BY created LIMIT 1"
                " FOR NO KEY UPDATE SKIP LOCKED",
                (now,),
            )
            row = await cur.fetchone()
            if row is None:
                return None
            await cur.execute(
                "UPDATE jobs SET owner = %s, lease_until = %s WHERE id = %s",
                (owner, now + lease_s, row["id"]),
            )
            return _job(row)

        return await self._run(claim)

    async def release_owner(self, owner: str) -> None:
        async def write(cur: Cursor) -> None:
            await cur.execute(
                "UPDATE slices SET state = 'pending', owner = NULL"
                " WHERE owner = %s AND state = 'running'",
                (owner,),
            )
            await cur.execute(
                "UPDATE jobs SET owner = NULL, lease_until = NULL WHERE owner = %s", (owner,)
            )

        await self._run(write)

    async def register_owner(self, owner: str) -> None:
        """Nothing to do: across hosts no lock tells a dead gateway from a slow one, so the
        work of a gateway that died is taken over when its leases expire."""

    async def reap_dead_owners(self) -> list[str]:
        return []

    async def read_input(self, job_id: str) -> bytes:
        async def read(cur: Cursor) -> bytes:
            await cur.execute("SELECT data FROM inputs WHERE job_id = %s", (job_id,))
            row = await cur.fetchone()
            if row is None:
                raise FileNotFoundError(f"job {job_id}: no input in the store")
            return bytes(row["data"])

        return await self._run(read)

    async def read_pages(self, job_id: str) -> list[dict[str, Any]]:
        async def read(cur: Cursor) -> list[bytes]:
            await cur.execute(
                "SELECT pages FROM slices WHERE job_id = %s ORDER BY first", (job_id,)
            )
            return [bytes(row["pages"]) for row in await cur.fetchall()]

        pages: list[dict[str, Any]] = []
        for data in await self._run(read):
            pages.extend(json.loads(data))
        return pages

    async def finish_job(self, job_id: str, result: bytes, owner: str) -> bool:
        """Store the result and mark the job done (its input and page results are dropped)."""

        async def write(cur: Cursor) -> bool:
            await cur.execute(
                "UPDATE jobs SET state = 'done', owner = NULL, bytes = %s,"
                " finished = extract(epoch FROM clock_timestamp())"
                " WHERE id = %s AND owner = %s AND state = 'running'",
                (len(result), job_id, owner),
            )
            if not cur.rowcount:
                return False
            await cur.execute(
                "INSERT INTO results (job_id, data) VALUES (%s, %s)", (job_id, result)
            )
            await cur.execute("UPDATE slices SET pages = NULL WHERE job_id = %s", (job_id,))
            await cur.execute("DELETE FROM inputs WHERE job_id = %s", (job_id,))
            return True

        return await self._run(write)

    async def result(self, job_id: str) -> ResultBody | None:
        async def read(cur: Cursor) -> bytes | None:
            await cur.execute("SELECT data FROM results WHERE job_id = %s", (job_id,))
            row = await cur.fetchone()
            return None if row is None else bytes(row["data"])

        return await self._run(read)

    async def callbacks_due(self) -> list[Job]:
        return await self._jobs(
            "state IN ('done','failed') AND callback_url IS NOT NULL AND NOT callback_sent"
        )

    async def mark_callback(self, job_id: str) -> bool:
        async def write(cur: Cursor) -> bool:
            await cur.execute(
                "UPDATE jobs SET callback_sent = TRUE WHERE id = %s AND NOT callback_sent",
                (job_id,),
            )
            return cur.rowcount > 0

        return await self._run(write)

    async def purge(self, older_than: float) -> int:
        """Delete finished jobs that finished before ``older_than`` (their slices, input and
        result go with them)."""

        async def write(cur: Cursor) -> int:
            await cur.execute(
                "DELETE FROM jobs WHERE state IN ('done','failed') AND finished < %s",
                (older_than,),
            )
            return cur.rowcount

        return await self._run(write)


def _empty_stats(max_bytes: int) -> dict[str, Any]:
    return {
        "jobs": dict.fromkeys(("pending", "running", "done", "failed"), 0),
        "running": [],
        "pages_waiting": 0,
        "oldest_waiting_s": 0.0,
        "disk_free_bytes": max_bytes,
        "disk_total_bytes": max_bytes,
        "store_bytes": 0,
    }
