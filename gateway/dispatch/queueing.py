"""Queueing: requests that wait for capacity, and handing free upstreams to them.

The waiters are in the :class:`~gateway.dispatch.central_queue.CentralQueue`; this module runs
its dispatch whenever capacity may have come back (a lease given back, an upstream undrained or
healthy again, a reload), under the counters' lock so that the check that an upstream is free
and the lease are atomic across workers. The handoff (:mod:`gateway.dispatch.handoff`) decides
whether an older waiter of another worker comes first, and is told what this worker waits for;
with one worker it is a :class:`~gateway.dispatch.handoff.SoloHandoff` and says yes to all.

Usage::

    queueing = Queueing(queue, handoff, counters, chooser, leasing.lease, free)
    queueing.dispatch(released=upstream)
"""

from __future__ import annotations

from collections.abc import Callable

from gateway.dispatch.central_queue import CentralQueue
from gateway.dispatch.choosing import Chooser
from gateway.dispatch.handoff import AnyHandoff
from gateway.dispatch.upstreams import Lease, Upstream
from gateway.shared.counters import Counters


class Queueing:
    """The central queue's dispatch; see module doc."""

    def __init__(
        self,
        queue: CentralQueue,
        handoff: AnyHandoff,
        counters: Counters,
        chooser: Chooser,
        lease: Callable[[Upstream, float], Lease],
        free: Callable[[float], list[Upstream]],
        slot_of: Callable[[str], int | None],
    ) -> None:
        """``free(limit)``: the eligible upstreams with fewer than ``limit`` attempts in
        flight; ``slot_of(url)``: a configured upstream's slot."""
        self.queue = queue
        self.handoff = handoff
        self._counters = counters
        self._chooser = chooser
        self._lease = lease
        self._free = free
        self._slot_of = slot_of
        gate = handoff.gate
        self._gate = lambda w, options: gate(w.priority, w.enqueued, options)
        queue.on_change = self.publish

    def dispatch(self, limit: Callable[[], float], released: Upstream | None = None) -> None:
        """Hand free upstreams (fewer than ``limit()`` in flight) to the queued requests
        (``released``: one was just given back, and other workers waiting for it hear of it)."""
        handoff, queue = self.handoff, self.queue
        if not queue:
            if (
                released is not None
                and handoff.gates
                and handoff.others_wait()
                and self._chooser.count(released) < limit()
            ):
                # no lock needed: the release was counted under it, and a worker that
                # published its waiter before that is seen here, one that did after saw it
                handoff.wake_others([released])
            return
        limit_now = limit()
        with self._counters.lock():
            free = self._free(limit_now)
            served = 0
            if free:
                chooser = self._chooser
                served = queue.dispatch(
                    free,
                    limit_now,
                    chooser.choose,
                    self._lease,
                    count=chooser.count,
                    gate=self._gate,
                )
            self.publish()
            if released is not None or served:
                handoff.wake_others(free)

    def publish(self) -> None:
        """Tell the other workers which waiter this one serves next."""
        self.handoff.publish_head(self.queue, self._slot_of)
