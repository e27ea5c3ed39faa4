"""The four scenarios of the jobs benchmark (issue 12), each against a real gateway process.

Each returns a JSON-able dict of what it measured; :mod:`bench.jobs` starts the processes,
checks the targets and writes the results. Times come from two clocks: latencies from this
process's monotonic clock, page completions from the fleet's parse log (wall clock, the same
machine).

Usage::

    ctx = Context(prof, fleet, gateway_url, workdir)
    idle = await scenario_idle(ctx)
"""

from __future__ import annotations

import asyncio
import hashlib
import math
import os
import signal
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pybase64

from bench.jobs_docs import (
    ONE_PAGE_DOC,
    busy_timeline,
    check_result,
    completion_times,
    fluid_pages,
    numbered_pdf,
    page_of,
    parsed_twice,
    slices_of,
    twice_by_first_parse,
)
from bench.loadgen import Outcome, run_open_loop, summarize
from bench.procs import FleetProc, GatewayProc, KeeperProc
from bench.procstat import CpuMeter
from bench.workload import FleetSpec, Request, make_workload
from fleetctl import jobclient
from fleetctl.client import AsyncClient, OcrError, RetryPolicy, read_ocr

TOKENS = {"tenant-a": "bench-jobs-token-a", "tenant-b": "bench-jobs-token-b"}
ADMIN_TOKEN = "bench-jobs-admin"  # sees every tenant's jobs of a batch
ONCE = RetryPolicy(max_attempts=1)  # a refusal or a failure is measured, never retried
POLICY = jobclient.JobPolicy(model="PaddleOCR-VL-1.5")


def jobs_client(url: str, token: str, timeout_s: float = 120.0) -> AsyncClient:
    """fleetctl's client as the benchmark uses it: one token, no retries, no proxy."""
    return AsyncClient(url, token=token, timeout=timeout_s, retry=ONCE, trust_env=False)


async def submit(client: AsyncClient, pdf: bytes, batch_id: str | None = None) -> str:
    """Submit ``pdf`` as a job (multipart, as the official client uploads); its id."""
    return await jobclient.upload(client, pdf, "doc.pdf", POLICY, batch_id)


async def wait(
    client: AsyncClient, job_id: str, poll_s: float, limit_s: float = 300.0
) -> jobclient.JobStatus:
    """Poll a job until it is done or failed (`OcrError` past ``limit_s``)."""
    deadline = time.monotonic() + limit_s
    while True:
        found = await jobclient.status(client, job_id)
        if found.state in ("done", "failed"):
            return found
        if time.monotonic() > deadline:
            raise OcrError(f"job {job_id} still {found.state} after {limit_s:.0f}s", None)
        await asyncio.sleep(poll_s)


async def ocr_once(client: AsyncClient, pdf_b64: str) -> Outcome:
    """One interactive ``POST /ocr``, answered with a text or not (HTTP status 0: no answer)."""
    try:
        await client.call("POST", "/ocr", read_ocr, json={"base64": pdf_b64})
    except OcrError as exc:
        return Outcome(False, exc.status or 0, f"HTTP {exc.status or 0}")
    return Outcome(True, 200)


def b64(data: bytes) -> str:
    return pybase64.b64encode(data).decode("ascii")


@dataclass(frozen=True)
class Profile:
    """What one run does: the fleet and its cost model, the documents, the windows."""

    name: str
    fleet: FleetSpec = field(default_factory=lambda: FleetSpec(n=48, slow_factors=()))
    doc_pages: int = 100
    threshold_pages: int = 8  # fanout.threshold_pages (the gateway's default)
    max_slice_pages: int = 16  # fanout.max_slice_pages (the gateway's default)
    idle_runs: int = 3
    mixed_s: float = 40.0  # arrivals window of scenario 2 (each phase)
    mixed_warmup_s: float = 5.0
    interactive_load: float = 0.40
    job_load: float = 0.45
    saturation_jobs: int = 40
    kill_jobs: int = 20
    kill_at: float = 0.3  # the fraction of scenario 4's pages done when the gateway is killed
    lease_s: float = 6.0
    seed: int = 12


def sha(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def capacities(prof: Profile) -> dict[str, float]:
    """The fleet's capacities under the cost model (see docs/benchmarks.md, "Capacity")."""
    spec = prof.fleet
    fast = spec.instance_equivalents()
    slices = math.ceil(prof.doc_pages / prof.max_slice_pages)
    return {
        "pages_per_s": round(spec.page_capacity(prof.max_slice_pages), 3),
        "page_ceiling_per_s": round(fast / spec.page_s, 3),
        "one_page_per_s": round(fast / spec.pdf_seconds(1), 3),
        "job_instance_s": round(slices * spec.request_s + prof.doc_pages * spec.page_s, 3),
        "fast_instances": round(fast, 3),
    }


@dataclass
class Context:
    """What every scenario needs: the profile, the fleet, the gateway and a document counter."""

    prof: Profile
    fleet: FleetProc
    url: str
    workdir: Path
    gateway: GatewayProc | None = None
    restart: Callable[[str], Awaitable[GatewayProc]] | None = None
    keeper: KeeperProc | None = None
    next_doc: int = 0

    def docs(self, n: int) -> list[int]:
        first = self.next_doc
        self.next_doc += n
        return list(range(first, first + n))

    def cpu_meter(self) -> CpuMeter:
        """CPU use of the gateway (its workers included), the fleet and this process."""
        pids = {"loadgen": os.getpid(), "fleet": self.fleet.proc.pid}
        if self.gateway is not None:
            pids["gateway"] = self.gateway.proc.pid
        if self.keeper is not None:
            pids["keeper"] = self.keeper.proc.pid
        return CpuMeter(pids)


async def submit_all(
    client: AsyncClient | list[AsyncClient], pdfs: dict[int, bytes], batch: str, parallel: int = 8
) -> dict[int, str]:
    """Submit every document (``parallel`` uploads at once), document ``d`` through the
    ``d % len``-th of several clients; doc -> job id."""
    clients = client if isinstance(client, list) else [client]
    gate = asyncio.Semaphore(parallel)
    ids: dict[int, str] = {}

    async def one(doc: int, pdf: bytes) -> None:
        async with gate:
            ids[doc] = await submit(clients[doc % len(clients)], pdf, batch)

    await asyncio.gather(*(one(d, p) for d, p in pdfs.items()))
    return ids


async def wait_batch(
    client: AsyncClient, batch: str, n: int, limit_s: float, poll_s: float = 0.25
) -> list[dict[str, Any]]:
    """Poll a batch until its ``n`` jobs are done or failed."""
    deadline = time.monotonic() + limit_s
    while True:
        jobs = await jobclient.batch(client, batch)
        if len(jobs) >= n and all(j["state"] in ("done", "failed") for j in jobs):
            return jobs
        if time.monotonic() > deadline:
            states = Counter(j["state"] for j in jobs)
            raise OcrError(f"batch {batch}: {dict(states)} after {limit_s:.0f}s", None)
        await asyncio.sleep(poll_s)


async def check_all(
    client: AsyncClient, jobs: list[dict[str, Any]], doc_of: dict[str, int], pages: int
) -> dict[str, Any]:
    """Fetch every done job's result; how many are whole and in order, and what is wrong."""
    problems: dict[str, str] = {}
    for data in jobs:
        if data["state"] != "done":
            problems[data["jobId"]] = f"{data['state']}: {data.get('errorMsg')}"
            continue
        lines = await jobclient.result_lines(client, data["resultUrl"]["jsonUrl"])
        problem = check_result(lines, doc_of[data["jobId"]], pages)
        if problem is not None:
            problems[data["jobId"]] = problem
    return {"jobs": len(jobs), "whole_in_order": len(jobs) - len(problems), "problems": problems}


# ------------------------------------------------------------------------- 1. idle fleet


async def scenario_idle(ctx: Context) -> dict[str, Any]:
    """One 100-page job at a time on the idle fleet, against one instance parsing it whole."""
    prof = ctx.prof
    runs: list[dict[str, Any]] = []
    async with jobs_client(ctx.url, TOKENS["tenant-a"]) as client:
        for index in range(prof.idle_runs + 1):  # the first warms the gateway up, not counted
            (doc,) = ctx.docs(1)
            pdf = numbered_pdf(doc, prof.doc_pages)
            await ctx.fleet.log()
            wall0, started = time.time(), time.perf_counter()
            job_id = await submit(client, pdf)
            accepted = time.perf_counter() - started
            found = await wait(client, job_id, poll_s=0.01)
            latency = time.perf_counter() - started
            problem = (
                check_result(
                    await jobclient.result_lines(client, found.json_url or ""), doc, prof.doc_pages
                )
                if found.state == "done"
                else found.error
            )
            log = await ctx.fleet.log()
            sizes = slices_of(log, {doc}).get(doc, [])
            starts = [e["start"] - wall0 for e in log if e["logId"].startswith(job_id)]
            ends = [e["end"] - wall0 for e in log if e["logId"].startswith(job_id)]
            if index:
                runs.append(
                    {
                        "latency_s": round(latency, 4),
                        "slices": len(sizes),
                        "slice_pages": sorted(Counter(sizes).items()),
                        # when, from the submit: job id answered, first and last slice began,
                        # last slice ended (the rest is assembly and the client's polling)
                        "timeline_s": [
                            round(t, 3) for t in (accepted, min(starts), max(starts), max(ends))
                        ],
                        "problem": problem,
                    }
                )
            await asyncio.sleep(0.3)
        # one instance parsing it whole: the whole PDF to one (fast) instance, directly
        (doc,) = ctx.docs(1)
        fast = next(i for i in range(len(ctx.fleet.urls)) if i not in ctx.fleet.info["slow"])
        body = {"file": b64(numbered_pdf(doc, prof.doc_pages)), "fileType": 0, "logId": "whole"}
        async with httpx.AsyncClient(timeout=600, trust_env=False) as direct:
            started = time.perf_counter()
            answer = await direct.post(ctx.fleet.urls[fast] + "/layout-parsing", json=body)
            whole = time.perf_counter() - started
        pages_back = len(answer.json()["result"]["layoutParsingResults"])
    await ctx.fleet.log()
    latencies = sorted(r["latency_s"] for r in runs)
    median = latencies[len(latencies) // 2]
    return {
        "runs": runs,
        "fanout_latency_s": median,
        "whole_latency_s": round(whole, 4),
        "whole_pages": pages_back,
        "whole_model_s": prof.fleet.pdf_seconds(prof.doc_pages),
        "ratio": round(median / whole, 4),
    }


# ------------------------------------------------------------------------- 2. mixed load


def _busy(log: list[dict[str, Any]], t0: float, t1: float, instances: int) -> dict[str, float]:
    """The fleet's busy share in [t0, t1] from the parse log: one-page documents, job slices."""
    shares = {"one_page": 0.0, "jobs": 0.0}
    for entry in log:
        overlap = min(entry["end"], t1) - max(entry["start"], t0)
        if overlap > 0:
            doc = page_of(*entry["pages"][0])[0] if entry["pages"] else -1
            shares["one_page" if doc == ONE_PAGE_DOC else "jobs"] += overlap
    span = max(1e-9, (t1 - t0) * instances)
    return {k: round(v / span, 4) for k, v in shares.items()}


async def _interactive(
    ctx: Context, client: AsyncClient, rate: float, jobs: Callable[[], Awaitable[None]] | None
) -> dict[str, Any]:
    """One-page documents at ``rate`` (Poisson, seeded) for ``mixed_s``, while ``jobs()`` runs;
    their latency stats after the warm-up, and the fleet's busy shares meanwhile."""
    prof = ctx.prof
    workload = make_workload(rate, prof.mixed_s, prof.seed, sigma=0.0)
    one_page = b64(numbered_pdf(ONE_PAGE_DOC, 1))

    async def send(_: Request) -> Outcome:
        return await ocr_once(client, one_page)

    await ctx.fleet.log()
    meter = ctx.cpu_meter()
    wall0 = time.time()
    submitter = asyncio.create_task(jobs()) if jobs is not None else None
    result = await run_open_loop(send, workload, drain_s=60.0)
    cpu = meter.read()
    if submitter is not None:
        await submitter
    stats = summarize(result.samples, prof.mixed_warmup_s, prof.mixed_s, rate)
    stats["max_lag_s"] = round(result.max_lag_s, 4)
    busy = _busy(
        await ctx.fleet.log(clear=False),
        wall0 + prof.mixed_warmup_s,
        wall0 + prof.mixed_s,
        len(ctx.fleet.urls),
    )
    return {"one_page": stats, "busy": busy, "cpu_cores": cpu}


async def scenario_mixed(ctx: Context) -> dict[str, Any]:
    """One-page documents at ``interactive_load`` of the capacity, alone and then while
    100-page jobs (two tenants) arrive at ``job_load``; the one-page p99 of both."""
    prof, caps = ctx.prof, capacities(ctx.prof)
    rate = prof.interactive_load * caps["one_page_per_s"]
    job_rate = prof.job_load * caps["fast_instances"] / caps["job_instance_s"]
    arrivals = [r.t for r in make_workload(job_rate, prof.mixed_s, prof.seed + 1, 0.0).requests]
    docs = ctx.docs(len(arrivals))
    pdfs = {doc: numbered_pdf(doc, prof.doc_pages) for doc in docs}
    async with (
        jobs_client(ctx.url, TOKENS["tenant-a"]) as a,
        jobs_client(ctx.url, TOKENS["tenant-b"]) as b,
    ):
        alone = await _interactive(ctx, a, rate, None)
        ids: dict[str, int] = {}

        async def one(client: AsyncClient, doc: int) -> None:
            job_id = await submit(client, pdfs[doc], f"mixed-{prof.seed}")
            ids[job_id] = doc

        async def submit_jobs() -> None:
            """Each job at its arrival time, the two tenants in turn (open loop)."""
            loop = asyncio.get_running_loop()
            start = loop.time()
            tasks = []
            for index, (doc, at) in enumerate(zip(docs, arrivals, strict=True)):
                await asyncio.sleep(max(0.0, start + at - loop.time()))
                tasks.append(asyncio.create_task(one((a, b)[index % 2], doc)))
            await asyncio.gather(*tasks)

        mixed = await _interactive(ctx, a, rate, submit_jobs)
        async with jobs_client(ctx.url, ADMIN_TOKEN) as admin:
            jobs = await wait_batch(admin, f"mixed-{prof.seed}", len(docs), limit_s=300)
        log = await ctx.fleet.log()
        checked = await check_all(a, jobs, ids, prof.doc_pages)
    sizes = [n for doc_sizes in slices_of(log, set(docs)).values() for n in doc_sizes]
    p99_alone, p99_mixed = alone["one_page"]["p99"], mixed["one_page"]["p99"]
    return {
        "one_page_rate_per_s": round(rate, 3),
        "job_rate_per_s": round(job_rate, 4),
        "jobs": len(docs),
        "alone": alone,
        "with_jobs": mixed,
        "job_slice_pages": sorted(Counter(sizes).items()),
        "results": checked,
        "ratio": round(p99_mixed / p99_alone, 4) if p99_alone and p99_mixed else None,
    }


# ------------------------------------------------------------------------- 3. saturation


async def scenario_saturation(ctx: Context) -> dict[str, Any]:
    """Many 100-page jobs at once and nothing else: pages/s while every instance has work."""
    prof, caps = ctx.prof, capacities(ctx.prof)
    docs = ctx.docs(prof.saturation_jobs)
    pdfs = {doc: numbered_pdf(doc, prof.doc_pages) for doc in docs}
    batch = f"saturation-{prof.seed}"
    async with (
        jobs_client(ctx.url, TOKENS["tenant-a"]) as a,
        jobs_client(ctx.url, TOKENS["tenant-b"]) as b,
    ):
        await ctx.fleet.log()
        meter = ctx.cpu_meter()
        wall0 = time.time()
        ids = {job_id: doc for doc, job_id in (await submit_all([a, b], pdfs, batch, 16)).items()}
        submitted = time.time() - wall0
        async with jobs_client(ctx.url, ADMIN_TOKEN) as admin:
            jobs = await wait_batch(admin, batch, len(docs), limit_s=600)
        cpu = meter.read()
        log = await ctx.fleet.log()
        checked = await check_all(a, jobs, ids, prof.doc_pages)
    times = completion_times(log, set(docs))
    n = len(times)
    lo, hi = times[int(0.1 * n)], times[int(0.8 * n) - 1]
    steady = fluid_pages(log, set(docs), lo, hi) / max(1e-9, hi - lo)
    overall = n / max(1e-9, times[-1] - wall0)
    sizes = [s for doc_sizes in slices_of(log, set(docs)).values() for s in doc_sizes]
    busy = _busy(log, lo, hi, len(ctx.fleet.urls))
    timeline = busy_timeline(log, wall0, times[-1], len(ctx.fleet.urls))
    return {
        "jobs": len(docs),
        "pages": n,
        "submit_s": round(submitted, 3),
        "steady_pages_per_s": round(steady, 3),
        "steady_window_s": [round(lo - wall0, 3), round(hi - wall0, 3)],
        "overall_pages_per_s": round(overall, 3),
        "makespan_s": round(times[-1] - wall0, 3),
        "busy_in_window": busy,
        "busy_timeline": {"step_s": 0.5, "busy": timeline},
        "slice_pages": sorted(Counter(sizes).items()),
        "cpu_cores": cpu,
        "results": checked,
        "ratio": round(steady / caps["pages_per_s"], 4),
        "ratio_overall": round(overall / caps["pages_per_s"], 4),
    }


# ------------------------------------------------------------------------- 4. kill -9


async def scenario_kill(ctx: Context) -> dict[str, Any]:
    """``kill -9`` of the gateway while ``kill_jobs`` jobs run; restarted on the same store."""
    prof = ctx.prof
    assert ctx.gateway is not None and ctx.restart is not None
    docs = ctx.docs(prof.kill_jobs)
    pdfs = {doc: numbered_pdf(doc, prof.doc_pages) for doc in docs}
    batch = f"kill-{prof.seed}"
    total = len(docs) * prof.doc_pages
    await ctx.fleet.log()
    async with (
        jobs_client(ctx.url, TOKENS["tenant-a"]) as a,
        jobs_client(ctx.url, TOKENS["tenant-b"]) as b,
    ):
        ids = {job_id: doc for doc, job_id in (await submit_all([a, b], pdfs, batch)).items()}
    async with jobs_client(ctx.url, ADMIN_TOKEN) as admin:
        while True:
            jobs = await jobclient.batch(admin, batch)
            extracted = sum(j["extractProgress"]["extractedPages"] for j in jobs)
            if extracted >= prof.kill_at * total:
                break
            await asyncio.sleep(0.05)
    keeper_before = await ctx.keeper.stats() if ctx.keeper is not None else None
    os.killpg(ctx.gateway.proc.pid, signal.SIGKILL)
    killed = time.time()
    ctx.gateway.proc.wait()
    gateway = await ctx.restart("kill-restarted")
    restarted = time.time()
    async with jobs_client(f"http://127.0.0.1:{gateway.port}", ADMIN_TOKEN) as a:
        try:
            jobs = await wait_batch(a, batch, len(docs), limit_s=300)
        except OcrError as exc:
            jobs = await jobclient.batch(a, batch)
            failure = str(exc)
        else:
            failure = None
        finished = time.time()
        checked = await check_all(a, jobs, ids, prof.doc_pages)
    keeper_after = await ctx.keeper.stats() if ctx.keeper is not None else None
    log = await ctx.fleet.log()
    twice = parsed_twice(log, set(docs))
    sizes = slices_of(log, set(docs))
    bound = sum(max(s) for s in sizes.values())
    mine = [e for e in log if e["pages"] and page_of(*e["pages"][0])[0] in set(docs)]
    in_flight = [e for e in mine if e["start"] <= killed <= e["end"]]
    after = [e["start"] for e in mine if e["start"] > restarted]
    per_job = [twice.get(doc, 0) / max(sizes.get(doc, [1])) for doc in docs]
    first = min(e["start"] for e in mine) if mine else killed
    timeline = busy_timeline(mine, first, finished, len(ctx.fleet.urls))
    return {
        "jobs": len(docs),
        "extracted_at_kill": extracted,
        "pages": total,
        "recovery_s": round(finished - restarted, 3),
        "first_parse_after_restart_s": round(min(after) - restarted, 3) if after else None,
        "in_flight_at_kill": {
            "slices": len(in_flight),
            "pages": sum(len(e["pages"]) for e in in_flight),
        },
        "parsed_twice_pages": sum(twice.values()),
        # where the first parse of each page parsed twice was at the kill
        "parsed_twice_first": twice_by_first_parse(log, set(docs), killed),
        "parsed_twice_jobs": len(twice),
        "one_slice_per_job_pages": bound,
        "max_per_job_in_slices": round(max(per_job), 3) if per_job else 0,
        "results": checked,
        "failure": failure,
        # the slice keeper's counts just before the kill and once every job was done
        "keeper": keeper_before and {"before": keeper_before, "after": keeper_after},
        # the fleet's busy share with these jobs, from their first parse; the kill and the
        # restart in seconds on the same clock
        "busy_timeline": {
            "step_s": 0.5,
            "busy": timeline,
            "kill_s": round(killed - first, 3),
            "restart_s": round(restarted - first, 3),
        },
    }
