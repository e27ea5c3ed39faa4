"""Everything one gateway instance owns: settings, pool, HTTP clients, probes, watcher, the
token registry, the URL guard and the PDF workers.

The upstream client is one :class:`gateway.wire.upstream_http.UpstreamClient` with one keep-alive
pool per upstream origin (:func:`make_client`); the auxiliary client (httpx) serves health
probes; URL fetches for callers use their own guarded client
(:func:`gateway.wire.urlguard.guarded_client`), which reaches no internal address that
``input.url_allow`` does not open.

``Runtime.apply`` is the atomic swap used by hot reload: it runs synchronously on the event
loop, so requests see either the old or the new settings, never a mix. Requests take a
reference to ``runtime.settings`` and ``runtime.client`` when they start and finish on those;
upstream state (in-flight counts, ejections, health) is kept for URLs present before and after.

A ``seat`` makes this runtime one of several worker processes (:mod:`gateway.server.supervisor`):
the pool's occupancy and the token quotas count every worker (:mod:`gateway.shared.occupancy`), and
``/metrics`` gathers every worker's series (:mod:`gateway.observability.worker_metrics`).

Usage::

    runtime = Runtime(settings, config_path="/etc/paddleocr-fleet/gateway.json")
    await runtime.start()
    ...
    await runtime.stop()
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from pathlib import Path

import httpx

from gateway.access.control import Access
from gateway.config.reload import ConfigWatcher
from gateway.config.settings import Settings
from gateway.dispatch.health import HealthChecker
from gateway.dispatch.pool import UpstreamPool
from gateway.inputs.document import DocumentInspector
from gateway.jobs.backend import JobBackend
from gateway.jobs.runner import JobRunner
from gateway.jobs.stores import open_backend
from gateway.observability.metrics import GatewayMetrics
from gateway.observability.worker_metrics import WorkerMetrics
from gateway.shared.counters import LocalCounters, SharedCounters
from gateway.shared.occupancy import Seat
from gateway.upstream.proxy import Proxy
from gateway.wire.upstream_http import UpstreamClient
from gateway.wire.urlguard import Resolver, UrlGuard, guarded_client

log = logging.getLogger("gateway.runtime")


def upstream_origin(url: str) -> str:
    """``scheme://host[:port]`` of an upstream URL: the key of its connection pool."""
    parsed = httpx.URL(url)
    return f"{parsed.scheme}://{parsed.netloc.decode('ascii')}"


def upstream_origins(settings: Settings) -> tuple[str, ...]:
    """The distinct origins of the configured upstreams, in config order."""
    return tuple(dict.fromkeys(upstream_origin(spec.url) for spec in settings.upstreams))


def make_client(settings: Settings) -> UpstreamClient:
    """The one shared upstream client: a keep-alive pool per upstream origin
    (:mod:`gateway.wire.upstream_http`), each at most ``http.pool_max_connections`` open and
    ``http.pool_max_keepalive_connections`` idle, idle ones closed after
    ``http.pool_keepalive_s``; a slice keeper's origin may have a connection for every
    upstream behind it (one job slice each)."""
    http = settings.http
    client = UpstreamClient(
        max_connections=http.pool_max_connections,
        max_idle=http.pool_max_keepalive_connections,
        keepalive_s=http.pool_keepalive_s,
        connect_timeout_s=http.connect_timeout_s,
        timeout_s=http.timeout_s,
    )
    for keeper, upstreams in settings.keepers.items():
        if upstreams > http.pool_max_connections:
            client.allow(keeper, upstreams)
    return client


class Runtime:
    """State of one running gateway; see module doc."""

    def __init__(
        self,
        settings: Settings,
        config_path: str | os.PathLike[str] | None = None,
        watch: bool | None = None,
        resolver: Resolver | None = None,
        seat: Seat | None = None,
    ) -> None:
        self.settings = settings
        self.config_path = Path(config_path) if config_path else None
        self.seat = seat
        self.metrics = GatewayMetrics() if seat is None else WorkerMetrics(seat)
        counters = LocalCounters() if seat is None else SharedCounters(seat)
        self.pool = UpstreamPool(settings, self.metrics, seat=seat, counters=counters)
        self.access = Access(settings.auth, self.metrics, counters=counters)
        # resolver: how url fetches resolve host names (tests pass one without network I/O)
        self.url_guard = UrlGuard(settings.input.url_allow, resolver)
        self.inspector = DocumentInspector(settings.input.pdf_workers)
        self.client: UpstreamClient | None = None
        self.aux_client: httpx.AsyncClient | None = None  # health probes
        self._fetch_client: httpx.AsyncClient | None = None  # callers' url fetches, guarded
        self.proxy = Proxy(self.pool, self._client)
        self.health = HealthChecker(self.pool, self._aux_client)
        self.watcher: ConfigWatcher | None = None
        if self.config_path is not None and (watch if watch is not None else True):
            self.watcher = ConfigWatcher(
                self.config_path,
                self.apply,
                lambda: self.settings.reload.poll_interval_s,
                on_result=lambda result: self.metrics.config_reloads.labels(result=result).inc(),
            )
        self._retired: set[asyncio.Task[None]] = set()
        # the job store and runner (jobs.dir; read at start-up, a reload does not move it)
        self.jobs: tuple[JobBackend, JobRunner] | None = None

    def _client(self) -> UpstreamClient:
        if self.client is None:
            raise RuntimeError("gateway runtime is not started")
        return self.client

    def _aux_client(self) -> httpx.AsyncClient:
        if self.aux_client is None:
            raise RuntimeError("gateway runtime is not started")
        return self.aux_client

    def fetch_client(self) -> httpx.AsyncClient:
        """The client of callers' URL fetches: every connection checked by ``url_guard``."""
        if self._fetch_client is None:
            raise RuntimeError("gateway runtime is not started")
        return self._fetch_client

    async def start(self) -> None:
        self.client = make_client(self.settings)
        self.aux_client = httpx.AsyncClient(
            limits=httpx.Limits(max_connections=100, max_keepalive_connections=20),
            trust_env=False,
        )
        self._fetch_client = guarded_client(lambda: self.url_guard)
        if self.seat is not None:
            self.seat.listen(asyncio.get_running_loop(), self._on_wake)
        self.health.start()
        if self.settings.jobs.enabled:
            store = await open_backend(self.settings.jobs)
            runner = JobRunner(self, store)
            await runner.start()
            self.jobs = (store, runner)
            self.metrics.job_stats = store.scrape_stats
            log.info("jobs: %s store", store.name)
        if self.watcher is not None:
            self.watcher.start(poll=self.settings.reload.enabled)
        log.info(
            "gateway started: %d upstreams, mode %s",
            len(self.settings.upstreams),
            self.settings.load_balance.mode,
        )
        self._warn_access(None, self.settings)

    def _on_wake(self) -> None:
        """Another worker freed an upstream, or wants this worker's metrics."""
        self.pool.kick()
        if isinstance(self.metrics, WorkerMetrics):
            self.metrics.answer(self.pool.gauge_snapshot, self.access.in_flight())

    async def stop(self) -> None:
        if self.seat is not None:
            self.seat.unlisten()
        if self.watcher is not None:
            await self.watcher.stop()
        await self.health.stop()
        if self.jobs is not None:
            store, runner = self.jobs
            self.metrics.job_stats = None
            await runner.stop()
            await store.close()
            self.jobs = None
        for task in list(self._retired):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        for client in (self.client, self.aux_client, self._fetch_client):
            if client is not None:
                await client.aclose()
        await self.inspector.close()

    @staticmethod
    def _warn_access(old: Settings | None, new: Settings) -> None:
        """Say so when the gateway is open, or its admin routes are closed to everyone."""
        before = None if old is None else (old.auth.enabled, bool(old.auth.admin_tokens))
        after = (new.auth.enabled, bool(new.auth.admin_tokens))
        if before == after:
            return
        if not new.auth.enabled:
            log.warning(
                "no bearer tokens configured (auth.tokens, auth.admin_tokens): the gateway "
                "serves every caller that reaches its port, /upstreams and /metrics included"
            )
        elif not new.auth.admin_tokens:
            log.warning("no auth.admin_tokens: /upstreams and /metrics refuse every caller")
        else:
            log.info(
                "bearer tokens required: %d user, %d admin",
                len(new.auth.tokens),
                len(new.auth.admin_tokens),
            )

    def apply(self, new: Settings) -> None:
        """Swap in ``new`` settings atomically (called by the watcher or directly).

        A new upstream client is built when the ``http`` settings or the set of upstream
        origins change; requests in flight finish on the old one, closed after the deadline.
        """
        old = self.settings
        origins = upstream_origins(new)
        if self.client is not None and (
            new.http.model_dump() != old.http.model_dump()
            or set(origins) != set(upstream_origins(old))
            or new.keepers != old.keepers
        ):
            retired = self.client
            self.client = make_client(new)
            grace = old.http.request_deadline_s + 5
            task = asyncio.get_running_loop().create_task(self._close_later(retired, grace))
            self._retired.add(task)
            task.add_done_callback(self._retired.discard)
        self.settings = new
        self.pool.reconfigure(new)
        self.access.reconfigure(new.auth)
        self.url_guard = UrlGuard(new.input.url_allow, self.url_guard.resolver)
        self._warn_access(old, new)

    @staticmethod
    async def _close_later(client: UpstreamClient, delay: float) -> None:
        try:
            await asyncio.sleep(delay)
        finally:
            await client.aclose()
