"""Cross-worker dispatch: a free upstream goes to the oldest waiter of any worker.

Each worker's :class:`~gateway.dispatch.pool.UpstreamPool` keeps its own central queue; the
:class:`~gateway.shared.occupancy.Board` holds what the workers share. :class:`Handoff` is the
pool's cross-worker half:

- An upstream is free when its attempts in flight *over all workers* are below
  ``load_balance.upstream_concurrency``; the check and the lease happen under the board's
  lock, so no two workers can both take the last free place.
- Every worker publishes the waiter it serves next (:meth:`Handoff.publish`). Before a worker
  hands a free upstream to one of its own waiters (or to a request that just arrived), it
  looks for an older waiter elsewhere that may use one of the free upstreams (retries before
  first attempts before job slices, then the enqueue time). If the older waiters could take
  every free upstream, it leaves them, wakes their worker (eventfd) and runs its own dispatch
  again :data:`DEFER_S` later. A waiter that was not served in that time (its worker is busy,
  or sees that upstream as unhealthy) stops holding others up for :data:`REARM_S`.
- A worker that frees or takes an upstream while free ones remain wakes every worker whose
  next waiter could use one, so no upstream stays idle while a request waits anywhere.

With one worker process the pool has a :class:`SoloHandoff`: the same calls, nothing to hand
off, so the pool has one code path either way.

Usage::

    handoff = Handoff(seat, clock=time.monotonic, kick=pool.kick)
    with seat.lock():
        free = [u for u in eligible if counters.in_flight(u.slot) < limit]
        if handoff.gate(INTERACTIVE, now, free):
            ...                          # lease one of ``free``
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable

from gateway.dispatch.central_queue import CentralQueue
from gateway.dispatch.upstreams import Upstream
from gateway.shared.occupancy import Seat

DEFER_S = 0.02  # how long a free upstream is kept for an older waiter of another worker
REARM_S = 0.2  # after being passed over, how long that waiter stops holding others up


class Handoff:
    """The pool's cross-worker half; see module doc. Runs on the event loop thread."""

    gates = True  # :meth:`gate` may let an older waiter of another worker go first

    def __init__(self, seat: Seat, clock: Callable[[], float], kick: Callable[[], None]) -> None:
        """``kick`` re-runs the pool's dispatch (when a deferral has run out)."""
        self.seat = seat
        self._clock = clock
        self._kick = kick
        self._deferring: dict[tuple[int, float], float] = {}  # (worker, enqueued) -> since
        self._timer: asyncio.TimerHandle | None = None
        self._published: tuple[object, ...] = (0, 0.0, (), 0, 0)  # what the board shows

    def publish(
        self, priority: int, enqueued: float, excluded: Iterable[int], waiting: int, background: int
    ) -> None:
        """This worker's next waiter (priority 0: none waits), its requests and job slices
        waiting (written only when that changed)."""
        state = (priority, enqueued, tuple(sorted(excluded)), waiting, background)
        if state != self._published:
            self.seat.publish(priority, enqueued, list(state[2]), waiting, background)
            self._published = state

    def publish_head(self, queue: CentralQueue, slot_of: Callable[[str], int | None]) -> None:
        """:meth:`publish` the waiter ``queue`` serves next (``slot_of``: an excluded URL's
        slot, None when it is no longer configured)."""
        waiter = queue.head()
        waiting, background = len(queue), queue.background_waiting
        if waiter is None:
            self.publish(0, 0.0, (), waiting, background)
            return
        excluded = [slot for url in waiter.exclude if (slot := slot_of(url)) is not None]
        self.publish(waiter.priority, waiter.enqueued, excluded, waiting, background)

    def waiting(self) -> int:
        """Requests (not job slices) waiting in every worker's central queue."""
        return self.seat.waiting()

    def depth(self) -> int | None:
        """The waiters a new request counts against ``queue_max_depth``: every worker's."""
        return self.seat.waiting()

    def on_enqueued(self, dispatch: Callable[[], None]) -> Callable[[], None] | None:
        """What runs once a request is queued: a dispatch, under the lock, that may serve it
        at once (it queued because a waiter elsewhere came first, or another worker took
        the upstream it chose)."""
        return dispatch

    def others_wait(self) -> bool:
        """Whether another worker has published a waiter."""
        return self.seat.others_wait()

    def wake_all(self) -> None:
        """Make every other worker run its dispatch (upstreams came back into service)."""
        seat = self.seat
        for worker in seat.live():
            if worker != seat.index:
                seat.wake(worker)

    def gate(self, priority: int, enqueued: float, free: list[Upstream]) -> bool:
        """Whether a waiter of ``(priority, enqueued)`` may take one of ``free`` now.

        No: older waiters of other workers could use every free upstream; their workers are
        woken and this worker's dispatch runs again after :data:`DEFER_S`.
        """
        if not self.seat.others_wait():
            return True
        key = (priority, enqueued)
        now = self._clock()
        older = []
        demand = 0
        for head in self.seat.heads():
            if (head.priority, head.enqueued) >= key:
                continue
            if head.excluded and not head.can_use(u.slot for u in free):
                continue
            record = (head.worker, head.enqueued)
            since = self._deferring.get(record)
            if since is None or now - since > REARM_S:
                self._deferring[record] = since = now
            if now - since > DEFER_S:
                continue  # it had its chance at this upstream
            older.append(head.worker)
            demand += max(1, head.waiting)
        if len(self._deferring) > 64:
            self._deferring = {k: v for k, v in self._deferring.items() if now - v <= REARM_S}
        if not older or len(free) > demand:
            return True
        for worker in older:
            self.seat.wake(worker)
        self._arm()
        return False

    def wake_others(self, free: list[Upstream]) -> None:
        """Wake every other worker whose next waiter could use one of ``free``."""
        if not free or not self.seat.others_wait():
            return
        for head in self.seat.heads():
            if not head.excluded or head.can_use(u.slot for u in free):
                self.seat.wake(head.worker)

    def _arm(self) -> None:
        if self._timer is not None:
            return
        loop = asyncio.get_running_loop()
        self._timer = loop.call_later(DEFER_S * 1.5, self._fire)

    def _fire(self) -> None:
        self._timer = None
        self._kick()


class SoloHandoff:
    """The handoff of a gateway with one worker process: nobody else to hand work to, so
    every free upstream is this worker's and nothing is published."""

    gates = False  # :meth:`gate` says yes to all: callers may skip it

    def __init__(self, queue: CentralQueue) -> None:
        self._queue = queue

    def publish_head(self, queue: CentralQueue, slot_of: Callable[[str], int | None]) -> None:
        pass

    def gate(self, priority: int, enqueued: float, free: list[Upstream]) -> bool:
        return True

    def wake_others(self, free: list[Upstream]) -> None:
        pass

    def others_wait(self) -> bool:
        return False

    def wake_all(self) -> None:
        pass

    def waiting(self) -> int:
        return len(self._queue)

    def depth(self) -> int | None:
        return None  # the central queue's own count

    def on_enqueued(self, dispatch: Callable[[], None]) -> Callable[[], None] | None:
        return None  # a request queues only when nothing here could take it


AnyHandoff = Handoff | SoloHandoff
