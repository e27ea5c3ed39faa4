"""The keeper's memory: one entry per (idempotency key, upstream), running or answered.

An entry's upstream call runs in a task of its own, so it goes on when the caller that started
it goes away (a gateway killed mid-slice); the answer is kept for ``keep_s`` seconds, within
``max_bytes`` (the oldest answers are dropped first), for whoever asks with the same key. Only
200 answers are kept: an error is passed to the callers waiting for it and forgotten, so the
next call with the key tries again.

Usage::

    store = KeeperStore(send, keep_s=600, max_bytes=512 * 1024**2)
    answer, how = await store.call("job-1/0/16", "http://127.0.0.1:8101", body, content_type)
    store.lookup("job-1/0/16")   # the entry to report for that key, if any
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Answer:
    """An upstream's answer, or the keeper's own error (``status`` 502/504, JSON ``body``)."""

    status: int
    body: bytes
    content_type: str | None


Send = Callable[[str, bytes, str | None], Coroutine[Any, Any, Answer]]


@dataclass(eq=False)
class Entry:
    key: str
    upstream: str
    started: float
    task: asyncio.Task[Answer] | None = None
    answer: Answer | None = None
    done_at: float | None = None
    waiters: int = field(default=0)

    @property
    def state(self) -> str:
        return "running" if self.answer is None else "done"


class KeeperStore:
    """See module doc. All methods run on the event loop thread."""

    def __init__(
        self,
        send: Send,
        *,
        keep_s: float,
        max_bytes: int,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._send = send
        self.keep_s = keep_s
        self.max_bytes = max_bytes
        self._clock = clock
        self._running: dict[tuple[str, str], Entry] = {}
        self._done: OrderedDict[tuple[str, str], Entry] = OrderedDict()  # oldest answer first
        self._by_key: dict[str, list[Entry]] = {}
        self.kept_bytes = 0
        self.counts = {"fresh": 0, "attached": 0, "kept": 0, "looked_up": 0, "evicted": 0}

    # ------------------------------------------------------------------ calls
    async def call(
        self, key: str, upstream: str, body: bytes, content_type: str | None
    ) -> tuple[Answer, str]:
        """The answer for ``key`` on ``upstream`` and how it was had: ``kept`` (answered
        before), ``attached`` (a call still running), ``fresh`` (sent now)."""
        self.expire()
        slot = (key, upstream)
        kept = self._done.get(slot)
        if kept is not None and kept.answer is not None:
            self.counts["kept"] += 1
            return kept.answer, "kept"
        entry = self._running.get(slot)
        how = "attached"
        if entry is None:
            how = "fresh"
            entry = self._start(key, upstream, body, content_type)
        self.counts[how] += 1
        assert entry.task is not None
        entry.waiters += 1
        try:
            return await asyncio.shield(entry.task), how
        finally:
            entry.waiters -= 1

    def _start(self, key: str, upstream: str, body: bytes, content_type: str | None) -> Entry:
        entry = Entry(key, upstream, self._clock())
        entry.task = asyncio.get_running_loop().create_task(
            self._send(upstream, body, content_type)
        )
        entry.task.add_done_callback(lambda task: self._finished(entry, task))
        self._running[(key, upstream)] = entry
        self._by_key.setdefault(key, []).append(entry)
        return entry

    def _finished(self, entry: Entry, task: asyncio.Task[Answer]) -> None:
        slot = (entry.key, entry.upstream)
        self._running.pop(slot, None)
        answer = None if task.cancelled() or task.exception() else task.result()
        if answer is None or answer.status != 200:
            self._drop(entry)
            return
        entry.answer, entry.done_at = answer, self._clock()
        self._done[slot] = entry
        self.kept_bytes += len(answer.body)
        self.expire()

    def _drop(self, entry: Entry) -> None:
        same = self._by_key.get(entry.key, [])
        if entry in same:
            same.remove(entry)
        if not same:
            self._by_key.pop(entry.key, None)

    # ------------------------------------------------------------------ reading
    def lookup(self, key: str) -> Entry | None:
        """The entry to report for ``key``: an answer if one is kept (counted as
        ``looked_up``), else the newest call running, else None."""
        self.expire()
        entries = self._by_key.get(key, [])
        done = [e for e in entries if e.answer is not None]
        if done:
            self.counts["looked_up"] += 1
            return done[-1]
        return entries[-1] if entries else None

    def expire(self) -> None:
        """Drop answers older than ``keep_s``, then the oldest while over ``max_bytes``."""
        now = self._clock()
        while self._done:
            slot, entry = next(iter(self._done.items()))
            assert entry.answer is not None and entry.done_at is not None
            if now - entry.done_at <= self.keep_s and self.kept_bytes <= self.max_bytes:
                break
            if now - entry.done_at <= self.keep_s:
                self.counts["evicted"] += 1
            del self._done[slot]
            self.kept_bytes -= len(entry.answer.body)
            self._drop(entry)

    def stats(self) -> dict[str, int]:
        return {
            "running": len(self._running),
            "kept": len(self._done),
            "kept_bytes": self.kept_bytes,
            **{f"calls_{name}": count for name, count in self.counts.items()},
        }

    async def close(self) -> None:
        tasks = [e.task for e in self._running.values() if e.task is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
