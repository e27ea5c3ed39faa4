"""The job runner: page slices through the central queue, then one assembly per job.

Each gateway process runs one :class:`JobRunner` over the shared job store
(:mod:`gateway.jobs.backend`). It leases slices (fair among tenants: the tenant with the
fewest slices running goes first) for the upstream slots free now, less a reserve for
interactive requests (:meth:`JobRunner.room`), and sends each as one ``/layout-parsing``
through :meth:`gateway.upstream.proxy.Proxy.run` with ``background=True``: interactive
requests go first, and a failed attempt fails over to another instance. A slice that fails on
``jobs.slice_attempts`` rounds is split into single pages; a page that fails on every
instance fails the job, naming the page. When every slice is done one process assembles the
pages in order, sends one
``/restructure-pages`` over all of them and writes the JSON Lines result.

Pages are cut into slices when they are leased (:meth:`JobRunner.slice_size`), sized so that
the pages waiting (every job's) spread over the upstream slots free at that moment: a job on an
idle fleet spreads over every free instance, while under load (few slots free, or many pages
waiting) slices grow up to ``fanout.max_slice_pages``, so per-request overhead does not waste a
busy fleet.

Leases are renewed for all of a process's work in one transaction every ``jobs.lease_s / 3``;
a process that dies loses its leases at once when another process (a restart included) sees
its owner file unlocked (:mod:`gateway.jobs.owners`), else when they expire; the work is then
taken over, and finished slices are kept. Every store call runs in a thread, off the event loop.

Usage::

    runner = JobRunner(runtime, store)  # the runtime, or any JobServices
    await runner.start()
    runner.wake()          # after a submit
    await runner.stop()
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import os
import secrets
import socket
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

import pybase64

from gateway.dispatch.upstreams import Upstream
from gateway.errors import GatewayError, UpstreamClientError, UpstreamFailure
from gateway.jobs.backend import JobBackend, StoreUnavailable
from gateway.jobs.fairness import SliceSize
from gateway.jobs.protocol import job_data
from gateway.jobs.store import Job, SliceClaim
from gateway.upstream.fanout import (
    Work,
    free_capacity,
    pages_label,
    slice_pages,
    slice_work,
    spread_size,
)
from gateway.upstream.keeper_client import find_slice, slice_key
from gateway.upstream.paddlex_api import layout_body, restructure_body, restructured
from gateway.wire import paddlex_routes
from gateway.wire.upstream_http import UpstreamClient

if TYPE_CHECKING:
    import httpx

    from gateway.config.settings import Settings
    from gateway.dispatch.pool import UpstreamPool
    from gateway.inputs.document import DocumentInspector
    from gateway.upstream.proxy import Proxy

log = logging.getLogger("gateway.jobs")

THROTTLED_POLL_S = 0.05  # how soon to look again while pages wait for a free upstream
_WAITED = frozenset({"no_capacity", "queue_timeout", "queue_full"})  # 503s that are a wait
_SAW = frozenset({"server_error", "timeout", "reset", "protocol_error"})  # failed there


class JobServices(Protocol):
    """The pieces of the running gateway the runner uses (:class:`gateway.runtime.Runtime` has
    them). Read on each use, not copied: a config reload swaps ``settings`` and the client."""

    @property
    def settings(self) -> Settings: ...

    @property
    def pool(self) -> UpstreamPool: ...

    @property
    def proxy(self) -> Proxy: ...

    @property
    def inspector(self) -> DocumentInspector: ...

    @property
    def client(self) -> UpstreamClient | None: ...

    def fetch_client(self) -> httpx.AsyncClient:
        """The client for callers' URL fetches (guarded)."""
        ...


class JobRunner:
    """See module doc."""

    def __init__(self, services: JobServices, store: JobBackend) -> None:
        self.services = services
        self.store = store
        self.owner = f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(4)}"
        self._wake = asyncio.Event()
        self._loop_task: asyncio.Task[None] | None = None
        self._renew_task: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        # lease -> the task doing its work: (job id, first) for a slice, job id for an assembly
        self._held: dict[tuple[str, int] | str, asyncio.Task[None]] = {}
        self._slices = 0  # slices leased that still need an upstream
        self._sent = 0  # of those, the ones whose request is on an upstream
        self._assemblies = 0
        self._more = False  # the last lease took every slice it asked for
        self._purged = 0.0

    @property
    def jobs(self) -> Any:
        return self.services.settings.jobs

    async def start(self) -> None:
        await self.store.register_owner(self.owner)
        loop = asyncio.get_running_loop()
        self._loop_task = loop.create_task(self._loop())
        self._renew_task = loop.create_task(self._renew_loop())

    def wake(self) -> None:
        self._wake.set()

    async def stop(self) -> None:
        tasks = [t for t in (self._loop_task, self._renew_task, *self._tasks) if t is not None]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        with contextlib.suppress(StoreUnavailable):  # then the leases expire
            await self.store.release_owner(self.owner)

    def _spawn(self, coro: Any, key: tuple[str, int] | str | None = None) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        if key is not None:
            self._held[key] = task

    def _forget(self, key: tuple[str, int] | str) -> None:
        """Drop the current task's lease (not a newer task's, should it hold the same one)."""
        if self._held.get(key) is asyncio.current_task():
            del self._held[key]

    async def _loop(self) -> None:
        await self._reap()
        woken, last = True, 0.0
        while True:
            try:
                await self._lease_slices()
                if woken or time.monotonic() - last >= self.jobs.poll_interval_s:
                    last = time.monotonic()
                    await self._tick()
            except StoreUnavailable as exc:
                log.warning("job runner: the job store is unavailable (%s)", exc)
            except Exception:
                log.exception("job runner tick failed")
            # pages waiting for a free upstream: look again soon (an interactive request
            # that ends frees one without waking us)
            poll = THROTTLED_POLL_S if self._more else self.jobs.poll_interval_s
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(poll):
                    await self._wake.wait()
            woken = self._wake.is_set()
            self._wake.clear()

    def room(self) -> tuple[int, int]:
        """(slices to lease now, how many of them can start at once).

        They can start on the upstream slots free now (less interactive requests waiting,
        and our slices already leased but not on an upstream), less a reserve of
        ``ceil(sqrt(interactive requests in flight))`` slots, so that interactive requests
        arriving on a busy fleet find a free instance instead of waiting for a job slice to
        end. With no interactive request at all, up to ``slots / 4`` more wait in the central
        queue, ready: an upstream that ends a slice gets the next one at once instead of
        after a round trip through the store."""
        pool, settings = self.services.pool, self.services.settings
        eligible, _ = pool.eligible()
        slots = max(1, len(eligible) * settings.load_balance.upstream_concurrency)
        interactive = max(0, sum(u.in_flight for u in eligible) - self._sent)
        interactive += pool.queue.interactive_waiting
        free = free_capacity(pool, settings) - (self._slices - self._sent)
        start = free - math.ceil(math.sqrt(interactive))
        ready = 0 if interactive else max(1, slots // 4)
        return min(slots + ready - self._slices, start + ready), start

    def slice_size(self, start: int) -> SliceSize:
        """The size of the next slices cut now: the pages waiting (in every job) spread over
        the ``start`` slices that can start now (less one per slice leased before it in the
        same claim), at most ``fanout.max_slice_pages`` (so: the most for a slice that will
        wait), and at least that maximum times the share of the fleet's slots that are not
        free for them: on a busy fleet a few slots free for a moment do not cut a job into
        small slices whose per-request cost the fleet then pays. A job of up to
        ``fanout.threshold_pages`` pages is one slice."""
        fanout, settings = self.services.settings.fanout, self.services.settings
        eligible, _ = self.services.pool.eligible()
        slots = max(1, len(eligible) * settings.load_balance.upstream_concurrency)
        least = math.ceil(fanout.max_slice_pages * (1 - max(0, start) / slots))

        def size(pages: int, left: int, waiting: int, claimed: int) -> int:
            if pages <= fanout.threshold_pages:
                return left
            spread = spread_size(waiting, fanout.max_slice_pages, start - claimed)
            return min(fanout.max_slice_pages, max(spread, least))

        return size

    async def _lease_slices(self) -> None:
        """Lease as many slices as :meth:`room` allows and start them."""
        room, start = self.room()
        if room <= 0:
            self._more = True  # no room: whether pages wait is for the next look to tell
            return
        claims = await self.store.claim_slices(
            self.owner, self.jobs.lease_s, room, self.slice_size(start)
        )
        self._more = len(claims) == room  # pages may still wait
        for group in _by_job(claims):
            # the input is read and parsed once for all the slices of one job
            files = asyncio.ensure_future(self._slice_files(group))
            files.add_done_callback(_retrieve)
            for index, claim in enumerate(group):
                self._slices += 1
                self._spawn(self._run_slice(claim, files, index), (claim.job.id, claim.first))

    async def _tick(self) -> None:
        """Assemblies, callbacks and the purge (when woken, at most every poll interval)."""
        jobs, store = self.jobs, self.store
        while self._assemblies < 2:
            job = await store.claim_assembly(self.owner, jobs.lease_s)
            if job is None:
                break
            self._assemblies += 1
            self._spawn(self._assemble(job), job.id)
        if jobs.callbacks_enabled:
            for job in await store.callbacks_due():
                if await store.mark_callback(job.id):
                    self._spawn(self._callback(job))
        await store.refresh()
        now = time.time()
        if now - self._purged > 60:
            self._purged = now
            purged = await store.purge(now - jobs.retention_s)
            if purged:
                log.info("purged %d finished jobs older than jobs.retention_s", purged)

    async def _reap(self) -> None:
        """Release the leases of runners whose process is gone (a gateway killed before us)."""
        try:
            dead = await self.store.reap_dead_owners()
        except Exception:
            log.exception("reaping the leases of dead job runners failed")
            return
        if dead:
            log.info("released the leases of %d job runners that are gone", len(dead))
            self.wake()

    async def _renew_loop(self) -> None:
        """Every ``lease_s / 3``: renew all our leases at once, cancel the work whose lease is
        lost (the job was cancelled, or the lease expired and was taken over), and reap the
        leases of dead runners."""
        while True:
            await asyncio.sleep(self.jobs.lease_s / 3)
            keys = list(self._held)  # leased before the renewal: it must find them
            try:
                slices, assembling = await self.store.renew_owned(self.owner, self.jobs.lease_s)
            except StoreUnavailable as exc:
                log.warning("renewing the job leases failed: the store is unavailable (%s)", exc)
                continue
            except Exception:
                log.exception("renewing the job leases failed")
                continue
            for key in keys:
                kept = key in assembling if isinstance(key, str) else key in slices
                task = self._held.get(key)
                if not kept and task is not None:
                    task.cancel()
            await self._reap()

    async def _run_slice(
        self, claim: SliceClaim, files: asyncio.Future[list[str]], index: int
    ) -> None:
        released = False

        def upstream_done() -> None:
            """The slice no longer needs an upstream: lease the next one now, not once the
            result is stored."""
            nonlocal released
            if not released:
                released = True
                self._slices -= 1
                self.wake()

        try:
            await self._slice_attempt(claim, (await asyncio.shield(files))[index], upstream_done)
        except asyncio.CancelledError:
            log.info("slice %s/%d given up (lease lost or stopping)", claim.job.id, claim.first)
        except StoreUnavailable as exc:  # its lease expires: this or another runner retakes it
            log.warning("slice %s/%d given up: %s", claim.job.id, claim.first, exc)
        except Exception as exc:
            log.exception("slice %s/%d failed", claim.job.id, claim.first)
            if claim.attempts + 1 >= self.jobs.slice_attempts:  # a bug: no endless retries
                label = pages_label(claim.job.pages[claim.first : claim.first + claim.count])
                await self.store.fail(claim.job.id, f"{label}: {exc!r}")
            else:
                await self.store.retry_slice(claim, self.owner, claim.failed, True, False)
        finally:
            upstream_done()
            self._forget((claim.job.id, claim.first))
            self.wake()

    async def _slice_files(self, claims: list[SliceClaim]) -> list[str]:
        """The base64 of each slice's document (its pages cut from the input PDF by PDFium in
        a worker process, :meth:`gateway.inputs.document.DocumentInspector.cut`), for slices of one
        job."""
        job = claims[0].job
        data = await self.store.read_input(job.id)
        if job.kind != "pdf":
            return [pybase64.b64encode_as_string(data)] * len(claims)
        slices = [job.pages[c.first : c.first + c.count] for c in claims]
        parts = await self.services.inspector.cut(data, slices, self.services.settings.input)
        return await asyncio.to_thread(lambda: [pybase64.b64encode_as_string(p) for p in parts])

    async def _slice_attempt(
        self, claim: SliceClaim, file: str, upstream_done: Callable[[], None]
    ) -> None:
        job, store = claim.job, self.store
        positions = job.pages[claim.first : claim.first + claim.count]
        key = slice_key(job.id, claim.first, claim.count)
        body = layout_body(
            file,
            job.kind == "pdf",
            f"{job.id}-{claim.first}",
            job.options.get("layout", {}),
        )
        work = slice_work(body, positions, job.kind == "pdf", key)
        sent = False

        async def on_upstream(client: UpstreamClient, upstream: Upstream, timeout: float) -> Any:
            nonlocal sent
            if not sent:
                sent = True
                self._sent += 1
            return await work(client, upstream, timeout)

        label = pages_label(positions)
        try:
            pages, pin = (None, None) if claim.fresh else await self._from_keepers(claim, key)
            if pages is None:
                pages = await self._dispatch(claim, on_upstream, pin)
        except UpstreamClientError as exc:
            message = f"{label}: the upstream rejected the document: {exc.message}"
            await store.fail(job.id, message)
            return
        except GatewayError as exc:
            await self._slice_failed(claim, exc, label)
            return
        finally:
            if sent:
                self._sent -= 1
            upstream_done()
        await self._finish_slice(claim, pages)

    async def _finish_slice(self, claim: SliceClaim, pages: list[Any]) -> None:
        """Store a slice's pages, waiting out a store that is unreachable for a while (a
        database restarting): the pages are not parsed again if the lease is still ours when
        it returns. Cancelled with the lease, like the parse."""
        delay = 0.2
        while True:
            try:
                await self.store.finish_slice(claim, pages, self.owner)
                return
            except StoreUnavailable as exc:
                log.warning("slice %s/%d: storing it waits (%s)", claim.job.id, claim.first, exc)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)

    async def _from_keepers(
        self, claim: SliceClaim, key: str
    ) -> tuple[list[Any] | None, str | None]:
        """For a slice that may have been sent before (a crash or a lost lease): its pages if
        a keeper kept the answer, else the instance still parsing it (to wait for it there)."""
        settings = self.services.settings
        keepers = sorted(settings.keepers)
        client = self.services.client
        if not keepers or client is None:
            return None, None
        found = await find_slice(client, keepers, key, settings.http.connect_timeout_s)
        if found.reply is not None:
            positions = claim.job.pages[claim.first : claim.first + claim.count]
            try:
                pages = slice_pages(found.reply, positions, claim.job.kind == "pdf")
            except (UpstreamFailure, UpstreamClientError) as exc:
                log.warning("slice %s: the kept answer is unusable (%s)", key, exc)
                return None, None
            log.info("slice %s: answer taken from a keeper, not parsed again", key)
            return pages, None
        pin = found.running_on
        if pin is None or pin in claim.failed or self.services.pool.get(pin) is None:
            return None, None
        log.info("slice %s: still parsing on %s, waiting for it there", key, pin)
        return None, pin

    async def _dispatch(self, claim: SliceClaim, work: Work, pin: str | None) -> list[Any]:
        """The slice through the central queue with failover; first on ``pin`` alone (its
        keeper attaches to the parse running there), then anywhere if that fails."""
        settings, proxy = self.services.settings, self.services.proxy
        pages: list[Any]
        if pin is not None:
            others = frozenset(settings.upstream_urls) - {pin}
            try:
                pages, _, _ = await proxy.run(
                    settings, work, tenant=claim.job.tenant, background=True, exclude=others
                )
                return pages
            except GatewayError as exc:
                log.info("slice of job %s: waiting on %s failed (%s)", claim.job.id, pin, exc)
        pages, _, _ = await proxy.run(
            settings,
            work,
            tenant=claim.job.tenant,
            background=True,
            exclude=frozenset(claim.failed),
        )
        return pages

    async def _slice_failed(self, claim: SliceClaim, exc: GatewayError, label: str) -> None:
        """Give a failed slice back, split it, or fail its job."""
        tried = [a.upstream for a in exc.details.get("attempts", []) if a.outcome != "success"]
        failed = sorted(set(claim.failed) | set(tried))
        if exc.code in _WAITED or (exc.status == 503 and not tried and exc.code != "no_upstream"):
            # no instance could take it (all drained or down) or the queue was full: try again
            # later, not counted (job slices wait out a rollout); an instance that failed it
            # is still avoided, one that refused the connect never saw it
            seen = [a.upstream for a in exc.details.get("attempts", []) if a.outcome in _SAW]
            kept = sorted(set(claim.failed) | set(seen))
            await self.store.retry_slice(claim, self.owner, kept, counted=False, split=False)
            return
        everywhere = exc.code == "no_upstream" or claim.attempts + 1 >= self.jobs.slice_attempts
        if not everywhere:
            await self.store.retry_slice(claim, self.owner, failed, counted=True, split=False)
        elif claim.count > 1:
            log.info("job %s: %s failed (%s); retrying page by page", claim.job.id, label, exc)
            await self.store.retry_slice(claim, self.owner, [], counted=True, split=True)
        else:
            await self.store.fail(claim.job.id, f"{label} failed on every upstream: {exc.message}")
            log.warning("job %s failed: %s failed on every upstream", claim.job.id, label)

    async def _assemble(self, job: Job) -> None:
        try:
            await self._assemble_job(job)
        except asyncio.CancelledError:
            log.info("job %s: assembly given up (lease lost or stopping)", job.id)
        except StoreUnavailable as exc:  # its lease expires: assembled again later
            log.warning("job %s: assembly given up: %s", job.id, exc)
        except Exception as exc:
            log.exception("job %s: assembly failed", job.id)
            await self.store.fail(job.id, f"assembling the result failed: {exc}")
        finally:
            self._assemblies -= 1
            self._forget(job.id)
            self.wake()

    @staticmethod
    def _jsonl(job: Job, pages: list[dict[str, Any]]) -> bytes:
        """The JSON Lines result: one line per page, the first with ``dataInfo``."""
        info = {"numPages": len(pages), "type": job.kind}
        lines = [
            json.dumps(
                {"result": {"layoutParsingResults": [page], **({} if i else {"dataInfo": info})}},
                ensure_ascii=False,
            )
            for i, page in enumerate(pages)
        ]
        return ("\n".join(lines) + "\n").encode()

    async def _assemble_job(self, job: Job) -> None:
        pages = await self.store.read_pages(job.id)
        restructure = job.options.get("restructure", {})
        if len(pages) > 1 and restructure.get("restructurePages", True):
            pages = await self._restructure(job, pages, restructure)
        result = await asyncio.to_thread(self._jsonl, job, pages)
        if await self.store.finish_job(job.id, result, self.owner):
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

        async def work(client: UpstreamClient, upstream: Upstream, timeout: float) -> Any:
            response = await client.post(
                upstream.url + paddlex_routes.RESTRUCTURE_PAGES, json=body, timeout=timeout
            )
            merged = restructured(response)
            if len(merged) != len(pages):
                raise UpstreamFailure("protocol_error", "page count changed in restructure", 200)
            return merged

        merged, _, _ = await self.services.proxy.run(
            self.services.settings, work, bypass_limit=True, tenant=job.tenant
        )
        return [_restructured_page(page, new) for page, new in zip(pages, merged, strict=True)]

    async def _callback(self, job: Job) -> None:
        """POST the job's status to its callback URL (SSRF-guarded), once, best effort."""
        current = await self.store.get(job.id)
        if current is None or job.callback_url is None:
            return
        try:
            response = await self.services.fetch_client().post(
                job.callback_url,
                json={"code": 0, "msg": "Success", "data": job_data(current, None)},
                timeout=self.services.settings.input.url_timeout_s,
            )
            log.info("job %s: callback answered %d", job.id, response.status_code)
        except Exception as exc:
            log.warning("job %s: callback failed: %s", job.id, exc)


def _by_job(claims: list[SliceClaim]) -> list[list[SliceClaim]]:
    """Claims grouped by job, in their order."""
    groups: dict[str, list[SliceClaim]] = {}
    for claim in claims:
        groups.setdefault(claim.job.id, []).append(claim)
    return list(groups.values())


def _retrieve(future: asyncio.Future[Any]) -> None:
    """Mark a shared future's exception as seen (each user handles it on its own)."""
    if not future.cancelled():
        future.exception()


def _restructured_page(page: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """A page as ``/restructure-pages`` answered it, with the page's other fields and its place
    in the document (``prunedResult.page_index``: PaddleX drops it from the pages it answers)."""
    merged = {**page, **new}
    index = (page.get("prunedResult") or {}).get("page_index")
    if index is not None and isinstance(merged.get("prunedResult"), dict):
        merged["prunedResult"] = {**merged["prunedResult"], "page_index": index}
    return merged
