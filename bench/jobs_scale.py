"""Jobs at scale (issue 24, item 3): the backlog a large customer brings.

    python -m bench.jobs_scale                      # 2,000 jobs x 100 pages, 20 tokens
    python -m bench.jobs_scale --compare REV        # the same run first against REV's gateway/
    python -m bench.jobs_scale --smoke              # seconds: 4 instances (tests/bench)

A real gateway process, the slice keeper and the simulated fleet of :mod:`bench.jobs`; every
token submits its share of the jobs at once, then the backlog drains for ``window_s`` seconds
from the first submit while probes (from a process of their own) time status polls and late
submits, and the fleet's pages, the gateway's memory and the store on disk are sampled; then
``kill -9`` of the gateway with the backlog in its store, and a restart on it. What each
measurement is, and the results: docs/benchmarks.md, "At scale: a large customer's backlog".

Results: ``bench/results/jobs-scale-<profile>.json``, the markdown printed at the end (the
table in docs/benchmarks.md) and, with ``--plot``, ``docs/img/jobs_scale.png``.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import json
import multiprocessing
import os
import random
import shutil
import signal
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from bench.common import parser, profile_name
from bench.jobs import BacklogProfile, Stack, processes, result_of, sigterm_unwinds, write_results
from bench.jobs_docs import numbered_pdf
from bench.jobs_scale_report import markdown, plot, summarize, targets
from bench.jobs_scenarios import ADMIN_TOKEN, capacities, jobs_client, submit
from bench.procs import REPO, FleetProc, GatewayProc, snapshot_gateway, tmpdir
from bench.procstat import CpuMeter, rss_bytes
from bench.proxies import snapshot_rev
from bench.workload import FleetSpec
from fleetctl import jobclient
from fleetctl.client import OcrError

RESULTS_DIR = Path(__file__).resolve().parent / "results"
LATE = "tenant-late"  # the token outside the backlog whose submits are probes


@dataclass(frozen=True)
class ScaleProfile(BacklogProfile):
    """One scale run: the backlog, the window, the probes."""

    window_s: float = 150.0  # from the first submit
    status_every_s: float = 0.05
    submit_every_s: float = 2.0
    restart_watch_s: float = 15.0
    seed: int = 24


PROFILES = {
    "default": ScaleProfile(
        "default", FleetSpec(n=48, slow_factors=(), request_s=0.1, page_s=0.05), jobs=2000,
        tokens=20, doc_pages=100,
    ),
    "smoke": ScaleProfile(
        "smoke", FleetSpec(n=4, slow_factors=(), request_s=0.02, page_s=0.01), jobs=24,
        tokens=3, doc_pages=12, submit_parallel=2, window_s=6.0, status_every_s=0.1,
        submit_every_s=1.0, restart_watch_s=3.0, lease_s=2.0,
    ),
}  # fmt: skip
token = ScaleProfile.token


def gateway_config(prof: ScaleProfile, stack: Stack) -> dict[str, Any]:
    """The backlog's config plus the late token, the store allowed 50 GiB."""
    cfg = prof.config(stack, stack.workdir / "jobs", {LATE: token(-1)})
    cfg["jobs"] = {**cfg["jobs"], "max_disk_bytes": 50 * 2**30}
    return cfg


def disk_bytes(root: Path) -> int:
    """Bytes of every file under ``root`` (the SQLite files, inputs, page results)."""
    total = 0
    for folder, _, files in os.walk(root):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.stat(os.path.join(folder, name)).st_size
    return total


class Run:
    """The processes and what was measured so far, for one gateway source."""

    def __init__(self, prof: ScaleProfile, workdir: Path) -> None:
        self.prof = prof
        self.jobs_dir = workdir / "jobs"
        self.pdfs = {t: numbered_pdf(t, prof.doc_pages) for t in range(prof.tokens)}
        self.late_pdf = numbered_pdf(prof.tokens, prof.doc_pages)
        self.ids: list[str] = []
        self.submits: list[tuple[float, float, int]] = []  # (t, seconds, token)
        self.probe_submits: list[tuple[float, float | None]] = []
        self.statuses: list[tuple[float, float | None]] = []
        self.late_jobs: dict[str, float] = {}  # job id -> submitted (t)
        self.timeline: list[dict[str, float]] = []
        self.t0 = 0.0
        self.wall0 = 0.0
        self.bulk_done: float | None = None

    def now(self) -> float:
        return time.monotonic() - self.t0

    async def bulk_submit(self, url: str) -> None:
        """Every token submits its jobs, ``submit_parallel`` uploads in flight per token."""
        prof = self.prof

        async def tenant(index: int) -> None:
            count = prof.jobs // prof.tokens + (index < prof.jobs % prof.tokens)
            queue = list(range(count))
            async with jobs_client(url, token(index), timeout_s=300) as client:

                async def uploader() -> None:
                    while queue:
                        queue.pop()
                        started = time.monotonic()
                        job_id = await submit(client, self.pdfs[index], f"scale-{index}")
                        self.submits.append((started - self.t0, time.monotonic() - started, index))
                        self.ids.append(job_id)

                await asyncio.gather(*(uploader() for _ in range(prof.submit_parallel)))

        await asyncio.gather(*(tenant(i) for i in range(prof.tokens)))
        self.bulk_done = self.now()

    async def probes_apart(self, url: str, until: float) -> None:
        """:meth:`probes` in a process of its own, told the job ids as they are submitted."""
        context = multiprocessing.get_context("spawn")
        ours, theirs = context.Pipe()
        args = (self.prof, url, self.t0, until, theirs)
        child = context.Process(target=_probe_process, args=args, daemon=True)
        child.start()
        told = 0
        while child.is_alive() and self.now() < until:
            if len(self.ids) > told:
                ours.send(self.ids[told:])
                told = len(self.ids)
            await asyncio.sleep(0.1)
        found = await asyncio.to_thread(ours.recv)
        await asyncio.to_thread(child.join, 30)
        self.probe_submits, self.statuses = found["probe_submits"], found["statuses"]
        self.late_jobs = found["late_jobs"]

    async def probes(self, url: str, until: float, ids: Connection) -> None:
        """Status polls and late submits on their own schedules (open loop) until ``until``,
        of the job ids told on ``ids``."""
        prof = self.prof
        rng = random.Random(prof.seed)
        tasks: set[asyncio.Task[None]] = set()
        async with (
            jobs_client(url, ADMIN_TOKEN, timeout_s=60) as admin,
            jobs_client(url, token(-1), timeout_s=60) as late,
        ):

            async def status(at: float) -> None:
                while ids.poll():
                    self.ids.extend(ids.recv())
                if not self.ids:
                    return
                try:
                    await jobclient.status(admin, rng.choice(self.ids))
                    self.statuses.append((at, self.now() - at))
                except OcrError:
                    self.statuses.append((at, None))

            async def late_submit(at: float) -> None:
                try:
                    job_id = await submit(late, self.late_pdf, "scale-late")
                    self.probe_submits.append((at, self.now() - at))
                    self.late_jobs[job_id] = at
                except OcrError:
                    self.probe_submits.append((at, None))

            begin = max(0.0, self.now())  # a process of its own starts late
            next_status, next_submit = begin + 0.5, begin + 1.0
            while (at := min(next_status, next_submit)) < until:
                await asyncio.sleep(max(0.0, at - self.now()))
                if at == next_status:
                    task = asyncio.create_task(status(at))
                    next_status += prof.status_every_s
                else:
                    task = asyncio.create_task(late_submit(at))
                    next_submit += prof.submit_every_s
                tasks.add(task)
                task.add_done_callback(tasks.discard)
            if tasks:
                await asyncio.wait(tasks, timeout=30)

    async def sample(self, fleet: FleetProc, gateway: GatewayProc, until: float) -> None:
        """Every second: pages done, the gateway's memory; every 5 s the store on disk."""
        tick = 0
        while (at := self.now()) < until:
            point = {
                "t": round(at, 3),
                "pages": await fleet.pages(),
                "submitted_jobs": len(self.ids) + len(self.late_jobs),
                "rss": rss_bytes(gateway.proc.pid),
            }
            if tick % 5 == 0:
                point["disk"] = await asyncio.to_thread(disk_bytes, self.jobs_dir)
            self.timeline.append(point)
            tick += 1
            await asyncio.sleep(max(0.0, tick - self.now()))

    async def late_done(self, url: str) -> dict[str, float | None]:
        """When each late job was done (wall clock, to the second; None: not in the window)."""
        out: dict[str, float | None] = {}
        async with jobs_client(url, ADMIN_TOKEN, timeout_s=60) as admin:
            for job in await jobclient.batch(admin, "scale-late") if self.late_jobs else []:
                end = job["extractProgress"]["endTime"]  # UTC, to the second
                done = end is not None and job["state"] == "done"
                when = dt.datetime.strptime(end, "%Y-%m-%d %H:%M:%S") if done else None
                out[job["jobId"]] = when.replace(tzinfo=dt.UTC).timestamp() if when else None
        return out

    async def restart(self, gateway: GatewayProc, cfg: dict, stack: Stack) -> dict[str, Any]:
        """``kill -9`` with the backlog in the store; seconds until served and parsing again."""
        os.killpg(gateway.proc.pid, signal.SIGKILL)
        gateway.proc.wait()
        await stack.fleet.log()
        killed = time.time()
        started = time.monotonic()
        new = await stack.start_gateway(cfg, "restarted", timeout_s=120)
        healthy = time.monotonic() - started
        url = f"http://127.0.0.1:{new.port}"
        served = None
        async with jobs_client(url, ADMIN_TOKEN, timeout_s=60) as admin:
            while time.monotonic() - started < 120:
                try:
                    await jobclient.status(admin, self.ids[-1])
                    served = time.monotonic() - started
                    break
                except OcrError:
                    await asyncio.sleep(0.05)
            await asyncio.sleep(max(0.0, self.prof.restart_watch_s - (time.monotonic() - started)))
        log = await stack.fleet.log(clear=False)
        # a parse begun after the kill was sent by the restarted gateway (none was queued:
        # the old one's requests went with its connections)
        starts = sorted(e["start"] - killed for e in log if e["start"] > killed)
        return {
            "backlog_jobs": len(self.ids),
            "healthy_s": round(healthy, 3),
            "status_served_s": None if served is None else round(served, 3),
            "first_parse_s": round(starts[0], 3) if starts else None,
            "pages_in_watch": sum(len(e["pages"]) for e in log if e["start"] > killed),
            "watch_s": self.prof.restart_watch_s,
        }


def _probe_process(prof: ScaleProfile, url: str, t0: float, until: float, conn: Connection) -> None:
    """:meth:`Run.probes` in a child process (monotonic time is the machine's: ``t0`` holds);
    what it measured sent back on ``conn``."""
    run = Run(prof, Path(tempfile.gettempdir()))
    run.t0 = t0
    asyncio.run(run.probes(url, until, conn))
    conn.send(
        {"probe_submits": run.probe_submits, "statuses": run.statuses, "late_jobs": run.late_jobs}
    )


async def measure(prof: ScaleProfile, src: Path, keep: bool) -> dict[str, Any]:
    """One full run against the gateway in ``src``."""
    async with processes(prof.fleet, keep, src) as stack:
        fleet, keeper = stack.fleet, stack.keeper
        assert keeper is not None
        cfg = gateway_config(prof, stack)
        gateway = await stack.start_gateway(cfg, "scale")
        url = f"http://127.0.0.1:{gateway.port}"
        run = Run(prof, stack.workdir)
        await fleet.log()
        meter = CpuMeter(
            {"gateway": gateway.proc.pid, "fleet": fleet.proc.pid, "keeper": keeper.proc.pid,
             "loadgen": os.getpid()}
        )  # fmt: skip
        run.t0, run.wall0 = time.monotonic(), time.time()
        end = prof.window_s
        await asyncio.gather(
            run.bulk_submit(url), run.probes_apart(url, end), run.sample(fleet, gateway, end)
        )
        cpu = meter.read()
        log = await fleet.log()
        late = await run.late_done(url)
        disk = await asyncio.to_thread(disk_bytes, run.jobs_dir)
        restart = await run.restart(gateway, cfg, stack)
        return summarize(
            prof,
            capacities(prof.jobs_profile()),
            {
                "submits": run.submits,
                "probe_submits": run.probe_submits,
                "statuses": run.statuses,
                "timeline": run.timeline,
                "bulk_done_s": run.bulk_done,
                "wall0": run.wall0,
                "log": log,
                "late_jobs": {k: run.wall0 + v for k, v in run.late_jobs.items()},
                "late_done": late,
                "disk_end": disk,
                "jobs_submitted": len(run.ids),
                "cpu_cores": cpu,
                "restart": restart,
            },
        )


def main(argv: list[str] | None = None) -> int:
    ap = parser("jobs_scale", __doc__, smoke="seconds (tests/bench)")
    ap.add_argument("--compare", metavar="REV", help="first run the gateway/ of git revision REV")
    ap.add_argument("--window", type=float, default=None, help="drain window (s)")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--plot", type=Path, nargs="?", const=REPO / "docs/img/jobs_scale.png")
    ap.add_argument("--keep-logs", action="store_true")
    args = ap.parse_args(argv)
    prof = PROFILES[profile_name(args, "smoke")]
    if args.window is not None:
        prof = replace(prof, window_s=args.window)
    started = dt.datetime.now(dt.UTC)
    srcdir = tmpdir()
    try:
        with sigterm_unwinds():
            sources = {"this": snapshot_gateway(srcdir)}
            if args.compare:
                sources = {args.compare: snapshot_rev(srcdir / "compare", args.compare), **sources}
            runs: dict[str, Any] = {}
            for label, src in sources.items():
                print(f"-- gateway {label}", file=sys.stderr, flush=True)
                runs[label] = asyncio.run(measure(prof, src, args.keep_logs))
                print(json.dumps(runs[label]["summary"])[:800], file=sys.stderr, flush=True)
    finally:
        shutil.rmtree(srcdir, ignore_errors=True)
    result = result_of(prof, started, prof.jobs_profile(), {"compare": args.compare}, runs=runs)
    result["targets"] = {label: targets(r["summary"]) for label, r in runs.items()}
    write_results(
        result, args.out or RESULTS_DIR / f"jobs-scale-{prof.name}.json", markdown(result)
    )
    if args.plot:
        plot(result, args.plot)
        print(f"plot: {args.plot}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
