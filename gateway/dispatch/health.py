"""Active health probes of every upstream's ``/health``.

A probe succeeds on HTTP 200 (PaddleX answers ``{"errorCode": 0, "errorMsg": "Healthy"}``);
anything else, a connect error or a timeout is a failure. The pool applies the
``health.unhealthy_threshold`` / ``health.healthy_threshold`` hysteresis and decides when an
upstream is stuck (:mod:`gateway.dispatch.outlier`). Each upstream is probed on its own schedule,
every ``health.interval_s`` after its previous probe ended; a probe that times out while the
upstream has attempts in flight is repeated at once, so a hung instance is found within about
``interval_s + stuck_after_timeouts x timeout_s``. The checker reads the current settings and
upstream list on every tick, so reloads need no restart.

Usage::

    checker = HealthChecker(pool, client_getter=lambda: runtime.client)
    checker.start()          # background task on the running loop
    await checker.probe_all()  # one round, e.g. in tests
    await checker.stop()
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Callable

import httpx

from gateway.dispatch.pool import UpstreamPool
from gateway.dispatch.upstreams import Upstream

log = logging.getLogger("gateway.health")


class HealthChecker:
    """Probe every upstream every ``health.interval_s`` (each on its own schedule, so a hung
    upstream delays no other) and kick the pool's dispatcher."""

    def __init__(
        self,
        pool: UpstreamPool,
        client_getter: Callable[[], httpx.AsyncClient],
        tick_s: float = 0.5,
    ) -> None:
        self._pool = pool
        self._client_getter = client_getter
        self._tick_s = tick_s
        self._task: asyncio.Task[None] | None = None
        self._next: dict[str, float] = {}  # url -> loop time of its next probe
        self._probing: dict[str, asyncio.Task[None]] = {}
        self._drained: set[str] = set()  # urls drained at the last tick

    async def probe(self, upstream: Upstream) -> bool:
        """Probe one upstream and record the result in the pool.

        Returns True when the pool asks for another probe at once (a timeout while attempts
        are in flight: the upstream may be stuck, see :mod:`gateway.dispatch.outlier`).
        """
        cfg = self._pool.settings.health
        url = upstream.url + cfg.path
        timed_out = False
        reachable: bool | None = True
        try:
            response = await self._client_getter().get(url, timeout=cfg.timeout_s)
            ok = response.status_code == 200
            error = None if ok else f"HTTP {response.status_code}"
        except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
            ok, error, reachable = False, f"{type(exc).__name__}: {exc}", False
            timed_out = isinstance(exc, httpx.ConnectTimeout)
        except httpx.TimeoutException:
            ok, error, timed_out, reachable = False, f"timeout after {cfg.timeout_s}s", True, None
        except httpx.HTTPError as exc:
            ok, error, reachable = False, f"{type(exc).__name__}: {exc}", None
        if self._pool.get(upstream.url) is not upstream:  # no longer configured
            return False
        before = upstream.probe_healthy
        again = self._pool.record_probe(
            upstream, ok, error, timed_out=timed_out, reachable=reachable
        )
        if before != upstream.probe_healthy:
            log.warning(
                "upstream %s is now %s%s",
                upstream.url,
                "healthy" if upstream.probe_healthy else "unhealthy",
                f" ({error})" if error else "",
            )
        return again

    async def recover(self, upstream: Upstream) -> bool:
        """Probe an upstream taken back in after a drain: its probes failed while it was
        restarted, and the caller (a rollout) has just seen it ready, so one passing probe makes
        it healthy again instead of ``health.healthy_threshold`` probes ``interval_s`` apart."""
        upstream.recover_on_probe = True
        await self.probe(upstream)
        return upstream.probe_healthy

    async def probe_all(self) -> None:
        """One probe round over the current upstream list."""
        upstreams = list(self._pool.upstreams)
        if upstreams:
            await asyncio.gather(*(self.probe(u) for u in upstreams))

    async def _probe_series(self, upstream: Upstream) -> None:
        """Probe once, and again at once while the upstream is suspect (bounded)."""
        for _ in range(max(1, self._pool.settings.health.stuck_after_timeouts)):
            if not await self.probe(upstream):
                return

    def _probe_done(self, url: str, task: asyncio.Task[None]) -> None:
        self._probing.pop(url, None)
        loop = asyncio.get_running_loop()
        self._next[url] = loop.time() + self._pool.settings.health.interval_s
        if not task.cancelled() and task.exception() is not None:  # never let probing die
            log.error("health probe of %s failed", url, exc_info=task.exception())

    def _start_due_probes(self, now: float) -> None:
        urls, drained = set(), set()
        for u in self._pool.upstreams:
            urls.add(u.url)
            if self._pool.drained_for(u) is not None:
                drained.add(u.url)
            elif u.url in self._drained:  # undrained, maybe through another worker
                u.recover_on_probe = True
                self._next[u.url] = now
            if u.url in self._probing or now < self._next.get(u.url, now):
                continue
            task = asyncio.get_running_loop().create_task(
                self._probe_series(u), name=f"probe {u.url}"
            )
            self._probing[u.url] = task
            task.add_done_callback(functools.partial(self._probe_done, u.url))
        self._drained = drained
        for url in [url for url in self._next if url not in urls]:
            del self._next[url]

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            cfg = self._pool.settings.health
            if cfg.enabled:
                self._start_due_probes(loop.time())
            self._pool.kick()  # ejections expire by time
            await asyncio.sleep(min(self._tick_s, cfg.interval_s))

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="health")

    async def stop(self) -> None:
        tasks = [t for t in (self._task, *self._probing.values()) if t is not None]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._task = None
        self._probing.clear()
