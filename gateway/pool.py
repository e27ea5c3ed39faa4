"""Upstream pool: the upstreams, balancing, leases, panic, retry budget (health decisions in
:mod:`gateway.outlier`).

Pure asyncio state, no HTTP: the proxy asks for a :class:`Lease` on an upstream, does its I/O,
and releases the lease with an outcome (see :mod:`gateway.upstream` for the outcomes and what
counts towards ejection). In ``queue`` mode requests wait for a free upstream in the
:class:`~gateway.central_queue.CentralQueue`, and among free upstreams the one with the lowest
recent service time wins (a median of its last successful attempts, in classes a factor of 2
wide), then the topology tie-break. All methods run on the event loop thread; the synchronous
ones are atomic with respect to other coroutines.

Usage::

    pool = UpstreamPool(settings, metrics)
    lease = await pool.acquire(exclude={"http://a"}, timeout=30.0)
    try:
        ...  # talk to lease.upstream.url
    finally:
        pool.release(lease, "success", latency_s=1.2)
"""

from __future__ import annotations

import math
import random
import statistics
import time
from collections import Counter
from collections.abc import Callable, Collection
from typing import Any

from gateway.central_queue import CentralQueue
from gateway.metrics import GatewayMetrics
from gateway.outlier import PoolHealth
from gateway.policies import Policy, make_policy
from gateway.settings import Settings
from gateway.upstream import FAILURE_OUTCOMES, GOOD_OUTCOMES, OUTCOMES, Lease, PoolError, Upstream


class NoUpstreamAvailable(PoolError):
    """Nothing left to try (none configured, or all already tried by this request)."""


class UpstreamPool(PoolHealth):
    """All upstreams of one gateway, the balancing policy and the central queue.

    The health half (ejection, probes, dead and stuck upstreams) is
    :class:`gateway.outlier.PoolHealth`.
    """

    def __init__(
        self,
        settings: Settings,
        metrics: GatewayMetrics | None = None,
        *,
        rng: random.Random | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._rng = rng or random.Random()
        self._clock = clock
        self.metrics = metrics
        self.upstreams: list[Upstream] = []
        self._by_url: dict[str, Upstream] = {}
        self.queue = CentralQueue(metrics, clock=clock, retry_after=self.retry_after)
        self.active_requests = 0
        self.retries_in_flight = 0
        self.settings = settings
        self.policy: Policy = make_policy(settings.load_balance.mode, self._rng)
        self.reconfigure(settings)

    # ----------------------------------------------------------------- configuration
    def reconfigure(self, settings: Settings) -> None:
        """Swap in new settings; state is kept for URLs present before and after."""
        old_mode = self.settings.load_balance.mode
        self.settings = settings
        if settings.load_balance.mode != old_mode:
            self.policy = make_policy(settings.load_balance.mode, self._rng)
        upstreams = []
        for spec in settings.upstreams:
            current = self._by_url.get(spec.url)
            if current is None:
                current = Upstream(spec=spec)
            else:
                current.spec = spec
            upstreams.append(current)
        if not settings.health.enabled:
            for u in upstreams:
                u.probe_healthy, u.probe_failures = True, 0
        self.upstreams = upstreams
        self._by_url = {u.url: u for u in upstreams}
        self._dispatch()

    def get(self, url: str) -> Upstream | None:
        return self._by_url.get(url)

    @property
    def mode(self) -> str:
        return self.settings.load_balance.mode

    @property
    def queue_depth(self) -> int:
        return len(self.queue)

    # ----------------------------------------------------------------- eligibility
    def eligible(self, now: float | None = None) -> tuple[list[Upstream], bool]:
        """Upstreams that may receive traffic, and whether the panic threshold is hit.

        In panic (fewer than ``panic_threshold_percent`` healthy, or none) health is ignored.
        """
        now = self._clock() if now is None else now
        healthy = [u for u in self.upstreams if u.state(now) == "healthy"]
        total = len(self.upstreams)
        threshold = self.settings.outlier.panic_threshold_percent
        if total and (not healthy or len(healthy) * 100 < threshold * total):
            return list(self.upstreams), True
        return healthy, False

    def _load_key(self) -> Callable[[Upstream], tuple[float, ...]]:
        """The sort key among candidates: in-flight count, then (``queue`` mode) the speed
        class, then (topology-aware) the in-flight totals of the vLLM, card and host."""
        speed = self._speed_class() if self.policy.uses_queue else None
        if not self.settings.load_balance.topology_aware:
            if speed is None:
                return lambda u: (u.in_flight,)
            return lambda u: (u.in_flight, speed(u))
        vllm: Counter[Any] = Counter()
        card: Counter[Any] = Counter()
        host: Counter[Any] = Counter()
        for u in self.upstreams:
            if u.in_flight:
                vllm[u.spec.vllm] += u.in_flight
                card[(u.spec.host, u.spec.card)] += u.in_flight
                host[u.spec.host] += u.in_flight

        def key(u: Upstream) -> tuple[float, ...]:
            s = u.spec
            return (
                u.in_flight,
                speed(u) if speed is not None else 0,
                vllm[s.vllm] if s.vllm is not None else 0,
                card[(s.host, s.card)] if s.card is not None else 0,
                host[s.host] if s.host is not None else 0,
            )

        return key

    def _speed_class(self) -> Callable[[Upstream], int]:
        """An upstream's service time as a class: ``round(log2(service / average))``.

        ``service_s`` is the median of the upstream's last successful attempts; an upstream
        without one, or whose last sample is older than ``load_balance.speed_memory_s``, counts
        as average (class 0). Classes are a factor of 2 wide, so the noise between instances of
        the same speed (documents differ in size) does not separate them and the topology
        tie-break still decides among them, while a 3x slower instance ranks behind every
        average one.
        """
        now = self._clock()
        known = {u.url: u.service_s for u in self.upstreams if self._speed_known(u, now)}
        if not known:
            return lambda u: 0
        average = sum(known.values()) / len(known)

        def speed_class(u: Upstream) -> int:
            service = known.get(u.url)
            return 0 if service is None else round(math.log2(service / average))

        return speed_class

    def _speed_known(self, u: Upstream, now: float) -> bool:
        """Whether ``u`` has a service time measured within ``speed_memory_s``."""
        memory = self.settings.load_balance.speed_memory_s
        return bool(u.service_s) and now - u.service_at <= memory

    def _limit(self) -> float:
        lb = self.settings.load_balance
        return lb.upstream_concurrency if self.policy.uses_queue else math.inf

    # ----------------------------------------------------------------- leases
    def _lease(self, upstream: Upstream, queued_s: float = 0.0, limited: bool = True) -> Lease:
        upstream.in_flight += 1
        lease = Lease(upstream=upstream, started=self._clock(), queued_s=queued_s, limited=limited)
        upstream.leases.add(lease)
        return lease

    def _choose(self, candidates: list[Upstream]) -> Upstream:
        return self.policy.choose(candidates, self.upstreams, self._load_key())

    async def acquire(
        self,
        exclude: Collection[str] = (),
        timeout: float = 60.0,
        *,
        retry: bool = False,
        bypass_limit: bool = False,
        tenant: str | None = None,
        background: bool = False,
    ) -> Lease:
        """Lease an upstream not in ``exclude``.

        Non-queue policies choose at once. In ``queue`` mode a request waits in the central
        queue for a free upstream (retries first, then the ``tenant`` of each waiting request
        in turn); ``QueueFull`` when the queue is at ``queue_max_depth``, ``QueueTimeout``
        after ``timeout`` seconds. ``bypass_limit`` skips the concurrency limit (cheap calls
        such as ``/restructure-pages``). ``background`` (job slices): in ``queue`` mode it
        waits behind every interactive request, even for a free upstream.
        """
        self._dispatch()
        eligible, _ = self.eligible()
        excluded = frozenset(exclude)
        candidates = [u for u in eligible if u.url not in excluded]
        if not candidates:
            if not self.upstreams:
                raise NoUpstreamAvailable("no upstreams configured")
            raise NoUpstreamAvailable("every upstream has been tried")
        limit = self._limit()
        if bypass_limit or limit == math.inf:
            return self._lease(self._choose(candidates), limited=not bypass_limit)
        free = [u for u in candidates if u.in_flight < limit]
        if free and not (background and self.queue.interactive_waiting):
            return self._lease(self._choose(free))
        return await self.queue.wait(
            excluded,
            timeout,
            retry=retry,
            max_depth=self.settings.load_balance.queue_max_depth,
            abandon=lambda lease: self.release(lease, "cancelled", 0.0),
            tenant=tenant,
            background=background,
        )

    def _dispatch(self) -> None:
        """Hand free upstreams to the queued requests."""
        if not self.queue:
            return
        limit = self._limit()
        eligible, _ = self.eligible()
        free = [u for u in eligible if u.in_flight < limit]
        self.queue.dispatch(free, limit, self._choose, self._lease)

    def kick(self) -> None:
        """Re-run dispatch (ejections expire by time, so the maintenance loop calls this)."""
        self._dispatch()

    def release(
        self, lease: Lease, outcome: str, latency_s: float, error: str | None = None
    ) -> None:
        """Return a lease with the attempt's outcome; updates counters and passive health."""
        if lease.released:
            return
        lease.released = True
        lease.cancel = None
        u = lease.upstream
        u.leases.discard(lease)
        u.in_flight = max(0, u.in_flight - 1)
        u.outcomes[outcome] += 1
        now = self._clock()
        if outcome in GOOD_OUTCOMES:
            u.consecutive_failures = 0
            if not u.is_ejected(now):
                u.ejection_level = 0
            if outcome == "success":
                u.latencies.append(latency_s)
                u.ewma_s = latency_s if u.ewma_s is None else 0.8 * u.ewma_s + 0.2 * latency_s
                if lease.limited:  # not the cheap bypass calls (/restructure-pages)
                    if not self._speed_known(u, now):
                        u.service_samples.clear()
                    u.service_samples.append(latency_s)
                    u.service_s = statistics.median(u.service_samples)
                    u.service_at = now
        elif outcome in FAILURE_OUTCOMES:
            u.last_error = error or outcome
            u.consecutive_failures += 1
            if outcome == "connect_error":
                self.mark_down(u, u.last_error)
            self._maybe_eject(u, now)
        elif error:
            u.last_error = error
        if self.metrics is not None:
            self.metrics.upstream_rq_total.labels(upstream=u.url, outcome=outcome).inc()
            if outcome != "cancelled":
                self.metrics.upstream_rq_duration.labels(upstream=u.url).observe(latency_s)
        self._dispatch()

    # ----------------------------------------------------------------- retry budget
    def begin_request(self) -> None:
        self.active_requests += 1

    def end_request(self) -> None:
        self.active_requests = max(0, self.active_requests - 1)

    def retry_allowance(self) -> int:
        cfg = self.settings.retry_budget
        return max(cfg.min_retry_concurrency, int(cfg.budget_percent / 100 * self.active_requests))

    def try_begin_retry(self) -> bool:
        """Take a retry slot if the budget allows; pair with :meth:`end_retry`."""
        if self.retries_in_flight >= self.retry_allowance():
            if self.metrics is not None:
                self.metrics.retry_overflow.inc()
            return False
        self.retries_in_flight += 1
        if self.metrics is not None:
            self.metrics.retries.inc()
        return True

    def end_retry(self) -> None:
        self.retries_in_flight = max(0, self.retries_in_flight - 1)

    # ----------------------------------------------------------------- reporting
    def retry_after(self) -> int:
        """Seconds a refused caller should wait: queued work over capacity, 1..60."""
        samples = [u.ewma_s for u in self.upstreams if u.ewma_s is not None]
        service = sum(samples) / len(samples) if samples else 1.0
        capacity = max(1, len(self.upstreams) * self.settings.load_balance.upstream_concurrency)
        return int(min(60, max(1, math.ceil((len(self.queue) + 1) / capacity * service))))

    def gauge_snapshot(self) -> dict[str, Any]:
        now = self._clock()
        _, panic = self.eligible(now)
        return {
            "upstreams": [(u.url, u.in_flight, u.state(now)) for u in self.upstreams],
            "queue_depth": len(self.queue),
            "panic": panic,
        }

    def snapshot(self) -> dict[str, Any]:
        """The ``/upstreams`` document."""
        now = self._clock()
        _, panic = self.eligible(now)
        items = []
        for u in self.upstreams:
            s = u.spec
            items.append(
                {
                    "url": u.url,
                    "host": s.host,
                    "card": s.card,
                    "vllm": s.vllm,
                    "container": s.container,
                    "state": u.state(now),
                    "in_flight": u.in_flight,
                    "requests": {name: u.outcomes.get(name, 0) for name in OUTCOMES},
                    "ejections": u.ejections,
                    "ejected_for_s": round(u.ejected_until - now, 1) if u.is_ejected(now) else None,
                    "consecutive_failures": u.consecutive_failures,
                    "last_error": u.last_error,
                    "latency_ms": u.latency_ms(),
                    "service_ms": None if u.service_s is None else round(u.service_s * 1000, 1),
                }
            )
        return {
            "mode": self.mode,
            "queue_depth": len(self.queue),
            "panic": panic,
            "active_requests": self.active_requests,
            "retries_in_flight": self.retries_in_flight,
            "upstreams": items,
        }
