"""The central queue of ``queue`` mode: requests wait here until an upstream is free.

Pure asyncio state on the event loop thread. The pool decides when a request must wait and
which upstreams are free; the queue keeps the waiters, hands free upstreams to them, and
refuses with :class:`QueueFull` or :class:`QueueTimeout`.

Fair among tenants (bearer tokens): retries go first, in order; then each tenant with work
waiting gets a turn in rotation, FIFO within the tenant, so one team's flood does not starve
another's single document. When the queue is full, a newcomer whose tenant waits with fewer
requests than the tenant with the most takes the place of that tenant's newest waiter (which
gets :class:`QueueFull`): a flood cannot fill the queue against everyone else.

Usage::

    queue = CentralQueue(metrics, clock=time.monotonic, retry_after=pool.retry_after)
    lease = await queue.wait(
        frozenset(tried), 30.0, retry=False, max_depth=100, abandon=pool_release_cancelled,
        tenant="team-a",
    )
    queue.dispatch(free_upstreams, limit=4, choose=pick_one, lease=make_lease)  # on release

With several worker processes (:mod:`gateway.dispatch.handoff`) the pool also reads :meth:`head`
(the waiter served next, to publish it), passes ``count`` (in-flight over all workers) and ``gate``
(may this waiter be served, or does an older one of another worker come first) to
:meth:`dispatch`, and ``enqueued`` (run dispatch once the waiter is visible) to :meth:`wait`;
``on_change`` is called when waiters come or go.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from gateway.dispatch.upstreams import Lease, Upstream
from gateway.errors import QueueFull, QueueTimeout
from gateway.observability.metrics import GatewayMetrics

# the order waiters are served in, across workers too (lower first; 0: nobody waits)
RETRY, INTERACTIVE, BACKGROUND = 1, 2, 3


@dataclass(eq=False)
class _Waiter:
    future: asyncio.Future[Lease]
    exclude: frozenset[str]
    enqueued: float
    tenant: str | None = None
    retry: bool = False
    background: bool = False

    @property
    def priority(self) -> int:
        if self.background:
            return BACKGROUND
        return RETRY if self.retry else INTERACTIVE


class CentralQueue:
    """Waiting requests, fair among tenants; ``retry_after`` tells refused callers when to
    retry."""

    def __init__(
        self,
        metrics: GatewayMetrics | None,
        *,
        clock: Callable[[], float],
        retry_after: Callable[[], int],
    ) -> None:
        self.metrics = metrics
        self._clock = clock
        self._retry_after = retry_after
        self._retries: deque[_Waiter] = deque()
        self._tenants: dict[str | None, deque[_Waiter]] = {}  # in turn order (rotated)
        # job slices (background): served only when no interactive request waits
        self._background: dict[str | None, deque[_Waiter]] = {}
        self._count = 0
        self.on_change: Callable[[], None] | None = None  # waiters came or went

    def __len__(self) -> int:
        return self._count

    def __bool__(self) -> bool:
        return bool(self._count or self._background)

    def waiting(self) -> dict[str | None, int]:
        """First attempts waiting per tenant (retries not included)."""
        return {tenant: len(waiters) for tenant, waiters in self._tenants.items()}

    @property
    def interactive_waiting(self) -> int:
        """Waiters that are not background job slices (a background request must queue
        behind them even when an upstream is free)."""
        return self._count

    @property
    def background_waiting(self) -> int:
        return sum(len(line) for line in self._background.values())

    def breakdown(self) -> dict[tuple[str, str | None], int]:
        """Waiters by priority class (``retry``, ``interactive``, ``background``) and tenant."""
        out: dict[tuple[str, str | None], int] = {}
        lines = [("retry", w.tenant, 1) for w in self._retries if not w.future.done()]
        for kind, groups in (("interactive", self._tenants), ("background", self._background)):
            for tenant, line in groups.items():
                lines.append((kind, tenant, sum(1 for w in line if not w.future.done())))
        for kind, tenant, count in lines:
            if count:
                out[kind, tenant] = out.get((kind, tenant), 0) + count
        return out

    def head(self) -> _Waiter | None:
        """The waiter :meth:`dispatch` offers a free upstream first (exclusions aside)."""
        for lines in ((self._retries,), self._tenants.values(), self._background.values()):
            for line in lines:
                for waiter in line:
                    if not waiter.future.done():
                        return waiter
        return None

    def _lines(self, waiter: _Waiter) -> dict[str | None, deque[_Waiter]]:
        return self._background if waiter.background else self._tenants

    def _add(self, waiter: _Waiter) -> None:
        if waiter.background:
            self._background.setdefault(waiter.tenant, deque()).append(waiter)
            return
        if waiter.retry:
            self._retries.appendleft(waiter)
        else:
            self._tenants.setdefault(waiter.tenant, deque()).append(waiter)
        self._count += 1

    def _changed(self) -> None:
        if self.on_change is not None:
            self.on_change()

    def _remove(self, waiter: _Waiter) -> None:
        lines = self._lines(waiter)
        line = self._retries if waiter.retry and not waiter.background else lines.get(waiter.tenant)
        if line is None:
            return
        removed = False
        with contextlib.suppress(ValueError):
            line.remove(waiter)
            removed = True
            if not waiter.background:
                self._count -= 1
        if (waiter.background or not waiter.retry) and not line:
            del lines[waiter.tenant]
        if removed:
            self._changed()

    def _make_room(self, tenant: str | None, max_depth: int) -> bool:
        """Whether a newcomer of ``tenant`` may wait in a full queue: it may when another
        tenant waits with more requests; that tenant's newest waiter is refused."""
        mine = len(self._tenants.get(tenant, ()))
        largest = max(self._tenants, key=lambda t: len(self._tenants[t]), default=None)
        if largest is None or largest == tenant or len(self._tenants[largest]) <= mine + 1:
            return False
        line = self._tenants[largest]
        victim = next((w for w in reversed(line) if not w.future.done()), None)
        if victim is None:
            return False
        line.remove(victim)
        self._count -= 1
        self._changed()
        self._reject("full")
        victim.future.set_exception(
            QueueFull(
                f"central queue is full ({self._count + 1} waiting, "
                f"load_balance.queue_max_depth={max_depth}); this token's newest request gave "
                "way to another token's",
                self._retry_after(),
            )
        )
        return True

    async def wait(
        self,
        exclude: frozenset[str],
        timeout: float,
        *,
        retry: bool,
        max_depth: int,
        abandon: Callable[[Lease], None],
        tenant: str | None = None,
        background: bool = False,
        depth: int | None = None,
        enqueued: Callable[[], None] | None = None,
    ) -> Lease:
        """Wait up to ``timeout`` seconds for :meth:`dispatch` to lease an upstream not in
        ``exclude``.

        A retry goes before every first attempt and is never refused for depth. A
        ``background`` waiter (a job slice) is served only when no other request waits, fair
        among tenants, and is never refused for depth (the job runner bounds them). A lease
        handed out just as the caller was cancelled goes back through ``abandon``.
        ``depth``: the waiters that count against ``max_depth`` (default: this queue's);
        ``enqueued`` runs once the waiter is in the queue.
        """
        waiting = self._count if depth is None else depth
        if (
            not background
            and not retry
            and waiting >= max_depth
            and not self._make_room(tenant, max_depth)
        ):
            self._reject("full")
            raise QueueFull(
                f"central queue is full ({waiting} waiting, "
                f"load_balance.queue_max_depth={max_depth})",
                self._retry_after(),
            )
        loop = asyncio.get_running_loop()
        waiter = _Waiter(loop.create_future(), exclude, self._clock(), tenant, retry, background)
        self._add(waiter)
        self._changed()
        try:
            if enqueued is not None:
                enqueued()
            async with asyncio.timeout(timeout):
                return await waiter.future
        except TimeoutError:
            if waiter.future.done() and not waiter.future.cancelled():
                return waiter.future.result()  # assigned just as the timer fired
            self._reject("timeout")
            raise QueueTimeout(
                f"no upstream became free within {timeout:.1f}s "
                f"({self._count} waiting in the central queue)",
                self._retry_after(),
            ) from None
        except QueueFull:
            raise  # gave way to another tenant (see _make_room)
        except BaseException:
            if _leased(waiter):
                abandon(waiter.future.result())
            raise
        finally:
            if not waiter.future.done():
                waiter.future.cancel()
            self._remove(waiter)
            if self.metrics is not None and _leased(waiter):
                self.metrics.queue_wait.observe(self._clock() - waiter.enqueued)

    def dispatch(
        self,
        free: list[Upstream],
        limit: float,
        choose: Callable[[list[Upstream]], Upstream],
        lease: Callable[[Upstream, float], Lease],
        *,
        count: Callable[[Upstream], int] | None = None,
        gate: Callable[[_Waiter, list[Upstream]], bool] | None = None,
    ) -> int:
        """Hand the ``free`` upstreams (fewer than ``limit`` in flight) to waiters in order;
        returns how many were served. ``free`` is left holding the upstreams still free.

        ``lease(upstream, queued_s)`` takes the lease that the waiter receives. Retries first,
        in order; then one waiter per tenant in turn, and a tenant served goes to the back.
        ``count(upstream)``: its attempts in flight (default ``upstream.in_flight``);
        ``gate(waiter, free)`` False stops the dispatch before that waiter.
        """
        handed = 0
        stopped = False

        def serve(line: deque[_Waiter], counted: bool = True) -> bool:
            """Lease to the first waiter of ``line`` that can use a free upstream."""
            nonlocal handed, stopped
            for waiter in line:
                if waiter.future.done():
                    continue
                options = [u for u in free if u.url not in waiter.exclude]
                if not options:
                    continue
                if gate is not None and not gate(waiter, free):
                    stopped = True
                    return False
                chosen = choose(options)
                waiter.future.set_result(lease(chosen, self._clock() - waiter.enqueued))
                line.remove(waiter)
                handed += 1
                if counted:
                    self._count -= 1
                if (chosen.in_flight if count is None else count(chosen)) >= limit:
                    free.remove(chosen)
                return True
            return False

        while free and serve(self._retries):
            pass
        for lines, counted in ((self._tenants, True), (self._background, False)):
            while free and lines and not stopped:
                served = False
                for tenant in list(lines):
                    if not free or stopped:
                        break
                    line = lines[tenant]
                    if serve(line, counted):
                        served = True
                        del lines[tenant]
                        if line:
                            lines[tenant] = line  # to the back of the rotation
                if not served:
                    break
        return handed

    def _reject(self, reason: str) -> None:
        if self.metrics is not None:
            self.metrics.queue_rejected.labels(reason=reason).inc()


def _leased(waiter: _Waiter) -> bool:
    return (
        waiter.future.done() and not waiter.future.cancelled() and waiter.future.exception() is None
    )
