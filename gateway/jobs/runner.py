"""The job runner: page slices through the central queue, then one assembly per job.

Each gateway process runs one :class:`JobRunner` over the shared :class:`JobStore`. It leases
slices (fair among tenants: the tenant with the fewest slices running goes first), at most as
many at once as upstreams can serve, and sends each as one ``/layout-parsing`` through
:meth:`gateway.proxy.Proxy.run` with ``background=True``: interactive requests go first, and a
failed attempt fails over to another instance. A slice that fails on ``jobs.slice_attempts``
rounds is split into single pages; a page that fails on every instance fails the job, naming the
page. When every slice is done one process assembles the pages in order, sends one
``/restructure-pages`` over all of them and writes the JSON Lines result. A process that dies
loses its leases when they expire; the work is then taken over, and finished slices are kept.

Usage::

    runner = JobRunner(runtime, store)
    runner.start()
    runner.wake()          # after a submit
    await runner.stop()
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
import os
import secrets
import socket
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import httpx

from gateway.attempts import GatewayError, UpstreamClientError, UpstreamFailure
from gateway.fanout import extract_pages, pages_label, slice_work
from gateway.jobs.protocol import job_data
from gateway.jobs.store import Job, JobStore, SliceClaim
from gateway.paddlex_api import layout_body, parsing_results, restructure_body
from gateway.upstream import Upstream

if TYPE_CHECKING:
    from gateway.runtime import Runtime

log = logging.getLogger("gateway.jobs")


class JobRunner:
    """See module doc."""

    def __init__(self, runtime: Runtime, store: JobStore) -> None:
        self.runtime = runtime
        self.store = store
        self.owner = f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(4)}"
        self._wake = asyncio.Event()
        self._loop_task: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._slices = 0
        self._assemblies = 0
        self._purged = 0.0

    @property
    def jobs(self) -> Any:
        return self.runtime.settings.jobs

    def start(self) -> None:
        self._loop_task = asyncio.get_running_loop().create_task(self._loop())

    def wake(self) -> None:
        self._wake.set()

    async def stop(self) -> None:
        tasks = [t for t in (self._loop_task, *self._tasks) if t is not None]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self.store.release_owner(self.owner)

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _loop(self) -> None:
        while True:
            try:
                self._tick()
            except Exception:
                log.exception("job runner tick failed")
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.jobs.poll_interval_s):
                    await self._wake.wait()
            self._wake.clear()

    def _capacity(self) -> int:
        eligible, _ = self.runtime.pool.eligible()
        limit = self.runtime.settings.load_balance.upstream_concurrency
        return max(1, len(eligible) * limit)

    def _tick(self) -> None:
        jobs = self.jobs
        while self._slices < self._capacity():
            claim = self.store.claim_slice(self.owner, jobs.lease_s)
            if claim is None:
                break
            self._slices += 1
            self._spawn(self._run_slice(claim))
        while self._assemblies < 2:
            job = self.store.claim_assembly(self.owner, jobs.lease_s)
            if job is None:
                break
            self._assemblies += 1
            self._spawn(self._assemble(job))
        if jobs.callbacks_enabled:
            for job in self.store.callbacks_due():
                if self.store.mark_callback(job.id):
                    self._spawn(self._callback(job))
        now = time.time()
        if now - self._purged > 60:
            self._purged = now
            purged = self.store.purge(now - jobs.retention_s)
            if purged:
                log.info("purged %d finished jobs older than jobs.retention_s", purged)

    async def _renew(self, renew: Callable[[], bool], worker: asyncio.Task[Any]) -> None:
        """Keep a lease with ``renew()``; cancel ``worker`` once the lease is lost (or the job
        was cancelled)."""
        while True:
            await asyncio.sleep(self.jobs.lease_s / 3)
            if not renew():
                worker.cancel()
                return

    def _keep_lease(self, renew: Callable[[], bool]) -> asyncio.Task[None]:
        worker = asyncio.current_task()
        assert worker is not None
        return asyncio.get_running_loop().create_task(self._renew(renew, worker))

    async def _run_slice(self, claim: SliceClaim) -> None:
        try:
            renewer = self._keep_lease(
                lambda: self.store.renew(claim, self.owner, self.jobs.lease_s)
            )
            try:
                await self._slice_attempt(claim)
            finally:
                renewer.cancel()
        except asyncio.CancelledError:
            log.info("slice %s/%d given up (lease lost or stopping)", claim.job.id, claim.first)
        except Exception:
            log.exception("slice %s/%d failed", claim.job.id, claim.first)
            self.store.retry_slice(claim, self.owner, claim.failed, counted=True, split=False)
        finally:
            self._slices -= 1
            self.wake()

    async def _slice_attempt(self, claim: SliceClaim) -> None:
        job, settings = claim.job, self.runtime.settings
        positions = job.pages[claim.first : claim.first + claim.count]
        data = await asyncio.to_thread(self.store.input_path(job.id).read_bytes)
        if job.kind == "pdf":
            data = await asyncio.to_thread(extract_pages, data, positions)
        body = layout_body(
            base64.b64encode(data).decode("ascii"),
            job.kind == "pdf",
            f"{job.id}-{claim.first}",
            job.options.get("layout", {}),
        )
        work = slice_work(body, positions, job.kind == "pdf")
        label = pages_label(positions)
        try:
            pages, _, _ = await self.runtime.proxy.run(
                settings,
                work,
                tenant=job.tenant,
                background=True,
                exclude=frozenset(claim.failed),
            )
        except UpstreamClientError as exc:
            self.store.fail(job.id, f"{label}: the upstream rejected the document: {exc.message}")
            return
        except GatewayError as exc:
            self._slice_failed(claim, exc, label)
            return
        self.store.finish_slice(claim, pages, self.owner)

    def _slice_failed(self, claim: SliceClaim, exc: GatewayError, label: str) -> None:
        tried = [a.upstream for a in exc.details.get("attempts", []) if a.outcome != "success"]
        failed = sorted(set(claim.failed) | set(tried))
        if exc.status == 503 and not tried and exc.code != "no_upstream":
            # queue full or timed out: nothing was tried, try again later
            self.store.retry_slice(claim, self.owner, claim.failed, counted=False, split=False)
            return
        everywhere = exc.code == "no_upstream" or claim.attempts + 1 >= self.jobs.slice_attempts
        if not everywhere:
            self.store.retry_slice(claim, self.owner, failed, counted=True, split=False)
        elif claim.count > 1:
            log.info("job %s: %s failed (%s); retrying page by page", claim.job.id, label, exc)
            self.store.retry_slice(claim, self.owner, [], counted=True, split=True)
        else:
            self.store.fail(claim.job.id, f"{label} failed on every upstream: {exc.message}")
            log.warning("job %s failed: %s failed on every upstream", claim.job.id, label)

    async def _assemble(self, job: Job) -> None:
        renewer = self._keep_lease(
            lambda: self.store.renew_assembly(job.id, self.owner, self.jobs.lease_s)
        )
        try:
            await self._assemble_job(job)
        except asyncio.CancelledError:
            log.info("job %s: assembly given up (lease lost or stopping)", job.id)
        except Exception as exc:
            log.exception("job %s: assembly failed", job.id)
            self.store.fail(job.id, f"assembling the result failed: {exc}")
        finally:
            renewer.cancel()
            self._assemblies -= 1
            self.wake()

    async def _assemble_job(self, job: Job) -> None:
        pages: list[dict[str, Any]] = []
        for first in self.store.slice_firsts(job.id):
            raw = await asyncio.to_thread(self.store.pages_path(job.id, first).read_bytes)
            pages.extend(json.loads(raw))
        restructure = job.options.get("restructure", {})
        if len(pages) > 1 and restructure.get("restructurePages", True):
            pages = await self._restructure(job, pages, restructure)
        info = {"numPages": len(pages), "type": job.kind}
        lines = [
            json.dumps(
                {"result": {"layoutParsingResults": [page], **({} if i else {"dataInfo": info})}},
                ensure_ascii=False,
            )
            for i, page in enumerate(pages)
        ]
        result = ("\n".join(lines) + "\n").encode()
        if self.store.finish_job(job.id, result, self.owner):
            log.info("job %s done: %d pages", job.id, len(pages))

    async def _restructure(
        self, job: Job, pages: list[dict[str, Any]], options: dict[str, Any]
    ) -> list[dict[str, Any]]:
        """One ``/restructure-pages`` over every page; each page keeps its other fields."""
        layout = job.options.get("layout", {})
        body = restructure_body(
            pages,
            mergeTables=options.get("mergeTables", True),
            relevelTitles=options.get("relevelTitles", True),
            concatenatePages=False,
            prettifyMarkdown=layout.get("prettifyMarkdown", True),
            showFormulaNumber=layout.get("showFormulaNumber", False),
            logId=job.id,
        )

        async def work(client: httpx.AsyncClient, upstream: Upstream, timeout: float) -> Any:
            response = await client.post(
                upstream.url + "/restructure-pages", json=body, timeout=timeout
            )
            merged = parsing_results(response)
            if not isinstance(merged, list) or len(merged) != len(pages):
                raise UpstreamFailure("protocol_error", "page count changed in restructure", 200)
            return merged

        merged, _, _ = await self.runtime.proxy.run(
            self.runtime.settings, work, bypass_limit=True, tenant=job.tenant
        )
        return [{**page, **new} for page, new in zip(pages, merged, strict=True)]

    async def _callback(self, job: Job) -> None:
        """POST the job's status to its callback URL (SSRF-guarded), once, best effort."""
        current = self.store.get(job.id)
        if current is None or job.callback_url is None:
            return
        try:
            response = await self.runtime.fetch_client().post(
                job.callback_url,
                json={"code": 0, "msg": "Success", "data": job_data(current, None)},
                timeout=self.runtime.settings.input.url_timeout_s,
            )
            log.info("job %s: callback answered %d", job.id, response.status_code)
        except Exception as exc:
            log.warning("job %s: callback failed: %s", job.id, exc)
