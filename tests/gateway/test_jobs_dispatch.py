"""Dispatch-time slicing of jobs: pages cut when they are leased, sized to the fleet's state;
one renewal for all of a process's leases; the leases of a killed process released at once;
a store made before dispatch-time slicing still works (no HTTP; real SQLite, real processes)."""

from __future__ import annotations

import asyncio
import json
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from gateway.jobs.runner import JobRunner
from gateway.jobs.store import JobStore
from tests.gateway.jobs_helpers import pending_job
from tests.gateway.test_pool import make_pool

ROOT = Path(__file__).resolve().parents[2]


def _store_with(root: Path, *jobs: tuple[str, str, int]) -> JobStore:
    """A store in ``root`` holding pending jobs ``(id, tenant, pages)``, created in that order."""
    store = JobStore(root)
    for number, (job_id, tenant, pages) in enumerate(jobs, 1):
        store.create_job(pending_job(job_id, tenant, float(number), pages), b"%%PDF-%d" % number)
    return store


def test_pages_are_cut_when_leased_with_the_size_the_caller_picks(tmp_path: Path) -> None:
    store = _store_with(tmp_path, ("j1", "a", 40))
    calls: list[tuple[int, int, int, int]] = []

    def size(pages: int, left: int, waiting: int, claimed: int) -> int:
        calls.append((pages, left, waiting, claimed))
        return 10 + claimed

    claims = store.claim_slices("p1", 30, 3, size)
    assert [(c.first, c.count) for c in claims] == [(0, 10), (10, 11), (21, 12)]
    assert calls == [(40, 40, 40, 0), (40, 30, 30, 1), (40, 19, 19, 2)]
    assert store.claim_assembly("p1", 30) is None  # 7 pages are not in a slice yet
    (rest,) = store.claim_slices("p1", 30, 5)  # default: every page left, as one slice
    assert (rest.first, rest.count) == (33, 7)
    assert store.claim_slices("p1", 30, 5) == []
    for claim in (*claims, rest):
        assert store.finish_slice(claim, [{"n": i} for i in range(claim.count)], "p1")
    job = store.claim_assembly("p1", 30)
    assert job is not None and store.get("j1").extracted == 40
    assert store.slice_firsts("j1") == [0, 10, 21, 33]
    store.close()


def test_one_renewal_keeps_every_lease_and_drops_cancelled_ones(tmp_path: Path) -> None:
    store = _store_with(tmp_path, ("j1", "a", 4), ("j2", "a", 4), ("j3", "a", 1))
    claims = store.claim_slices("p1", 30, 2)
    (done,) = store.claim_slices("p1", 30, 1)
    assert store.finish_slice(done, [{"n": 0}], "p1")
    assembling = store.claim_assembly("p1", 30)
    assert assembling is not None and assembling.id == "j3"
    slices, jobs = store.renew_owned("p1", 30)
    assert slices == {("j1", 0), ("j2", 0)} and jobs == {"j3"}
    assert store.fail("j2", "cancelled by the caller")
    slices, jobs = store.renew_owned("p1", 30)
    assert slices == {("j1", 0)} and jobs == {"j3"}
    assert store.renew_owned("p2", 30) == (set(), set())
    assert claims[0].job.id == "j1"
    store.close()


_HOLDER = """
import sys, time
from pathlib import Path
from gateway.jobs.store import JobStore
store = JobStore(Path(sys.argv[1]))
store.register_owner(sys.argv[2])
claim = store.claim_slice(sys.argv[2], lease_s=600)
print(claim.job.id if claim else "none", flush=True)
time.sleep(600)
"""


def _holder(root: Path, owner: str) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, str(root), owner],
        cwd=ROOT, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() != "none"
    return proc


def test_the_leases_of_a_killed_process_are_released_at_once(tmp_path: Path) -> None:
    store = JobStore(tmp_path)
    store.register_owner("me")
    store.create_job(pending_job("j1", "a", 1.0, 1), b"%PDF-1")
    store.create_job(pending_job("j2", "a", 2.0, 1), b"%PDF-2")
    alive, killed = _holder(tmp_path, "alive"), _holder(tmp_path, "killed")
    try:
        assert store.claim_slice("me", 30) is None  # both slices leased for 600 s
        assert store.reap_dead_owners() == []  # both holders alive: nothing released
        killed.send_signal(signal.SIGKILL)
        killed.wait(10)
        assert store.reap_dead_owners() == ["killed"]
        freed = store.claim_slice("me", 30)
        assert freed is not None  # long before its lease would have expired
        assert store.claim_slice("me", 30) is None  # the live holder keeps its own
        assert not (tmp_path / "owners" / "killed").exists()
        assert (tmp_path / "owners" / "me").exists() and (tmp_path / "owners" / "alive").exists()
    finally:
        for proc in (alive, killed):
            proc.kill()
            proc.wait(10)
    store.close()
    assert not (tmp_path / "owners" / "me").exists()  # a clean stop removes its own file


_OLD_SCHEMA = """
CREATE TABLE jobs (
  id TEXT PRIMARY KEY, batch_id TEXT, tenant TEXT, model TEXT NOT NULL,
  state TEXT NOT NULL, kind TEXT NOT NULL, pages TEXT NOT NULL, options TEXT NOT NULL,
  callback_url TEXT, error TEXT, created REAL NOT NULL, started REAL, finished REAL,
  extracted INTEGER NOT NULL DEFAULT 0, bytes INTEGER NOT NULL DEFAULT 0,
  owner TEXT, lease_until REAL, callback_sent INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE slices (
  job_id TEXT NOT NULL, first INTEGER NOT NULL, count INTEGER NOT NULL,
  state TEXT NOT NULL, attempts INTEGER NOT NULL DEFAULT 0, failed TEXT NOT NULL DEFAULT '[]',
  owner TEXT, lease_until REAL, PRIMARY KEY (job_id, first)
);
"""


def test_a_store_made_before_dispatch_time_slicing_finishes_its_jobs(tmp_path: Path) -> None:
    with sqlite3.connect(tmp_path / "jobs.sqlite3") as db:
        db.executescript(_OLD_SCHEMA)
        db.execute(
            "INSERT INTO jobs (id, tenant, model, state, kind, pages, options, created) VALUES"
            " ('old', 'a', 'PaddleOCR-VL-1.5', 'pending', 'pdf', ?, '{}', 1.0)",
            (json.dumps([0, 1, 2, 3]),),
        )
        db.executemany(
            "INSERT INTO slices (job_id, first, count, state) VALUES ('old', ?, 2, 'pending')",
            [(0,), (2,)],
        )
    (tmp_path / "inputs").mkdir()
    (tmp_path / "inputs" / "old").write_bytes(b"%PDF-old")
    store = JobStore(tmp_path)
    again = JobStore(tmp_path)  # a second process migrating the same store: a no-op
    claims = store.claim_slices("p1", 30, 5, lambda pages, left, waiting, k: 1)
    assert [(c.first, c.count) for c in claims] == [(0, 2), (2, 2)]  # its own slices, as cut
    for claim in claims:
        assert store.finish_slice(claim, [{"n": 0}, {"n": 1}], "p1")
    job = again.claim_assembly("p2", 30)
    assert job is not None and job.id == "old"
    store.close()
    again.close()


def _runner(pool: Any) -> JobRunner:
    runtime = SimpleNamespace(pool=pool, settings=pool.settings)  # fanout defaults: 8, 16
    return JobRunner(runtime, store=None)  # type: ignore[arg-type]


def test_slice_size_spreads_on_an_idle_fleet_and_grows_under_load() -> None:
    async def main() -> None:
        pool = make_pool(4, load_balance={"mode": "queue"})
        runner = _runner(pool)
        room, start = runner.room()  # idle: 4 slices start at once, 1 more waits ready
        assert (room, start) == (5, 4)
        size = runner.slice_size(start)
        assert size(40, 40, 40, 0) == 10  # 40 pages over 4 free instances
        assert size(40, 30, 30, 1) == 10  # and the next slices of the same claim
        assert size(40, 40, 400, 0) == 16  # many pages waiting: the largest slices
        assert size(40, 10, 10, 4) == 10  # a slice that will wait gets the most pages
        assert size(8, 8, 40, 0) == 8  # a document of threshold_pages is one slice
        # two interactive requests in flight: no slice waits ready, and a reserve of
        # ceil(sqrt(2)) = 2 instances stays free for the next interactive ones
        leases = [await pool.acquire(), await pool.acquire()]
        assert runner.room() == (0, 0)
        pool.release(leases.pop(), "success", 0.1)
        assert runner.room() == (2, 2)  # one in flight: a reserve of 1
        # half the slots not free for slices: no slice under half the largest
        assert runner.slice_size(2)(40, 10, 10, 0) == 8
        pool.release(leases.pop(), "success", 0.1)
        assert runner.room() == (5, 4)

    asyncio.run(main())
