"""Leasing: taking and giving back an upstream's place for one attempt, counted in the
:class:`~gateway.shared.counters.Counters` (every worker's, when shared).

A lease is counted twice: in the counters, which the concurrency limit and the load keys read,
and in ``Upstream.in_flight`` (this process's own, for its reports and health). Under a
concurrency limit the check that the chosen upstream is still free and the count are made
under the counters' lock, so no two workers both take its last place; the choice itself
(which reads every upstream's load) is made outside it.

Usage::

    leasing = Leasing(counters, clock)
    lease = leasing.take(candidates, limit, chooser, may_take)   # None: wait in the queue
    ...
    if leasing.give_back(lease): ...                              # False: released before
"""

from __future__ import annotations

from collections.abc import Callable

from gateway.dispatch.choosing import Chooser
from gateway.dispatch.upstreams import Lease, Upstream
from gateway.shared.counters import Counters

OPTIMISTIC_TRIES = 3  # choices made outside the lock before a request queues


class Leasing:
    """Leases on upstreams, counted; see module doc."""

    def __init__(self, counters: Counters, clock: Callable[[], float]) -> None:
        self._counters = counters
        self._clock = clock

    def lease(self, upstream: Upstream, queued_s: float = 0.0, limited: bool = True) -> Lease:
        """A lease on ``upstream``, counted (no limit checked: the caller did)."""
        upstream.in_flight += 1
        self._counters.add(upstream.slot, 1, upstream.places)
        lease = Lease(
            upstream=upstream,
            started=self._clock(),
            queued_s=queued_s,
            limited=limited,
            places=upstream.places,
        )
        upstream.leases.add(lease)
        return lease

    def take(
        self,
        candidates: list[Upstream],
        limit: float,
        chooser: Chooser,
        may_take: Callable[[list[Upstream]], bool] | None = None,
    ) -> Lease | None:
        """A lease on one of ``candidates`` with fewer than ``limit`` attempts in flight, or
        None (wait in the queue) when none is free or ``may_take(free)`` (if given) says no.

        Another worker taking the chosen upstream between the choice and the lock means
        choosing again, at most :data:`OPTIMISTIC_TRIES` times.
        """
        count = chooser.count
        for _ in range(OPTIMISTIC_TRIES):
            free = chooser.free(candidates, limit)
            if not free or (may_take is not None and not may_take(free)):
                return None
            chosen = chooser.choose(free)
            with self._counters.lock():
                if count(chosen) < limit:
                    return self.lease(chosen)
        return None

    def give_back(self, lease: Lease) -> bool:
        """Uncount ``lease``; False when it was given back before (nothing done)."""
        if lease.released:
            return False
        lease.released = True
        lease.cancel = None
        u = lease.upstream
        u.leases.discard(lease)
        u.in_flight = max(0, u.in_flight - 1)
        self._counters.add(u.slot, -1, lease.places)
        return True
