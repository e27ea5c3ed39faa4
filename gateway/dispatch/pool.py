"""Upstream pool: the upstreams, balancing, leases, panic, retry budget (health decisions in
:mod:`gateway.dispatch.outlier`).

Pure asyncio state, no HTTP: the proxy asks for a :class:`Lease` on an upstream, does its I/O,
and releases the lease with an outcome (see :mod:`gateway.dispatch.upstreams` for the outcomes and
what counts towards ejection). In ``queue`` mode requests wait for a free upstream in the
:class:`~gateway.dispatch.central_queue.CentralQueue`, and among free upstreams the one with the
lowest recent service time wins (a median of its last successful attempts, in classes a factor of 2
wide), then the topology tie-break. All methods run on the event loop thread; the synchronous
ones are atomic with respect to other coroutines.

The pool is put together from three parts: choosing (:mod:`gateway.dispatch.choosing`: the
policy over the upstreams' loads), leasing (:mod:`gateway.dispatch.leasing`: a place on an
upstream, counted) and queueing (:mod:`gateway.dispatch.queueing`: waiting for capacity). The
counts they read live in one :class:`~gateway.shared.counters.Counters`: this process's
(:class:`~gateway.shared.counters.LocalCounters`), or with a ``seat`` (one of several worker
processes, :mod:`gateway.shared.occupancy`) those of all workers
(:class:`~gateway.shared.counters.SharedCounters`): then the concurrency limit and the load keys
count every worker's attempts, drains (:mod:`gateway.dispatch.drain`) hold in every worker, and a
free upstream goes to the oldest waiter of any worker (:mod:`gateway.dispatch.handoff`); health,
ejection, service times and the retry budget stay this worker's own. The code path is the same.

No capacity is a wait, not an error: when no upstream can take a request (all drained, all
unreachable, the first deploy), it waits in the central queue, in every mode, until one comes
back (undrained, a probe passes) or ``load_balance.queue_timeout_s`` runs out.

Usage::

    pool = UpstreamPool(settings, metrics)
    lease = await pool.acquire(exclude={"http://a"}, timeout=30.0)
    try:
        ...  # talk to lease.upstream.url
    finally:
        pool.release(lease, "success", latency_s=1.2)
"""

from __future__ import annotations

import functools
import logging
import math
import os
import random
import statistics
import time
from collections.abc import Callable, Collection, Hashable
from typing import Any

from gateway.config.settings import Settings
from gateway.dispatch.central_queue import BACKGROUND, INTERACTIVE, RETRY, CentralQueue
from gateway.dispatch.choosing import Chooser
from gateway.dispatch.handoff import AnyHandoff, Handoff, SoloHandoff
from gateway.dispatch.leasing import Leasing
from gateway.dispatch.outlier import PoolHealth
from gateway.dispatch.policies import Policy
from gateway.dispatch.queueing import Queueing
from gateway.dispatch.upstreams import FAILURE_OUTCOMES, GOOD_OUTCOMES, OUTCOMES, Lease, Upstream
from gateway.errors import NoUpstreamAvailable
from gateway.observability.metrics import GatewayMetrics
from gateway.shared.counters import Counters, LocalCounters, SharedCounters
from gateway.shared.occupancy import Seat, SlotsExhausted

log = logging.getLogger("gateway.pool")


class UpstreamPool(PoolHealth):
    """All upstreams of one gateway, the balancing policy and the central queue.

    The health half (ejection, probes, dead and stuck upstreams) is
    :class:`gateway.dispatch.outlier.PoolHealth`.
    """

    def __init__(
        self,
        settings: Settings,
        metrics: GatewayMetrics | None = None,
        *,
        rng: random.Random | None = None,
        clock: Callable[[], float] = time.monotonic,
        seat: Seat | None = None,
        counters: Counters | None = None,
    ) -> None:
        """``seat``: this worker's place on the workers' board (several worker processes),
        None with one; ``counters``: where leases and drains are counted (default: this
        process's, or the workers' of ``seat``)."""
        self._clock = clock
        self.metrics = metrics
        self.upstreams: list[Upstream] = []
        self._by_url: dict[str, Upstream] = {}
        if counters is None:
            counters = LocalCounters() if seat is None else SharedCounters(seat)
        self.counters = counters
        self.queue = CentralQueue(metrics, clock=clock, retry_after=self.retry_after)
        self.handoff: AnyHandoff = (
            SoloHandoff(self.queue) if seat is None else Handoff(seat, clock, self.kick)
        )
        self.chooser = Chooser(self.counters, rng or random.Random(), clock, settings)
        self._count = self.chooser.count
        self.leasing = Leasing(self.counters, clock)
        self._lease = self.leasing.lease
        self.queueing = Queueing(
            self.queue,
            self.handoff,
            self.counters,
            self.chooser,
            self._lease,
            self._free,
            self._slot_of,
        )
        # hand free upstreams to the queued requests (``released=``: one was just given back);
        # a partial, not a method: it runs twice a request
        self._dispatch = functools.partial(self.queueing.dispatch, self._limit)
        self.active_requests = 0
        self.retries_in_flight = 0
        self.settings = settings
        self._limit_now = math.inf  # attempts in flight an upstream may have (reconfigure)
        self.reconfigure(settings)

    # ----------------------------------------------------------------- configuration
    def reconfigure(self, settings: Settings) -> None:
        """Swap in new settings; state is kept for URLs present before and after."""
        self.settings = settings
        upstreams = []
        for spec in settings.upstreams:
            current = self._by_url.get(spec.url)
            if current is None:
                current = Upstream(spec=spec)
                if not self._claim_slot(current):
                    continue
            else:
                current.set_spec(spec)
            upstreams.append(current)
        if not settings.health.enabled:
            for u in upstreams:
                u.probe_healthy, u.probe_failures, u.unreachable = True, 0, False
        self.upstreams = upstreams
        self._by_url = {u.url: u for u in upstreams}
        self.chooser.configure(settings, upstreams)
        lb = settings.load_balance
        self._limit_now = lb.upstream_concurrency if self.policy.uses_queue else math.inf
        self._dispatch()

    def _claim_slot(self, upstream: Upstream) -> bool:
        """Give a new upstream its slot in the counters; False (logged) when they are full."""
        try:
            upstream.slot = self.counters.upstream_slot(upstream.url)
        except SlotsExhausted as exc:
            log.error("upstream %s left out: %s", upstream.url, exc)
            return False
        return True

    def _slot_of(self, url: str) -> int | None:
        u = self._by_url.get(url)
        return None if u is None else u.slot

    def get(self, url: str) -> Upstream | None:
        return self._by_url.get(url)

    @property
    def mode(self) -> str:
        return self.settings.load_balance.mode

    @property
    def policy(self) -> Policy:
        return self.chooser.policy

    @property
    def queue_depth(self) -> int:
        """Requests waiting in the central queue (of every worker, with a seat)."""
        return self.handoff.waiting()

    # ----------------------------------------------------------------- eligibility
    def eligible(self, now: float | None = None) -> tuple[list[Upstream], bool]:
        """Upstreams that may receive traffic, and whether the panic threshold is hit.

        Drained upstreams never do. In panic (fewer than ``panic_threshold_percent`` of the
        upstreams not drained are healthy, or none) health is ignored, except for upstreams
        known to be unreachable; the list may then be empty (no capacity: requests wait).
        """
        now = self._clock() if now is None else now
        serving = self.in_service(now)
        healthy = [u for u in serving if u.probe_healthy and u.ejected_until <= now]
        total = len(serving)
        threshold = self.settings.outlier.panic_threshold_percent
        if total and (not healthy or len(healthy) * 100 < threshold * total):
            return [u for u in serving if not u.unreachable], True
        return healthy, False

    def _free(self, limit: float) -> list[Upstream]:
        """The eligible upstreams with fewer than ``limit`` attempts in flight."""
        count = self._count
        return [u for u in self.eligible()[0] if count(u) < limit]

    def in_service(self, now: float | None = None) -> list[Upstream]:
        """The upstreams not drained (a drain past its deadline is undone here)."""
        if not self.counters.drains_active():
            return self.upstreams
        now = self._clock() if now is None else now
        return [u for u in self.upstreams if not self._drained(u, now)]

    def _drained(self, u: Upstream, now: float) -> bool:
        counters = self.counters
        until = counters.drain_until(u.slot)
        if not until:
            return False
        if until > now:
            return True
        with counters.lock():  # one worker undoes it and says so
            if counters.drain_until(u.slot) == until:
                counters.set_drain(u.slot, 0.0)
                log.warning("upstream %s: drain expired (ttl_s); back in service", u.url)
        return False

    # ----------------------------------------------------------------- drains
    def drain(self, upstreams: Collection[Upstream], ttl_s: float) -> None:
        """Give ``upstreams`` no new work for ``ttl_s`` seconds (again: a new deadline)."""
        until = self._clock() + ttl_s
        for u in upstreams:
            self.counters.set_drain(u.slot, until)

    def undrain(self, upstreams: Collection[Upstream]) -> None:
        """Take ``upstreams`` back in (idempotent) and serve the requests waiting for them, in
        every worker."""
        for u in upstreams:
            self.counters.set_drain(u.slot, 0.0)
        self._dispatch()
        self.handoff.wake_all()

    def drained_for(self, u: Upstream, now: float | None = None) -> float | None:
        """Seconds left of ``u``'s drain, None when it is not drained."""
        now = self._clock() if now is None else now
        until = self.counters.drain_until(u.slot)
        return until - now if until > now else None

    def in_flight(self, u: Upstream) -> int:
        """Attempts in flight at ``u`` (of every worker, with a seat)."""
        return self._count(u)

    def state(self, u: Upstream, now: float | None = None) -> str:
        """``u``'s state: "draining"/"drained" (with/without attempts in flight), else its
        health state (``Upstream.state``)."""
        now = self._clock() if now is None else now
        if self.counters.drains_active() and self.counters.drain_until(u.slot) > now:
            return "draining" if self._count(u) else "drained"
        return u.state(now)

    def capacity_problem(self) -> str | None:
        """Why no upstream can take a request now, None when one can."""
        now = self._clock()
        if self.eligible(now)[0]:
            return None
        if not self.upstreams:
            return "no upstreams configured"
        states: dict[str, int] = {}
        for u in self.upstreams:
            state = self.state(u, now)
            if state in ("draining", "drained"):
                state = "drained"
            elif u.unreachable:
                state = "unreachable"
            states[state] = states.get(state, 0) + 1
        listing = ", ".join(f"{n} {state}" for state, n in sorted(states.items()))
        return f"no upstream can take requests: {listing} of {len(self.upstreams)}"

    def _places_load(self) -> dict[Hashable, int]:
        """Attempts in flight per vLLM, card and host (``Upstream.places``), those not 0 (of
        every worker, with a seat)."""
        places = self.chooser.places
        return {p: n for p, n in zip(places, self.chooser.place_loads(), strict=False) if n}

    def _speed_known(self, u: Upstream, now: float) -> bool:
        """Whether ``u`` has a service time measured within ``speed_memory_s``."""
        memory = self.settings.load_balance.speed_memory_s
        return bool(u.service_s) and now - u.service_at <= memory

    def _limit(self) -> float:
        return self._limit_now

    # ----------------------------------------------------------------- leases
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
        waits behind every interactive request, even for a free upstream; with several
        workers a request also waits when an older waiter of another worker could use every
        free upstream.

        With no upstream able to take it (none eligible: drained, unreachable), a request
        waits in the queue in every mode, for one not in ``exclude`` to come back.
        """
        self._dispatch()
        eligible, _ = self.eligible()
        excluded = frozenset(exclude)
        candidates = [u for u in eligible if u.spec.url not in excluded] if excluded else eligible
        limit = self._limit_now
        if not candidates:  # none left to try (raise), or none can take it now (wait)
            if not self.upstreams:
                raise NoUpstreamAvailable("no upstreams configured")
            if eligible or all(u.url in excluded for u in self.upstreams):
                raise NoUpstreamAvailable("every upstream has been tried")
        elif bypass_limit or limit == math.inf:
            return self._lease(self.chooser.choose(candidates), limited=not bypass_limit)
        else:
            gate: Callable[[list[Upstream]], bool] | None = None
            if background or self.handoff.gates:
                priority = BACKGROUND if background else RETRY if retry else INTERACTIVE

                def may_take(free: list[Upstream]) -> bool:
                    if background and self.queue.interactive_waiting:
                        return False
                    return self.handoff.gate(priority, self._clock(), free)

                gate = may_take
            lease = self.leasing.take(candidates, limit, self.chooser, gate)
            if lease is not None:
                return lease
        return await self.queue.wait(
            excluded,
            timeout,
            retry=retry,
            max_depth=self.settings.load_balance.queue_max_depth,
            abandon=lambda lease: self.release(lease, "cancelled", 0.0),
            tenant=tenant,
            background=background,
            depth=self.handoff.depth(),
            enqueued=self.handoff.on_enqueued(self._dispatch),
        )

    def kick(self) -> None:
        """Re-run dispatch (ejections expire by time, so the maintenance loop calls this)."""
        self._dispatch()

    def release(
        self, lease: Lease, outcome: str, latency_s: float, error: str | None = None
    ) -> None:
        """Return a lease with the attempt's outcome; updates counters and passive health."""
        if not self.leasing.give_back(lease):
            return
        u = lease.upstream
        u.outcomes[outcome] += 1
        now = self._clock()
        if outcome in GOOD_OUTCOMES:
            u.consecutive_failures = 0
            u.unreachable = False
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
            self.metrics.attempt_done(u.spec.url, outcome, latency_s)
        self._dispatch(released=u)

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
        return int(min(60, max(1, math.ceil((self.queue_depth + 1) / capacity * service))))

    def gauge_snapshot(self) -> dict[str, Any]:
        now = self._clock()
        _, panic = self.eligible(now)
        return {
            "upstreams": [(u.url, u.in_flight, self.state(u, now)) for u in self.upstreams],
            "queue_depth": len(self.queue),
            "queue_waiting": self.queue.breakdown(),
            "info": [
                (u.url, u.spec.host, u.spec.card, u.spec.vllm, u.spec.container)
                for u in self.upstreams
            ],
            "panic": panic,
        }

    def snapshot(self) -> dict[str, Any]:
        """The ``/upstreams`` document.

        With a seat: ``in_flight`` and ``queue_depth`` count every worker, ``in_flight_worker``
        this one's, and ``workers`` says which worker answered; the rest (state, counters,
        latencies) is this worker's own view.
        """
        now = self._clock()
        _, panic = self.eligible(now)
        seat = self.counters.workers()
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
                    "state": self.state(u, now),
                    "drained_for_s": _rounded(self.drained_for(u, now)),
                    "in_flight": self._count(u),
                    "requests": {name: u.outcomes.get(name, 0) for name in OUTCOMES},
                    "ejections": u.ejections,
                    "ejected_for_s": round(u.ejected_until - now, 1) if u.is_ejected(now) else None,
                    "consecutive_failures": u.consecutive_failures,
                    "last_error": u.last_error,
                    "latency_ms": u.latency_ms(),
                    "service_ms": None if u.service_s is None else round(u.service_s * 1000, 1),
                }
            )
            if seat is not None:
                items[-1]["in_flight_worker"] = u.in_flight
        doc: dict[str, Any] = {
            "mode": self.mode,
            "queue_depth": self.queue_depth,
            "panic": panic,
            "active_requests": self.active_requests,
            "retries_in_flight": self.retries_in_flight,
            "upstreams": items,
        }
        if seat is not None:
            doc["workers"] = {
                "count": seat.workers,
                "this": seat.index,
                "pid": os.getpid(),
                "queue_depth": seat.waiting_per_worker(),
            }
        return doc


def _rounded(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds, 1)
