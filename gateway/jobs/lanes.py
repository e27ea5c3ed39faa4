"""Threads for a blocking store, in two lanes: reads, and one writer that serves a client's
write before background ones.

SQLite has one writer at a time, so writes from a shared thread pool pile up on its lock and
hold every thread of the pool: a client's status read then waits behind a burst of slice
commits it has nothing to do with, and its submit behind all of them. Here reads (and file
work) run on their own threads, and writes on one thread in order of urgency: a submit or a
cancel (``urgent``) goes before the runner's claims and commits queued before it, and waits at
most for the one write in progress.

Usage::

    lanes = Lanes(readers=4)
    job = await lanes.read(store.get, job_id)
    await lanes.write(store.insert_job, job, size, urgent=True)
    lanes.close()  # the writes queued so far are done first
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")

_URGENT, _BACKGROUND, _STOP = 0, 1, 2

_Entry = tuple[int, int, Callable[[], Any] | None, Future[Any] | None]


class Lanes:
    """See module doc."""

    def __init__(self, readers: int = 4, name: str = "jobs-store") -> None:
        self._reads = ThreadPoolExecutor(readers, thread_name_prefix=f"{name}-read")
        self._writes: queue.PriorityQueue[_Entry] = queue.PriorityQueue()
        self._order = itertools.count()  # first come, first served within one urgency
        self._writer = threading.Thread(target=self._write_loop, name=f"{name}-write", daemon=True)
        self._writer.start()

    async def read(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` on a reader thread."""
        call = functools.partial(fn, *args)
        return await asyncio.get_running_loop().run_in_executor(self._reads, call)

    async def write(self, fn: Callable[..., T], *args: Any, urgent: bool = False) -> T:
        """``fn(*args)`` on the writer thread, after the writes queued before it (after the
        urgent ones only, when ``urgent``)."""
        future: Future[T] = Future()
        rank = _URGENT if urgent else _BACKGROUND
        self._writes.put((rank, next(self._order), functools.partial(fn, *args), future))
        return await asyncio.wrap_future(future)

    def _write_loop(self) -> None:
        while True:
            _, _, call, future = self._writes.get()
            if call is None or future is None:
                return
            if not future.set_running_or_notify_cancel():
                continue  # its caller went away before it started
            try:
                future.set_result(call())
            except BaseException as exc:
                future.set_exception(exc)

    def close(self) -> None:
        """Finish the queued writes and the running reads, then stop the threads."""
        self._writes.put((_STOP, next(self._order), None, None))
        self._writer.join()
        self._reads.shutdown(wait=True)
