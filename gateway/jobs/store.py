"""The job store: SQLite in WAL mode plus files under ``jobs.dir``.

Layout: ``jobs.sqlite3`` (jobs and their page slices), ``key`` (the HMAC key of result URLs,
made once, mode 0600), ``setup.lock`` (held while a process sets the store up),
``inputs/<jobId>`` (the document), ``pages/<jobId>/<first>.json`` (the page results of one
slice), ``results/<jobId>.jsonl`` (the assembled result), ``owners/`` (which runners are alive,
:mod:`gateway.jobs.owners`). Every file is written to a temporary name and renamed, so a killed
process leaves no half-written file under a real name. A job row is inserted only after its
input is on disk.

A job's pages are cut into slices when they are dispatched, not when the job is submitted:
``cut`` counts the positions already in a slice, and :meth:`JobStore.claim_slices` cuts the
next slice with the size its caller picks for the fleet's state at that moment.

Several gateway processes may share one store: every state change is one transaction
(``BEGIN IMMEDIATE``), and a slice or an assembly is leased to one process at a time
(``owner``, ``lease_until``); a lease that is not renewed expires and the work is taken over,
at once when the owner's process is known to be dead (:meth:`JobStore.reap_dead_owners`).
Calls block on SQLite and fsync: call them from a thread, not from the event loop
(:class:`gateway.jobs.sqlite_backend.SqliteBackend` does). A change that also writes files is
split in two, its file half and its row half (``stage_pages`` and ``commit_slice`` make
``finish_slice``), so that the files are written outside the single writer's turn.

Usage::

    store = JobStore(Path("/var/lib/paddleocr-fleet/jobs"))
    store.create_job(job, data)                    # durable when it returns
    claims = store.claim_slices("owner-1", 30, count=4, size=lambda pages, left, waiting, k: 16)
    store.finish_slice(claims[0], pages, "owner-1")
"""

from __future__ import annotations

import fcntl
import json
import os
import secrets
import shutil
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from gateway.jobs.fairness import SliceSize, cut_after, plan_claims
from gateway.jobs.owners import OwnerRegistry

_SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
  id TEXT PRIMARY KEY, batch_id TEXT, tenant TEXT, model TEXT NOT NULL,
  state TEXT NOT NULL, kind TEXT NOT NULL, pages TEXT NOT NULL, options TEXT NOT NULL,
  callback_url TEXT, error TEXT, created REAL NOT NULL, started REAL, finished REAL,
  extracted INTEGER NOT NULL DEFAULT 0, bytes INTEGER NOT NULL DEFAULT 0,
  owner TEXT, lease_until REAL, callback_sent INTEGER NOT NULL DEFAULT 0,
  npages INTEGER, cut INTEGER
);
CREATE INDEX IF NOT EXISTS jobs_batch ON jobs(batch_id);
CREATE INDEX IF NOT EXISTS jobs_state ON jobs(state);
CREATE TABLE IF NOT EXISTS slices (
  job_id TEXT NOT NULL, first INTEGER NOT NULL, count INTEGER NOT NULL,
  state TEXT NOT NULL, attempts INTEGER NOT NULL DEFAULT 0, failed TEXT NOT NULL DEFAULT '[]',
  owner TEXT, lease_until REAL, PRIMARY KEY (job_id, first)
);
CREATE INDEX IF NOT EXISTS slices_open ON slices(state) WHERE state != 'done';
"""
# after the migration (a store made before dispatch-time slicing has no cut column yet)
_INDEXES = """
CREATE INDEX IF NOT EXISTS jobs_uncut ON jobs(tenant, created, id)
  WHERE state IN ('pending','running') AND cut IS NOT NULL AND cut < npages;
"""

ACTIVE = ("pending", "running")
# cut NULL: a job stored before slices were cut at dispatch (all its slices exist)
_UNCUT = "cut IS NOT NULL AND cut < npages"
_ALL_CUT = "(cut IS NULL OR cut >= npages)"
# an active job with pages not yet in a slice: the jobs_uncut index's condition, word for word
# (SQLite uses a partial index only for a query whose WHERE names its condition)
_ACTIVE_UNCUT = f"state IN ('pending','running') AND {_UNCUT}"
# which SQLite does not always do unasked (it prefers jobs_state, every active job)
_UNCUT_JOBS = "jobs INDEXED BY jobs_uncut"
# a job to assemble: running, unleased, every page cut and every slice done
_ASSEMBLY_READY = (
    "SELECT * FROM jobs j WHERE state='running' AND (owner IS NULL OR lease_until < ?)"
    f" AND {_ALL_CUT} AND NOT EXISTS (SELECT 1 FROM slices s WHERE s.job_id=j.id"
    " AND s.state!='done')"
)


@dataclass(frozen=True)
class Job:
    """One job row; ``pages`` are the 0-based document pages it covers, in order."""

    id: str
    batch_id: str | None
    tenant: str | None
    model: str
    state: str
    kind: str
    pages: list[int]
    options: dict[str, Any]
    callback_url: str | None
    error: str | None
    created: float
    started: float | None
    finished: float | None
    extracted: int


@dataclass(frozen=True)
class SliceClaim:
    """A slice leased to one process: positions ``first .. first+count-1`` of ``job.pages``."""

    job: Job
    first: int
    count: int
    attempts: int
    failed: list[str]
    fresh: bool = True  # cut in this claim: never sent before (else ask the keepers first)


JOB_COLUMNS = tuple(f.name for f in fields(Job))
"""The ``jobs`` columns a :class:`Job` is read from, named as its fields in both stores."""

_PLAIN_JOB_COLUMNS = tuple(name for name in JOB_COLUMNS if name not in ("pages", "options"))


def job_from_row(row: Any, pages: list[int], options: dict[str, Any]) -> Job:
    """A :class:`Job` from a ``jobs`` row read by column name (SQLite's ``Row``, Postgres's
    dict); ``pages`` and ``options`` decoded by the caller, as each store keeps JSON its way."""
    return Job(**{name: row[name] for name in _PLAIN_JOB_COLUMNS}, pages=pages, options=options)


def _job(row: sqlite3.Row) -> Job:
    return job_from_row(row, json.loads(row["pages"]), json.loads(row["options"]))


def write_temporary(path: Path, data: bytes) -> Path:
    """``data`` in a fsynced temporary file beside ``path``, to be renamed onto it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    with open(tmp, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    return tmp


def write_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` via a temporary file, fsynced, then renamed."""
    os.replace(write_temporary(path, data), path)


@contextmanager
def _setting_up(root: Path) -> Iterator[None]:
    """One process at a time sets a store up. Two gateway workers opening a new store at once
    would both switch it to WAL, and SQLite answers one of them "database is locked" at once,
    without waiting (each holds the shared lock the other's exclusive lock waits for)."""
    fd = os.open(root / "setup.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


class JobStore:
    """See module doc. Calls are short and synchronous (SQLite on local disk)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        for sub in ("inputs", "pages", "results"):
            (root / sub).mkdir(exist_ok=True)
        self.key = self._load_key()
        self._db = sqlite3.connect(
            root / "jobs.sqlite3", timeout=30, isolation_level=None, check_same_thread=False
        )
        self._db.row_factory = sqlite3.Row
        # one connection for every change (they are serialized by SQLite anyway)
        self._lock = threading.RLock()
        # and one per thread for the reads a client waits on (a job's status, a batch):
        # WAL readers wait neither for the writer nor for this process's lock
        self._readers = threading.local()
        self._reader_dbs: list[sqlite3.Connection] = []
        self._db.execute("PRAGMA synchronous=FULL")
        self._durable = True
        with _setting_up(root):
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.executescript(_SCHEMA)
            self._migrate()
            self._db.executescript(_INDEXES)
        self.owners = OwnerRegistry(root / "owners")

    def _migrate(self) -> None:
        """Add the columns of dispatch-time slicing to a store made before them."""
        with self._tx() as db:
            columns = {row["name"] for row in db.execute("PRAGMA table_info(jobs)")}
            if "cut" not in columns:
                db.execute("ALTER TABLE jobs ADD COLUMN npages INTEGER")
                db.execute("ALTER TABLE jobs ADD COLUMN cut INTEGER")

    def close(self) -> None:
        with self._lock:
            self._db.close()
            for db in self._reader_dbs:
                db.close()
            self._reader_dbs.clear()
        self.owners.close()

    def _load_key(self) -> bytes:
        path = self.root / "key"
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            pass
        else:
            with os.fdopen(fd, "wb") as handle:
                handle.write(secrets.token_bytes(32))
                handle.flush()
                os.fsync(handle.fileno())
        for _ in range(50):  # another process may be writing it right now
            key = path.read_bytes()
            if len(key) == 32:
                return key
            time.sleep(0.02)
        raise RuntimeError(f"{path}: not a 32-byte key")

    @contextmanager
    def _tx(self, durable: bool = True) -> Iterator[sqlite3.Connection]:
        """One write transaction. Not ``durable``: committed without waiting for the disk
        (SQLite's WAL with ``synchronous=NORMAL``): a process killed keeps it, a power loss
        may take it back. For the runner's leases and slice marks only, whose loss means a
        slice parsed again, never a client's answer undone; the next durable commit makes
        them durable too, being later in the same log."""
        with self._lock:
            if durable != self._durable:
                self._db.execute(f"PRAGMA synchronous={'FULL' if durable else 'NORMAL'}")
                self._durable = durable
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def _read(self, sql: str, args: tuple[Any, ...] = ()) -> list[sqlite3.Row]:
        """A read on this thread's own connection (see ``__init__``)."""
        db = getattr(self._readers, "db", None)
        if db is None:
            db = sqlite3.connect(
                self.root / "jobs.sqlite3", timeout=30, isolation_level=None,
                check_same_thread=False,
            )  # fmt: skip
            db.row_factory = sqlite3.Row
            with self._lock:
                self._reader_dbs.append(db)
            self._readers.db = db
        return db.execute(sql, args).fetchall()

    # ------------------------------------------------------------------ paths
    def input_path(self, job_id: str) -> Path:
        return self.root / "inputs" / job_id

    def pages_path(self, job_id: str, first: int) -> Path:
        return self.root / "pages" / job_id / f"{first}.json"

    def result_path(self, job_id: str) -> Path:
        return self.root / "results" / f"{job_id}.jsonl"

    # ------------------------------------------------------------------ jobs
    def disk_bytes(self) -> int:
        """Bytes of inputs, page results and results the store holds (as recorded)."""
        return int(self._read("SELECT COALESCE(SUM(bytes), 0) FROM jobs")[0][0])

    def stats(self, now: float | None = None, running: bool = True) -> dict[str, Any]:
        """What monitoring reads (``/metrics``, the status page): jobs by state, the active
        jobs' page progress (the oldest 200; ``running=False``: none, as ``/metrics`` wants),
        the pages waiting (in a pending slice, or not cut yet), how long the oldest of them
        has waited (since its job was submitted) and the store's disk."""
        now = time.time() if now is None else now
        states = {
            row[0]: row[1] for row in self._read("SELECT state, COUNT(*) FROM jobs GROUP BY state")
        }
        active = [
            {
                "id": row["id"],
                "tenant": row["tenant"],
                "pages": row["npages"] or 0,
                "done": row["done"] or 0,
                "age_s": round(now - row["created"], 1),
            }
            for row in (
                self._read(
                    "SELECT j.id, j.tenant, j.created, j.npages, (SELECT SUM(count) FROM slices s"
                    " WHERE s.job_id = j.id AND s.state='done') AS done FROM jobs j"
                    " WHERE j.state IN ('pending','running') ORDER BY j.created LIMIT 200"
                )
                if running
                else []
            )
        ]
        waiting = self._read(
            "SELECT MIN(j.created), COALESCE(SUM(s.count), 0) FROM slices s"
            " JOIN jobs j ON j.id = s.job_id WHERE j.state IN ('pending','running')"
            " AND s.state='pending'"
        )[0]
        uncut = self._read(
            f"SELECT MIN(created), COALESCE(SUM(npages - cut), 0) FROM jobs"
            f" WHERE state IN ('pending','running') AND {_UNCUT}"
        )[0]
        oldest = min((t for t in (waiting[0], uncut[0]) if t is not None), default=None)
        disk = shutil.disk_usage(self.root)
        return {
            "jobs": {
                state: states.get(state, 0) for state in ("pending", "running", "done", "failed")
            },
            "running": active,
            "pages_waiting": int(waiting[1]) + int(uncut[1]),
            "oldest_waiting_s": 0.0 if oldest is None else max(0.0, now - oldest),
            "disk_free_bytes": disk.free,
            "disk_total_bytes": disk.total,
            "store_bytes": self.disk_bytes(),
        }

    def create_job(
        self, job: Job, data: bytes, slices: list[tuple[int, int]] | None = None
    ) -> None:
        """Store the input, then the job in one transaction. Its pages are cut into slices
        when they are claimed, unless ``slices`` (first position, count) are given now."""
        write_atomic(self.input_path(job.id), data)
        self.insert_job(job, len(data), slices)

    def insert_job(self, job: Job, size: int, slices: list[tuple[int, int]] | None = None) -> None:
        """The row half of :meth:`create_job`: its input (``size`` bytes) is on disk."""
        npages = len(job.pages)
        with self._tx() as db:
            db.execute(
                "INSERT INTO jobs (id, batch_id, tenant, model, state, kind, pages, options,"
                " callback_url, created, bytes, npages, cut) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (
                    job.id, job.batch_id, job.tenant, job.model, "pending", job.kind,
                    json.dumps(job.pages), json.dumps(job.options), job.callback_url,
                    job.created, size, npages, 0 if slices is None else npages,
                ),
            )  # fmt: skip
            db.executemany(
                "INSERT INTO slices (job_id, first, count, state) VALUES (?,?,?,'pending')",
                [(job.id, first, count) for first, count in slices or []],
            )

    def get(self, job_id: str) -> Job | None:
        rows = self._read("SELECT * FROM jobs WHERE id = ?", (job_id,))
        return _job(rows[0]) if rows else None

    def batch(self, batch_id: str) -> list[Job]:
        rows = self._read("SELECT * FROM jobs WHERE batch_id = ? ORDER BY created, id", (batch_id,))
        return [_job(row) for row in rows]

    def fail(self, job_id: str, error: str) -> bool:
        """Mark an active job failed (cancel included); False when it was already finished."""
        failed = self.mark_failed(job_id, error)
        if failed:
            self.drop_files(job_id)
        return failed

    def mark_failed(self, job_id: str, error: str) -> bool:
        """The row half of :meth:`fail`."""
        with self._tx() as db:
            cur = db.execute(
                "UPDATE jobs SET state='failed', error=?, finished=? WHERE id=? AND state IN"
                " ('pending','running')",
                (error, time.time(), job_id),
            )
            db.execute("DELETE FROM slices WHERE job_id=?", (job_id,))
            if cur.rowcount:
                db.execute("UPDATE jobs SET bytes=0 WHERE id=?", (job_id,))
        return cur.rowcount > 0

    def drop_files(self, job_id: str, result: bool = False) -> None:
        """A job's input and page results (and its ``result``) once its row no longer needs
        them."""
        self.input_path(job_id).unlink(missing_ok=True)
        shutil.rmtree(self.root / "pages" / job_id, ignore_errors=True)
        if result:
            self.result_path(job_id).unlink(missing_ok=True)

    # ------------------------------------------------------------------ slices
    def claim_slice(self, owner: str, lease_s: float) -> SliceClaim | None:
        """Lease the next slice (see :meth:`claim_slices`); a job's uncut pages become one
        slice."""
        claims = self.claim_slices(owner, lease_s, 1)
        return claims[0] if claims else None

    def claim_slices(
        self, owner: str, lease_s: float, count: int, size: SliceSize | None = None
    ) -> list[SliceClaim]:
        """Lease up to ``count`` slices in one transaction: the tenant with the fewest slices
        running goes first, then the oldest job, then page order. A slice given back (or whose
        lease expired) is taken as it is; a job's uncut pages are cut here, the next slice
        being ``size(job pages, its pages left, pages waiting, k)`` pages (pages waiting: in
        every job, not yet leased; ``k``: claims made so far in this call; default: every
        page left)."""
        now = time.time()
        with self._tx(durable=False) as db:
            units: list[dict[str, Any]] = [
                {**dict(row), "cut": None}
                for row in db.execute(
                    "SELECT s.job_id, s.first, s.count, s.attempts, s.failed, j.tenant, j.created"
                    " FROM slices s JOIN jobs j ON j.id = s.job_id WHERE j.state IN"
                    " ('pending','running') AND (s.state='pending' OR (s.state='running' AND"
                    " s.lease_until < ?)) ORDER BY j.created, s.first LIMIT 500",
                    (now,),
                )
            ]
            # the oldest uncut jobs of each tenant (no more than it can take in this claim):
            # a tenant that submits behind another's backlog of thousands of jobs is among
            # the candidates at once. Per tenant, on the jobs_uncut index: neither the
            # finished jobs nor the rest of a backlog are read
            units += [
                {
                    "job_id": row["id"], "first": row["cut"], "tenant": row["tenant"],
                    "created": row["created"], "cut": row["cut"], "npages": row["npages"],
                }
                for row in db.execute(
                    "SELECT j.id, j.tenant, j.created, j.cut, j.npages FROM (SELECT DISTINCT"
                    f" tenant FROM {_UNCUT_JOBS} WHERE {_ACTIVE_UNCUT}) t JOIN jobs j ON j.id IN"
                    f" (SELECT id FROM {_UNCUT_JOBS} WHERE tenant IS t.tenant AND"
                    f" {_ACTIVE_UNCUT} ORDER BY created, id LIMIT ?)",
                    (count,),
                )
            ]  # fmt: skip
            if not units:
                return []
            waiting = sum(u["count"] for u in units if u["cut"] is None) + int(
                db.execute(
                    f"SELECT COALESCE(SUM(npages - cut), 0) FROM {_UNCUT_JOBS}"
                    f" WHERE {_ACTIVE_UNCUT}"
                ).fetchone()[0]
            )
            running: dict[str | None, int] = dict(
                db.execute(
                    "SELECT j.tenant, COUNT(*) FROM slices s JOIN jobs j ON j.id = s.job_id"
                    " WHERE s.state='running' AND s.lease_until >= ? GROUP BY j.tenant",
                    (now,),
                ).fetchall()
            )
            for unit in units:
                if unit["cut"] is None:
                    unit["failed"] = json.loads(unit["failed"])
            taken = plan_claims(units, running, waiting, count, size)
            for t in taken:
                if t.fresh:
                    db.execute(
                        "INSERT INTO slices (job_id, first, count, state, owner, lease_until)"
                        " VALUES (?,?,?,'running',?,?)",
                        (t.job_id, t.first, t.count, owner, now + lease_s),
                    )
                else:
                    db.execute(
                        "UPDATE slices SET state='running', owner=?, lease_until=? WHERE"
                        " job_id=? AND first=?",
                        (owner, now + lease_s, t.job_id, t.first),
                    )
            for job_id, cut in cut_after(taken).items():
                db.execute("UPDATE jobs SET cut=? WHERE id=?", (cut, job_id))
            ids = sorted({t.job_id for t in taken})
            db.executemany(
                "UPDATE jobs SET state='running', started=COALESCE(started, ?) WHERE id=?",
                [(now, job_id) for job_id in ids],
            )
            marks = ",".join("?" * len(ids))
            jobs = {
                row["id"]: _job(row)
                for row in db.execute(f"SELECT * FROM jobs WHERE id IN ({marks})", ids)
            }
        return [
            SliceClaim(jobs[t.job_id], t.first, t.count, t.attempts, t.failed, t.fresh)
            for t in taken
        ]

    def renew_owned(self, owner: str, lease_s: float) -> tuple[set[tuple[str, int]], set[str]]:
        """Extend every lease ``owner`` holds, in one transaction; the (job, first) slices and
        the assembled jobs it still holds (a job cancelled or taken over is not among them)."""
        until = time.time() + lease_s
        with self._tx(durable=False) as db:
            db.execute(
                "UPDATE slices SET lease_until=? WHERE owner=? AND state='running' AND job_id IN"
                " (SELECT id FROM jobs WHERE state='running')",
                (until, owner),
            )
            db.execute(
                "UPDATE jobs SET lease_until=? WHERE owner=? AND state='running'", (until, owner)
            )
            slices = db.execute(
                "SELECT job_id, first FROM slices WHERE owner=? AND state='running' AND"
                " lease_until=?",
                (owner, until),
            ).fetchall()
            jobs = db.execute(
                "SELECT id FROM jobs WHERE owner=? AND state='running'", (owner,)
            ).fetchall()
        return {(row[0], row[1]) for row in slices}, {row[0] for row in jobs}

    def finish_slice(self, claim: SliceClaim, pages: list[dict[str, Any]], owner: str) -> bool:
        """Store a slice's page results and mark it done, both only while the slice is still
        ours (a runner whose lease was taken over must not overwrite the new owner's file);
        False when it was not ours."""
        return self.commit_slice(claim, owner, *self.stage_pages(claim, pages))

    def stage_pages(self, claim: SliceClaim, pages: list[dict[str, Any]]) -> tuple[Path, int]:
        """The file half of :meth:`finish_slice`: the page results in a fsynced temporary
        file, and their size."""
        data = json.dumps(pages, ensure_ascii=False).encode()
        return write_temporary(self.pages_path(claim.job.id, claim.first), data), len(data)

    def commit_slice(self, claim: SliceClaim, owner: str, staged: Path, size: int) -> bool:
        """The row half of :meth:`finish_slice`: the ``staged`` file takes its real name in
        the transaction that marks the slice done, or is removed."""
        try:
            with self._tx(durable=False) as db:
                cur = db.execute(
                    "UPDATE slices SET state='done', owner=NULL WHERE job_id=? AND first=? AND"
                    " owner=? AND state='running'",
                    (claim.job.id, claim.first, owner),
                )
                if cur.rowcount:
                    os.replace(staged, self.pages_path(claim.job.id, claim.first))
                    db.execute(
                        "UPDATE jobs SET extracted = extracted + ?, bytes = bytes + ? WHERE id=?",
                        (claim.count, size, claim.job.id),
                    )
        finally:
            staged.unlink(missing_ok=True)
        return cur.rowcount > 0

    def retry_slice(
        self, claim: SliceClaim, owner: str, failed: list[str], counted: bool, split: bool
    ) -> None:
        """Give a slice back: ``counted`` adds an attempt, ``split`` replaces it by one slice
        per page (attempts reset, the upstreams that failed it remembered)."""
        with self._tx(durable=False) as db:
            mine = db.execute(
                "SELECT 1 FROM slices WHERE job_id=? AND first=? AND owner=? AND state='running'",
                (claim.job.id, claim.first, owner),
            ).fetchone()
            if mine is None:
                return
            if split:
                db.execute(
                    "DELETE FROM slices WHERE job_id=? AND first=?", (claim.job.id, claim.first)
                )
                db.executemany(
                    "INSERT INTO slices (job_id, first, count, state, failed) VALUES"
                    " (?,?,1,'pending',?)",
                    [
                        (claim.job.id, first, json.dumps(failed))
                        for first in range(claim.first, claim.first + claim.count)
                    ],
                )
                return
            db.execute(
                "UPDATE slices SET state='pending', owner=NULL, attempts=attempts+?, failed=?"
                " WHERE job_id=? AND first=?",
                (int(counted), json.dumps(failed), claim.job.id, claim.first),
            )

    # ------------------------------------------------------------------ assembly
    def claim_assembly(self, owner: str, lease_s: float) -> Job | None:
        """Lease a running job whose slices are all done, to assemble its result. Looked for
        on a reader first: most looks find none, and take no turn of the single writer."""
        now = time.time()
        ready = self._read(f"{_ASSEMBLY_READY} ORDER BY created LIMIT 1", (now,))
        if not ready:
            return None
        with self._tx(durable=False) as db:
            row = db.execute(f"{_ASSEMBLY_READY} AND id=?", (now, ready[0]["id"])).fetchone()
            if row is None:  # another process took it meanwhile
                return None
            db.execute(
                "UPDATE jobs SET owner=?, lease_until=? WHERE id=?",
                (owner, now + lease_s, row["id"]),
            )
        return _job(row)

    def release_owner(self, owner: str) -> None:
        """Give back every lease ``owner`` holds (a process stopping cleanly), so that another
        process need not wait for them to expire."""
        with self._tx(durable=False) as db:
            db.execute(
                "UPDATE slices SET state='pending', owner=NULL WHERE owner=? AND state='running'",
                (owner,),
            )
            db.execute("UPDATE jobs SET owner=NULL, lease_until=NULL WHERE owner=?", (owner,))

    def register_owner(self, owner: str) -> None:
        """Mark ``owner`` alive for as long as this process lives (:mod:`gateway.jobs.owners`)."""
        self.owners.register(owner)

    def reap_dead_owners(self) -> list[str]:
        """Release the leases of every owner whose process is gone; the owners reaped."""
        dead = self.owners.dead()
        for owner in dead:
            self.release_owner(owner)
            self.owners.forget(owner)
        return dead

    def slice_firsts(self, job_id: str) -> list[int]:
        rows = self._read("SELECT first FROM slices WHERE job_id=? ORDER BY first", (job_id,))
        return [row[0] for row in rows]

    def finish_job(self, job_id: str, result: bytes, owner: str) -> bool:
        """Store the assembled result and mark the job done (its page files are dropped)."""
        write_atomic(self.result_path(job_id), result)
        done = self.mark_done(job_id, len(result), owner)
        if done:
            self.drop_files(job_id)
        return done

    def mark_done(self, job_id: str, size: int, owner: str) -> bool:
        """The row half of :meth:`finish_job`: its result (``size`` bytes) is on disk."""
        with self._tx() as db:
            cur = db.execute(
                "UPDATE jobs SET state='done', finished=?, owner=NULL, bytes=? WHERE id=? AND"
                " owner=? AND state='running'",
                (time.time(), size, job_id, owner),
            )
        return cur.rowcount > 0

    def callbacks_due(self) -> list[Job]:
        rows = self._read(
            "SELECT * FROM jobs WHERE state IN ('done','failed') AND callback_url IS NOT NULL"
            " AND callback_sent=0"
        )
        return [_job(row) for row in rows]

    def mark_callback(self, job_id: str) -> bool:
        """Take a callback to send (once across processes); False when another took it."""
        with self._tx() as db:
            cur = db.execute(
                "UPDATE jobs SET callback_sent=1 WHERE id=? AND callback_sent=0", (job_id,)
            )
        return cur.rowcount > 0

    def purge(self, older_than: float) -> int:
        """Delete finished jobs (rows and files) that finished before ``older_than``."""
        ids = self.purge_rows(older_than)
        for job_id in ids:
            self.drop_files(job_id, result=True)
        return len(ids)

    def purge_rows(self, older_than: float) -> list[str]:
        """The row half of :meth:`purge`: the ids whose files are to go."""
        with self._tx() as db:
            ids = [
                row[0]
                for row in db.execute(
                    "SELECT id FROM jobs WHERE state IN ('done','failed') AND finished < ?",
                    (older_than,),
                )
            ]
            db.executemany("DELETE FROM slices WHERE job_id=?", [(i,) for i in ids])
            db.executemany("DELETE FROM jobs WHERE id=?", [(i,) for i in ids])
        return ids
