"""Jobs on one shared PostgreSQL store (issue 25): 2 gateways against 1, and the store's cost.

    python -m bench.jobs_shared_store            # 200 jobs x 20 pages, 48 instances (~2 min)
    python -m bench.jobs_shared_store --smoke    # seconds: 4 instances (tests/bench)

One simulated fleet (:mod:`bench.fleet`, 48 instances, 0.2 s per request + 0.2 s per page: a
10-page slice takes 2.2 s, so the fleet parses 48 x 10 / 2.2 = 218 pages/s, low enough for one
gateway on this 2-core machine to reach), one slice keeper in front of it, one real PostgreSQL
(:mod:`doubles.postgres_server`), and three scenarios in turn, each on an empty store:

- ``sqlite``: 1 gateway on its embedded SQLite store (the reference);
- ``postgres-1``: 1 gateway on PostgreSQL, the whole fleet behind it;
- ``postgres-2``: 2 gateways on the same PostgreSQL database, each with half the fleet: the
  per-host layout the Pulumi program deploys (every host's gateway lists that host's PaddleX
  instances, ``FleetPlan.paddlex_of``), so the fleet's capacity is only reached if both
  gateways take slices from the shared queue; the jobs are submitted alternately to each.

Each gateway runs one worker process (``GATEWAY_WORKERS=1``: on 2 cores, 2 gateways x 2
workers would measure the scheduler). The same backlog each time: every job a numbered PDF of
its own, submitted by a few tokens at once (``submit_parallel`` uploads in flight each), then
polled (one batch listing every 0.5 s) until every job is done. Measured:

- pages/s while draining (the fleet's pages between 10 % and 90 % of the backlog parsed) and
  its ratio to the fleet's capacity; the time from the first submit to the last job done;
- CPU seconds per page (psutil, live and reaped user + system time) of the PostgreSQL server's
  process tree (postmaster, its backends and background workers) and of the gateways';
- where the store's cost goes, per page: its transactions, rows written and WAL bytes
  (``pg_stat_database``, ``pg_current_wal_lsn``) and its CPU split between the backends
  running the gateways' SQL and the background workers;
- jobs finished whole and in order (every result fetched and its pages checked);
- the pages each gateway's half of the fleet parsed (from the fleet's log), so a second gateway
  that took no work shows.

Results: ``bench/results/jobs-shared-store-<profile>.json`` and the markdown printed at the end
(the table in docs/benchmarks.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import itertools
import math
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from unittest import mock

import psutil
import psycopg

from bench.common import parser, profile_name
from bench.jobs import BacklogProfile, Stack, processes, result_of, sigterm_unwinds, write_results
from bench.jobs_docs import numbered_pdf
from bench.jobs_scenarios import ADMIN_TOKEN, check_all, jobs_client, submit_all, wait_batch
from bench.loadgen import percentile
from bench.procs import GatewayProc
from bench.procstat import MachineMeter, cpu_s, tree, tree_cpu_s
from bench.report import Table
from bench.workload import FleetSpec
from doubles.postgres_server import PostgresServer

RESULTS_DIR = Path(__file__).resolve().parent / "results"
SCENARIOS = {  # label -> its row in the table, on PostgreSQL or not, gateways
    "sqlite": ("1 gateway, SQLite", False, 1),
    "postgres-1": ("1 gateway, PostgreSQL", True, 1),
    "postgres-2": ("2 gateways, one PostgreSQL", True, 2),
}


@dataclass(frozen=True)
class SharedProfile(BacklogProfile):
    """The fleet, the backlog and the gateways' job settings of one run."""

    poll_s: float = 0.5
    limit_s: float = 300.0  # a scenario that has not drained by then failed


PROFILES = {
    "default": SharedProfile(
        "default", FleetSpec(n=48, slow_factors=(), request_s=0.2, page_s=0.2), jobs=200,
        tokens=4, doc_pages=20, threshold_pages=2, max_slice_pages=10,
    ),
    "smoke": SharedProfile(
        "smoke", FleetSpec(n=4, slow_factors=(), request_s=0.02, page_s=0.01), jobs=12,
        tokens=2, doc_pages=8, submit_parallel=2, threshold_pages=2, max_slice_pages=4,
        poll_s=0.2, limit_s=60.0, lease_s=2.0,
    ),
}  # fmt: skip


def gateway_config(
    prof: SharedProfile, stack: Stack, name: str, store_url: str | None, part: slice
) -> dict[str, Any]:
    """The backlog's config with the upstreams in ``part`` and the store: PostgreSQL at
    ``store_url``, else SQLite in a folder of this gateway's own."""
    cfg = prof.config(stack, stack.workdir / f"jobs-{name}")
    cfg["upstreams"] = cfg["upstreams"][part]
    if store_url is not None:
        cfg["jobs"] = {k: v for k, v in cfg["jobs"].items() if k != "dir"} | {
            "store_url": store_url
        }
    return cfg


def postmaster_pid(server: PostgresServer) -> int:
    """The PostgreSQL server's main process (first line of ``postmaster.pid``)."""
    return int((server.data / "postmaster.pid").read_text().split()[0])


def backend_cpu(postmaster: int) -> dict[int, float]:
    """CPU seconds of each live backend serving a client (``postgres: user db host(port) ...``);
    the rest of the tree is the postmaster and its background workers (WAL writer,
    checkpointer, autovacuum)."""
    out = {}
    for proc in tree(postmaster):
        with contextlib.suppress(psutil.Error):
            if "127.0.0.1(" in " ".join(proc.cmdline()):
                out[proc.pid] = cpu_s(proc.pid)
    return out


STAT_COLUMNS = ("xact_commit", "xact_rollback", "tup_inserted", "tup_updated", "tup_deleted")


def database_stats(url: str) -> dict[str, int]:
    """The database's cumulative counters: transactions, rows written, WAL position (bytes)."""
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            f"SELECT {', '.join(STAT_COLUMNS)}, pg_current_wal_lsn() - '0/0'::pg_lsn,"
            " pg_database_size(current_database())"
            " FROM pg_stat_database WHERE datname = current_database()"
        ).fetchone()
    assert row is not None
    return dict(zip((*STAT_COLUMNS, "wal_bytes", "size_bytes"), map(int, row), strict=True))


def store_cost(
    before: dict[str, int], after: dict[str, int], backends: float, total: float, pages: int
) -> dict[str, float]:
    """Per page parsed: the store's transactions, rows written, WAL bytes and CPU split between
    the client backends (the gateways' SQL) and the rest (WAL writer, checkpointer, vacuum)."""
    delta = {k: after[k] - before[k] for k in (*STAT_COLUMNS, "wal_bytes")}
    per = max(1, pages)
    return {
        "transactions_per_page": round((delta["xact_commit"] + delta["xact_rollback"]) / per, 3),
        "rows_written_per_page": round(
            (delta["tup_inserted"] + delta["tup_updated"] + delta["tup_deleted"]) / per, 3
        ),
        "wal_bytes_per_page": round(delta["wal_bytes"] / per),
        "backends_cpu_ms_per_page": round(1000 * backends / per, 3),
        "background_cpu_ms_per_page": round(1000 * max(0.0, total - backends) / per, 3),
        "size_mb_end": round(after["size_bytes"] / 2**20, 2),
    }


async def scenario(
    prof: SharedProfile, stack: Stack, server: PostgresServer | None, gateways: int, label: str
) -> dict[str, Any]:
    """Start ``gateways`` gateways (PostgreSQL when ``server``, else SQLite), drain the backlog
    through them, measure, stop them."""
    n = prof.fleet.n
    store_url = server.new_database() if server is not None else None
    parts = [slice(i * n // gateways, (i + 1) * n // gateways) for i in range(gateways)]
    started: list[GatewayProc] = []
    for i, part in enumerate(parts):
        cfg = gateway_config(prof, stack, f"{label}-{i}", store_url, part)
        started.append(await stack.start_gateway(cfg, f"{label}-{i}", timeout_s=60))
    urls = [f"http://127.0.0.1:{g.port}" for g in started]
    before = await asyncio.to_thread(database_stats, store_url) if store_url else None
    try:
        out = await drain(prof, stack, server, started, urls, label)
    finally:
        for gateway in started:
            gateway.stop()
    backends_s = out.pop("backends_cpu_s")
    if store_url is not None and before is not None:
        # a backend reports its counters when idle (at most every 10 s) or when it exits:
        # read them once the gateways' connections are gone
        await asyncio.sleep(1.0)
        after = await asyncio.to_thread(database_stats, store_url)
        out["store_cost"] = store_cost(
            before, after, backends_s, out["cpu_s"]["store"], out["pages"]
        )
    log = await stack.fleet.log()
    out["pages_by_gateway"] = [
        sum(len(e["pages"]) for e in log if part.start <= e["instance"] < part.stop)
        for part in parts
    ]
    out["slice_gap_ms"] = slice_gaps(log)
    return out


def slice_gaps(log: list[dict[str, Any]]) -> dict[str, float | int | None]:
    """How long an instance waited between the end of a slice and the start of its next one
    (ms, from the fleet's log): the dispatch's share of the capacity not reached (a claim in
    the store, the runner's poll, the keeper)."""
    by_instance: dict[int, list[dict[str, Any]]] = {}
    for entry in log:
        by_instance.setdefault(entry["instance"], []).append(entry)
    gaps = []
    for entries in by_instance.values():
        entries.sort(key=lambda e: e["start"])
        gaps += [1000 * (b["start"] - a["end"]) for a, b in itertools.pairwise(entries)]
    gaps.sort()
    p50, p90 = percentile(gaps, 50), percentile(gaps, 90)
    return {
        "slices": len(log),
        "p50": None if math.isnan(p50) else round(p50, 1),
        "p90": None if math.isnan(p90) else round(p90, 1),
    }


async def drain(
    prof: SharedProfile,
    stack: Stack,
    server: PostgresServer | None,
    gateways: list[GatewayProc],
    urls: list[str],
    label: str,
) -> dict[str, Any]:
    """The backlog through ``urls`` (job ``j`` to ``urls[j % len(urls)]``), until all done."""
    batch = f"shared-{label}"
    total_pages = prof.jobs * prof.doc_pages
    pdfs = {j: numbered_pdf(j, prof.doc_pages) for j in range(prof.jobs)}
    doc_of: dict[str, int] = {}
    await stack.fleet.log()
    pg_pid = postmaster_pid(server) if server is not None else None
    backends0 = backend_cpu(pg_pid) if pg_pid else {}

    def cpu_so_far() -> dict[str, float]:
        """CPU seconds so far of the PostgreSQL server's tree and of the gateways'."""
        store = tree_cpu_s(pg_pid) if pg_pid else 0.0
        return {"store": store, "gateways": sum(tree_cpu_s(g.proc.pid) for g in gateways)}

    cpu0 = cpu_so_far()
    machine = MachineMeter()
    pages0 = await stack.fleet.pages()
    t0 = time.monotonic()
    timeline: list[tuple[float, int]] = []

    async def tenant(index: int) -> None:
        mine = {j: pdfs[j] for j in range(prof.jobs) if j % prof.tokens == index}
        clients = [jobs_client(u, prof.token(index), timeout_s=300) for u in urls]
        try:  # job j through urls[j % len(urls)]
            ids = await submit_all(clients, mine, batch, prof.submit_parallel)
            doc_of.update({job_id: j for j, job_id in ids.items()})
        finally:
            for client in clients:
                await client.aclose()

    async def sample(done: asyncio.Event) -> None:
        while not done.is_set():
            timeline.append((time.monotonic() - t0, await stack.fleet.pages() - pages0))
            await asyncio.sleep(0.25)

    finished = asyncio.Event()
    sampler = asyncio.create_task(sample(finished))
    await asyncio.gather(*(tenant(i) for i in range(prof.tokens)))
    submitted_s = time.monotonic() - t0
    async with jobs_client(urls[0], ADMIN_TOKEN, timeout_s=60) as admin:
        left_s = prof.limit_s - (time.monotonic() - t0)
        jobs = await wait_batch(admin, batch, prof.jobs, left_s, prof.poll_s)
        drained_s = time.monotonic() - t0
        cpu = {k: v - cpu0[k] for k, v in cpu_so_far().items()}
        busy = machine.read()
        backends = backend_cpu(pg_pid) if pg_pid else {}
        finished.set()
        await sampler
        timeline.append((drained_s, await stack.fleet.pages() - pages0))
        check = await check_all(admin, jobs, doc_of, prof.doc_pages)
    pages = timeline[-1][1]
    return {
        "gateways": len(urls),
        "store": "postgresql" if server is not None else "sqlite",
        "jobs": prof.jobs,
        "pages": pages,
        "pages_expected": total_pages,
        "submitted_s": round(submitted_s, 3),
        "drained_s": round(drained_s, 3),
        "pages_per_s": steady_rate(timeline, total_pages),
        "pages_per_s_overall": round(pages / drained_s, 2),
        "cpu_s": {k: round(v, 3) for k, v in cpu.items()},
        "cpu_ms_per_page": {k: round(1000 * v / max(1, pages), 3) for k, v in cpu.items()},
        "machine_busy_cores": round(busy, 3),
        "backends_cpu_s": sum(v - backends0.get(pid, 0.0) for pid, v in backends.items()),
        "whole_in_order": check["whole_in_order"],
        "problems": dict(list(check["problems"].items())[:5]),
    }


def steady_rate(timeline: list[tuple[float, int]], total: int) -> float | None:
    """Pages/s between the samples where 10 % and 90 % of ``total`` had been parsed (the
    drain without the first slices' start and the last jobs' tail)."""
    lo = next((p for p in timeline if p[1] >= 0.1 * total), None)
    hi = next((p for p in timeline if p[1] >= 0.9 * total), None)
    if lo is None or hi is None or hi[0] <= lo[0]:
        return None
    return round((hi[1] - lo[1]) / (hi[0] - lo[0]), 2)


async def measure(prof: SharedProfile, keep: bool) -> dict[str, Any]:
    server = PostgresServer.create()
    if server is None:
        raise RuntimeError("PostgreSQL's server binaries are absent (apt-get install postgresql)")
    try:
        async with processes(prof.fleet, keep) as stack:
            out: dict[str, Any] = {}
            for label, (_, on_postgres, gateways) in SCENARIOS.items():
                print(f"-- scenario {label}", file=sys.stderr, flush=True)
                pg = server if on_postgres else None
                out[label] = await scenario(prof, stack, pg, gateways, label)
                print(out[label], file=sys.stderr, flush=True)
            return out
    finally:
        server.destroy()


def markdown(result: dict[str, Any]) -> str:
    """The table of docs/benchmarks.md."""
    capacity = result["capacity"]["pages_per_s"]
    table = Table(
        "jobs on one shared PostgreSQL store",
        ("scenario", "pages/s draining", "of capacity", "drain (s)", "jobs whole",
         "pages per gateway", "idle between slices p50 / p90 (ms)",
         "store CPU ms/page", "gateways CPU ms/page", "machine busy (cores)"),
    )  # fmt: skip
    for label, s in result["scenarios"].items():
        rate = s["pages_per_s"]
        store_ms = s["cpu_ms_per_page"]["store"] if s["store"] == "postgresql" else None
        table.add(
            SCENARIOS[label][0],
            "-" if rate is None else f"{rate:.1f}",
            "-" if rate is None else f"{rate / capacity:.0%}",
            f"{s['drained_s']:.1f}",
            f"{s['whole_in_order']}/{s['jobs']}",
            " / ".join(str(p) for p in s["pages_by_gateway"]),
            f"{s['slice_gap_ms']['p50']} / {s['slice_gap_ms']['p90']}",
            "- (in the gateway)" if store_ms is None else f"{store_ms:.2f}",
            f"{s['cpu_ms_per_page']['gateways']:.2f}",
            f"{s['machine_busy_cores']:.2f}",
        )
    cost = Table(
        "the PostgreSQL store's cost per page",
        ("scenario", "transactions", "rows written", "WAL bytes", "backends CPU ms",
         "background CPU ms", "database at the end (MB)"),
    )  # fmt: skip
    for label, s in result["scenarios"].items():
        if (c := s.get("store_cost")) is not None:
            cost.add(
                SCENARIOS[label][0], f"{c['transactions_per_page']:.2f}",
                f"{c['rows_written_per_page']:.2f}", f"{c['wal_bytes_per_page']:,}",
                f"{c['backends_cpu_ms_per_page']:.3f}", f"{c['background_cpu_ms_per_page']:.3f}",
                f"{c['size_mb_end']:.1f}",
            )  # fmt: skip
    return (
        f"Fleet capacity: {capacity:.1f} pages/s\n\n{table.markdown()}\n\n"
        f"Per page parsed:\n\n{cost.markdown()}"
    )


def main(argv: list[str] | None = None) -> int:
    ap = parser("jobs_shared_store", __doc__, smoke="seconds (tests/bench)")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--keep-logs", action="store_true")
    args = ap.parse_args(argv)
    prof = PROFILES[profile_name(args, "smoke")]
    started = dt.datetime.now(dt.UTC)
    # every `python -m gateway` started meanwhile reads it; the environment is restored after
    with sigterm_unwinds(), mock.patch.dict(os.environ, GATEWAY_WORKERS="1"):
        measured = asyncio.run(measure(prof, args.keep_logs))
    meta_extra = {"gateway_workers": 1}
    result = result_of(prof, started, prof.jobs_profile(), meta_extra, scenarios=measured)
    out = args.out or RESULTS_DIR / f"jobs-shared-store-{prof.name}.json"
    write_results(result, out, markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
