"""Active health probes of every upstream's ``/health``.

A probe succeeds on HTTP 200 (PaddleX answers ``{"errorCode": 0, "errorMsg": "Healthy"}``);
anything else, a connect error or a timeout is a failure. The pool applies the
``health.unhealthy_threshold`` / ``health.healthy_threshold`` hysteresis. The checker reads the
current settings and upstream list on every round, so reloads need no restart.

Usage::

    checker = HealthChecker(pool, client_getter=lambda: runtime.client)
    checker.start()          # background task on the running loop
    await checker.probe_all()  # one round, e.g. in tests
    await checker.stop()
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

import httpx

from gateway.pool import UpstreamPool
from gateway.upstream import Upstream

log = logging.getLogger("gateway.health")


class HealthChecker:
    """Probe all upstreams every ``health.interval_s`` and kick the pool's dispatcher."""

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

    async def probe(self, upstream: Upstream) -> None:
        """Probe one upstream and record the result in the pool."""
        cfg = self._pool.settings.health
        url = upstream.url + cfg.path
        try:
            response = await self._client_getter().get(url, timeout=cfg.timeout_s)
            ok = response.status_code == 200
            error = None if ok else f"HTTP {response.status_code}"
        except httpx.TimeoutException:
            ok, error = False, f"timeout after {cfg.timeout_s}s"
        except httpx.HTTPError as exc:
            ok, error = False, f"{type(exc).__name__}: {exc}"
        if self._pool.get(upstream.url) is upstream:  # still configured
            before = upstream.probe_healthy
            self._pool.record_probe(upstream, ok, error)
            if before != upstream.probe_healthy:
                log.warning(
                    "upstream %s is now %s%s",
                    upstream.url,
                    "healthy" if upstream.probe_healthy else "unhealthy",
                    f" ({error})" if error else "",
                )

    async def probe_all(self) -> None:
        """One probe round over the current upstream list."""
        upstreams = list(self._pool.upstreams)
        if upstreams:
            await asyncio.gather(*(self.probe(u) for u in upstreams))

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        next_probe = loop.time()
        while True:
            cfg = self._pool.settings.health
            if cfg.enabled and loop.time() >= next_probe:
                try:
                    await self.probe_all()
                except Exception:  # never let the loop die
                    log.exception("health probe round failed")
                next_probe = loop.time() + cfg.interval_s
            self._pool.kick()  # ejections expire by time
            await asyncio.sleep(min(self._tick_s, cfg.interval_s))

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="health")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
