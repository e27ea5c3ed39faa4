"""The central FIFO queue of ``queue`` mode: requests wait here until an upstream is free.

Pure asyncio state on the event loop thread. The pool decides when a request must wait and
which upstreams are free; the queue keeps the waiters in order (retries at the front), hands
free upstreams to them, and refuses with :class:`QueueFull` or :class:`QueueTimeout`.

Usage::

    queue = CentralQueue(metrics, clock=time.monotonic, retry_after=pool.retry_after)
    lease = await queue.wait(
        frozenset(tried), 30.0, retry=False, max_depth=100, abandon=pool_release_cancelled
    )
    queue.dispatch(free_upstreams, limit=4, choose=pick_one, lease=make_lease)  # on release
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from gateway.metrics import GatewayMetrics
from gateway.upstream import Lease, PoolError, Upstream


class QueueFull(PoolError):
    def __init__(self, message: str, retry_after: int) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class QueueTimeout(PoolError):
    def __init__(self, message: str, retry_after: int) -> None:
        super().__init__(message)
        self.retry_after = retry_after


@dataclass(eq=False)
class _Waiter:
    future: asyncio.Future[Lease]
    exclude: frozenset[str]
    enqueued: float


class CentralQueue:
    """Waiting requests in FIFO order; ``retry_after`` tells refused callers when to retry."""

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
        self._waiters: deque[_Waiter] = deque()

    def __len__(self) -> int:
        return len(self._waiters)

    async def wait(
        self,
        exclude: frozenset[str],
        timeout: float,
        *,
        retry: bool,
        max_depth: int,
        abandon: Callable[[Lease], None],
    ) -> Lease:
        """Wait up to ``timeout`` seconds for :meth:`dispatch` to lease an upstream not in
        ``exclude``.

        A retry goes to the front and is never refused for depth. A lease handed out just as
        the caller was cancelled goes back through ``abandon``.
        """
        if not retry and len(self._waiters) >= max_depth:
            self._reject("full")
            raise QueueFull(
                f"central queue is full ({len(self._waiters)} waiting, "
                f"load_balance.queue_max_depth={max_depth})",
                self._retry_after(),
            )
        loop = asyncio.get_running_loop()
        waiter = _Waiter(loop.create_future(), exclude, self._clock())
        if retry:
            self._waiters.appendleft(waiter)
        else:
            self._waiters.append(waiter)
        try:
            async with asyncio.timeout(timeout):
                return await waiter.future
        except TimeoutError:
            if waiter.future.done() and not waiter.future.cancelled():
                return waiter.future.result()  # assigned just as the timer fired
            self._reject("timeout")
            raise QueueTimeout(
                f"no upstream became free within {timeout:.1f}s "
                f"({len(self._waiters)} waiting in the central queue)",
                self._retry_after(),
            ) from None
        except BaseException:
            if waiter.future.done() and not waiter.future.cancelled():
                abandon(waiter.future.result())
            raise
        finally:
            if not waiter.future.done():
                waiter.future.cancel()
            with contextlib.suppress(ValueError):
                self._waiters.remove(waiter)
            if self.metrics is not None and waiter.future.done() and not waiter.future.cancelled():
                self.metrics.queue_wait.observe(self._clock() - waiter.enqueued)

    def dispatch(
        self,
        free: list[Upstream],
        limit: float,
        choose: Callable[[list[Upstream]], Upstream],
        lease: Callable[[Upstream, float], Lease],
    ) -> None:
        """Hand the ``free`` upstreams (fewer than ``limit`` in flight) to waiters in order.

        ``lease(upstream, queued_s)`` takes the lease that the waiter receives.
        """
        remaining: deque[_Waiter] = deque()
        while self._waiters:
            waiter = self._waiters.popleft()
            if waiter.future.done():
                continue
            options = [u for u in free if u.url not in waiter.exclude]
            if not options:
                remaining.append(waiter)
                continue
            chosen = choose(options)
            waiter.future.set_result(lease(chosen, self._clock() - waiter.enqueued))
            if chosen.in_flight >= limit:
                free.remove(chosen)
        self._waiters = remaining

    def _reject(self, reason: str) -> None:
        if self.metrics is not None:
            self.metrics.queue_rejected.labels(reason=reason).inc()
