"""Upstream pool: the upstreams, balancing, leases, panic, retry budget (health decisions in
:mod:`gateway.dispatch.outlier`).

Pure asyncio state, no HTTP: the proxy asks for a :class:`Lease` on an upstream, does its I/O,
and releases the lease with an outcome (see :mod:`gateway.dispatch.upstreams` for the outcomes and
what counts towards ejection). In ``queue`` mode requests wait for a free upstream in the
:class:`~gateway.dispatch.central_queue.CentralQueue`, and among free upstreams the one with the
lowest recent service time wins (a median of its last successful attempts, in classes a factor of 2
wide), then the topology tie-break. All methods run on the event loop thread; the synchronous
ones are atomic with respect to other coroutines.

With a ``seat`` (one of several worker processes, :mod:`gateway.shared.occupancy`) the in-flight
counts that the concurrency limit and the load keys read are those of all workers, a free upstream
goes to the oldest waiter of any worker (:mod:`gateway.dispatch.handoff`), and drains
(:mod:`gateway.dispatch.drain`) hold in every worker; health, ejection, service times and the retry
budget stay this worker's own. Without one nothing is shared.

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

import logging
import math
import os
import random
import statistics
import time
from collections.abc import Callable, Collection, Hashable, Sequence
from operator import attrgetter, itemgetter
from typing import Any

from gateway.config.settings import Settings
from gateway.dispatch.central_queue import BACKGROUND, INTERACTIVE, RETRY, CentralQueue
from gateway.dispatch.drain import DrainTable, LocalDrains, SharedDrains
from gateway.dispatch.handoff import Handoff
from gateway.dispatch.outlier import PoolHealth
from gateway.dispatch.policies import Policy, make_policy
from gateway.dispatch.upstreams import FAILURE_OUTCOMES, GOOD_OUTCOMES, OUTCOMES, Lease, Upstream
from gateway.errors import NoUpstreamAvailable
from gateway.observability.metrics import GatewayMetrics
from gateway.shared.occupancy import Seat, SlotsExhausted

log = logging.getLogger("gateway.pool")

_OPTIMISTIC_TRIES = 3  # choices made outside the board's lock before a request queues


_HALF_CLASS_UP = math.sqrt(2)  # a service time within half a class of the average is class 0
_HALF_CLASS_DOWN = 1 / _HALF_CLASS_UP


def _summer(offsets: list[int]) -> Callable[[list[int]], int]:
    """A function that sums the items of a list at ``offsets`` (in C, not a Python loop)."""
    if len(offsets) == 1:
        return itemgetter(offsets[0])
    pick = itemgetter(*offsets)
    return lambda column: sum(pick(column))


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
    ) -> None:
        self._rng = rng or random.Random()
        self._clock = clock
        self.metrics = metrics
        self.upstreams: list[Upstream] = []
        self._by_url: dict[str, Upstream] = {}
        self.queue = CentralQueue(metrics, clock=clock, retry_after=self.retry_after)
        self.handoff = None if seat is None else Handoff(seat, clock, self.kick)
        self.drains: DrainTable = LocalDrains() if seat is None else SharedDrains(seat)
        # attempts in flight at an upstream: this process's, or all workers'
        self._count: Callable[[Upstream], int] = attrgetter("in_flight")
        self._load: dict[Hashable, int] = {}  # this process's leases per place (Upstream.places)
        if self.handoff is not None:
            self._count = self.handoff.count
            self.queue.on_change = self._publish
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
                if self.handoff is not None and not self._claim_slot(current):
                    continue
            else:
                current.set_spec(spec)
            upstreams.append(current)
        if not settings.health.enabled:
            for u in upstreams:
                u.probe_healthy, u.probe_failures, u.unreachable = True, 0, False
        self.upstreams = upstreams
        self._by_url = {u.url: u for u in upstreams}
        self._index_places()
        self._dispatch()

    def _index_places(self) -> None:
        """Number the places (vLLM, card, host) the upstreams name, so that a dispatch reads
        their loads from a list (:meth:`_place_loads`): ``u.place_ix`` are the numbers of
        ``u``'s vLLM, card and host, one past the last place (a load that is always 0) for one
        it does not name."""
        members: dict[Hashable, list[Upstream]] = {}
        for u in self.upstreams:
            for place in u.places:
                members.setdefault(place, []).append(u)
        self._places = list(members)
        number = {place: i for i, place in enumerate(self._places)}
        for u in self.upstreams:
            u.place_ix = tuple(len(number) if p is None else number[p] for p in u.place_keys)
        # with a seat: each place's load is the sum of its upstreams' totals, read from one
        # slice of the shared column (slots ``_slot_lo`` up to ``_slot_hi``)
        slots = [u.slot for u in self.upstreams] or [0]
        self._slot_lo, self._slot_hi = min(slots), max(slots) + 1
        self._place_sums = [
            _summer([u.slot - self._slot_lo for u in group]) for group in members.values()
        ]

    def _claim_slot(self, upstream: Upstream) -> bool:
        """Give a new upstream its shared-table slot; False (logged) when the table is full."""
        assert self.handoff is not None
        try:
            upstream.slot = self.handoff.seat.upstream_slot(upstream.url)
        except SlotsExhausted as exc:
            log.error("upstream %s left out: %s", upstream.url, exc)
            return False
        return True

    def get(self, url: str) -> Upstream | None:
        return self._by_url.get(url)

    @property
    def mode(self) -> str:
        return self.settings.load_balance.mode

    @property
    def queue_depth(self) -> int:
        """Requests waiting in the central queue (of every worker, with a seat)."""
        if self.handoff is not None:
            return self.handoff.seat.waiting()
        return len(self.queue)

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

    def in_service(self, now: float | None = None) -> list[Upstream]:
        """The upstreams not drained (a drain past its deadline is undone here)."""
        if not self.drains.active():
            return self.upstreams
        now = self._clock() if now is None else now
        return [u for u in self.upstreams if not self._drained(u, now)]

    def _drained(self, u: Upstream, now: float) -> bool:
        until = self.drains.until(u)
        if not until:
            return False
        if until > now:
            return True
        if self.handoff is None:
            self.drains.set(u, 0.0)
            log.warning("upstream %s: drain expired (ttl_s); back in service", u.url)
        else:
            with self.handoff.seat.lock():  # one worker undoes it and says so
                if self.drains.until(u) == until:
                    self.drains.set(u, 0.0)
                    log.warning("upstream %s: drain expired (ttl_s); back in service", u.url)
        return False

    # ----------------------------------------------------------------- drains
    def drain(self, upstreams: Collection[Upstream], ttl_s: float) -> None:
        """Give ``upstreams`` no new work for ``ttl_s`` seconds (again: a new deadline)."""
        until = self._clock() + ttl_s
        for u in upstreams:
            self.drains.set(u, until)

    def undrain(self, upstreams: Collection[Upstream]) -> None:
        """Take ``upstreams`` back in (idempotent) and serve the requests waiting for them, in
        every worker."""
        for u in upstreams:
            self.drains.set(u, 0.0)
        self._dispatch()
        if self.handoff is not None:
            seat = self.handoff.seat
            for worker in seat.live():
                if worker != seat.index:
                    seat.wake(worker)

    def drained_for(self, u: Upstream, now: float | None = None) -> float | None:
        """Seconds left of ``u``'s drain, None when it is not drained."""
        now = self._clock() if now is None else now
        until = self.drains.until(u)
        return until - now if until > now else None

    def in_flight(self, u: Upstream) -> int:
        """Attempts in flight at ``u`` (of every worker, with a seat)."""
        return self._count(u)

    def state(self, u: Upstream, now: float | None = None) -> str:
        """``u``'s state: "draining"/"drained" (with/without attempts in flight), else its
        health state (``Upstream.state``)."""
        now = self._clock() if now is None else now
        if self.drains.active() and self.drains.until(u) > now:
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

    def _counts(self, upstreams: Sequence[Upstream]) -> list[int]:
        """The attempts in flight at each of ``upstreams`` (of every worker, with a seat)."""
        if self.handoff is None:
            return [u.in_flight for u in upstreams]
        return self.handoff.counts(upstreams)

    def _load_keys(self, candidates: Sequence[Upstream]) -> list[tuple[float, ...]] | None:
        """The sort key of each candidate: in-flight count, then (``queue`` mode) the speed
        class, then (topology-aware) the in-flight totals of its vLLM, card and host; None
        when every candidate's key is the same (an idle fleet of average speed)."""
        counts = self._counts(candidates)
        classes = self._speed_classes() if self.policy.uses_queue else {}
        loads = self._place_loads() if self.settings.load_balance.topology_aware else None
        if not loads:  # no topology, or nothing in flight anywhere
            if not classes:
                return None if min(counts) == max(counts) else [(n,) for n in counts]
            return [
                (n, classes.get(u.spec.url, 0)) for u, n in zip(candidates, counts, strict=True)
            ]
        if not classes:  # every speed average: the class is 0 for all, left out of the key
            return [
                (n, loads[(k := u.place_ix)[0]], loads[k[1]], loads[k[2]])
                for u, n in zip(candidates, counts, strict=True)
            ]
        return [
            (n, classes.get(u.spec.url, 0), loads[(k := u.place_ix)[0]],
             loads[k[1]], loads[k[2]])
            for u, n in zip(candidates, counts, strict=True)
        ]  # fmt: skip

    def _place_loads(self) -> list[int]:
        """Attempts in flight at each numbered place (:meth:`_index_places`), and a last 0;
        empty when nothing is in flight anywhere."""
        if self.handoff is None:
            if not self._load:
                return []
            get = self._load.get
            return [*(get(place, 0) for place in self._places), 0]
        totals, base = self.handoff.seat.totals()
        column = totals[base + self._slot_lo : base + self._slot_hi].tolist()
        if not any(column):
            return []
        return [*(total(column) for total in self._place_sums), 0]

    def _places_load(self) -> dict[Hashable, int]:
        """Attempts in flight per vLLM, card and host (``Upstream.places``), those not 0: kept
        up to date by the leases of this process, or summed over the workers' shared table."""
        if self.handoff is None:
            return dict(self._load)
        return {p: n for p, n in zip(self._places, self._place_loads(), strict=False) if n}

    def _speed_classes(self) -> dict[str, int]:
        """Each upstream's service time as a class, ``round(log2(service / average))``, for
        the upstreams whose class is not 0.

        ``service_s`` is the median of the upstream's last successful attempts; an upstream
        without one, or whose last sample is older than ``load_balance.speed_memory_s``, counts
        as average (class 0). Classes are a factor of 2 wide, so the noise between instances of
        the same speed (documents differ in size) does not separate them and the topology
        tie-break still decides among them, while a 3x slower instance ranks behind every
        average one.
        """
        now = self._clock()
        memory = self.settings.load_balance.speed_memory_s
        timed = [
            (u, u.service_s) for u in self.upstreams if u.service_s and now - u.service_at <= memory
        ]
        if not timed:
            return {}
        known = [u for u, _ in timed]
        services = [service for _, service in timed]
        average = sum(services) / len(services)
        low, high = average * _HALF_CLASS_DOWN, average * _HALF_CLASS_UP  # class 0 in between
        if low <= min(services) and max(services) < high:
            return {}
        return {
            u.spec.url: round(math.log2(service / average))
            for u, service in zip(known, services, strict=True)
            if not low <= service < high
        }

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
        places = upstream.places
        if self.handoff is not None:
            self.handoff.seat.add(upstream.slot, 1)
        else:
            load = self._load
            for place in places:
                load[place] = load.get(place, 0) + 1
        lease = Lease(
            upstream=upstream,
            started=self._clock(),
            queued_s=queued_s,
            limited=limited,
            places=places,
        )
        upstream.leases.add(lease)
        return lease

    def _choose(self, candidates: list[Upstream]) -> Upstream:
        return self.policy.choose(candidates, self.upstreams, self._load_keys)

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

        With no upstream able to take it (none eligible: drained, unreachable), a request
        waits in the queue in every mode, for one not in ``exclude`` to come back.
        """
        self._dispatch()
        eligible, _ = self.eligible()
        excluded = frozenset(exclude)
        candidates = [u for u in eligible if u.spec.url not in excluded] if excluded else eligible
        limit = self._limit()
        if not candidates:  # none left to try (raise), or none can take it now (wait)
            if not self.upstreams:
                raise NoUpstreamAvailable("no upstreams configured")
            if eligible or all(u.url in excluded for u in self.upstreams):
                raise NoUpstreamAvailable("every upstream has been tried")
        elif bypass_limit or limit == math.inf:
            return self._lease(self._choose(candidates), limited=not bypass_limit)
        elif self.handoff is None:
            free = [u for u in candidates if u.in_flight < limit]
            if free and not (background and self.queue.interactive_waiting):
                return self._lease(self._choose(free))
        else:
            lease = self._lease_shared(candidates, limit, retry, background)
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
            depth=None if self.handoff is None else self.queue_depth,
            enqueued=None if self.handoff is None else self._dispatch,
        )

    def _lease_shared(
        self, candidates: list[Upstream], limit: float, retry: bool, background: bool
    ) -> Lease | None:
        """A lease at once, unless every upstream is taken over all workers or an older
        waiter of another worker comes first (None: wait in the queue).

        The choice is made without the lock (it reads every upstream's load, ~0.1 ms); the
        lock is held only to check that the chosen upstream is still free and count the lease,
        so the workers do not queue behind each other's choices. Another worker taking it in
        between means choosing again (at most ``_OPTIMISTIC_TRIES`` times, then the request
        joins the queue, whose dispatch runs at once under the lock).
        """
        handoff = self.handoff
        assert handoff is not None
        priority = BACKGROUND if background else RETRY if retry else INTERACTIVE
        for _ in range(_OPTIMISTIC_TRIES):
            counts = handoff.counts(candidates)
            free = [u for u, n in zip(candidates, counts, strict=True) if n < limit]
            if not free or (background and self.queue.interactive_waiting):
                return None
            if not handoff.gate(priority, self._clock(), free):
                return None
            chosen = self._choose(free)
            with handoff.seat.lock():
                if self._count(chosen) < limit:
                    return self._lease(chosen)
        return None

    def _dispatch(self, released: Upstream | None = None) -> None:
        """Hand free upstreams to the queued requests (``released``: one was just given back,
        with a seat the other workers hear of it)."""
        if self.handoff is not None:
            self._dispatch_shared(released)
            return
        if not self.queue:
            return
        limit = self._limit()
        eligible, _ = self.eligible()
        free = [u for u in eligible if u.in_flight < limit]
        self.queue.dispatch(free, limit, self._choose, self._lease)

    def _dispatch_shared(self, released: Upstream | None) -> None:
        assert self.handoff is not None
        limit = self._limit()
        if not self.queue:
            if released is not None and self._count(released) < limit:
                # no lock needed: the release was counted under it, and a worker that
                # published its waiter before that is seen here, one that did after saw it
                self.handoff.wake_others([released])
            return
        with self.handoff.seat.lock():
            eligible, _ = self.eligible()
            free = [u for u in eligible if self._count(u) < limit]
            served = 0
            if free:
                gate = self.handoff.gate
                served = self.queue.dispatch(
                    free,
                    limit,
                    self._choose,
                    self._lease,
                    count=self._count,
                    gate=lambda w, options: gate(w.priority, w.enqueued, options),
                )
            self._publish()
            if released is not None or served:
                self.handoff.wake_others(free)

    def _publish(self) -> None:
        """Tell the other workers which waiter this one serves next (see
        gateway.dispatch.handoff)."""
        assert self.handoff is not None
        waiter = self.queue.head()
        waiting, background = len(self.queue), self.queue.background_waiting
        if waiter is None:
            self.handoff.publish(0, 0.0, (), waiting, background)
            return
        excluded = [u.slot for url in waiter.exclude if (u := self._by_url.get(url)) is not None]
        self.handoff.publish(waiter.priority, waiter.enqueued, excluded, waiting, background)

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
        if self.handoff is not None:
            self.handoff.seat.add(u.slot, -1)
        else:
            load = self._load
            for place in lease.places:
                if (left := load.get(place, 0) - 1) > 0:
                    load[place] = left
                else:
                    load.pop(place, None)
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
            if self.handoff is not None:
                items[-1]["in_flight_worker"] = u.in_flight
        doc: dict[str, Any] = {
            "mode": self.mode,
            "queue_depth": self.queue_depth,
            "panic": panic,
            "active_requests": self.active_requests,
            "retries_in_flight": self.retries_in_flight,
            "upstreams": items,
        }
        if self.handoff is not None:
            seat = self.handoff.seat
            doc["workers"] = {
                "count": seat.workers,
                "this": seat.index,
                "pid": os.getpid(),
                "queue_depth": seat.waiting_per_worker(),
            }
        return doc


def _rounded(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds, 1)
