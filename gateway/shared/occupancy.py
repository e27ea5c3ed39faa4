"""What the gateway's worker processes share: one table in shared memory, one lock, wake-ups.

The supervisor (:mod:`gateway.server.supervisor`) creates a :class:`Board` before it forks the
workers; each worker takes its :class:`Seat`. Every counter has one row per worker and only that
worker writes its row, so a worker that dies leaves nothing behind that the supervisor cannot undo:
:meth:`Board.clear` zeroes its row. Totals are sums over the rows; the upstream totals, read
on every dispatch, are also kept in a column of their own, changed with the rows under the
lock and recomputed from the rows when a worker is cleared (a worker killed between the two
writes leaves them consistent again).

- **Upstream occupancy**: attempts in flight per worker and upstream. An upstream's slot is
  chosen by its URL (the first worker that sees a URL claims the next free slot; slots are
  never reused), so every worker and every reload agrees on it.
- **Token quotas**: requests in flight per worker and token name, and each token's rate
  bucket (one per token, not per worker).
- **Heads**: each worker publishes the waiter its central queue serves next (priority,
  enqueue time on the system-wide monotonic clock, the upstreams it excludes) and how many
  wait, so a free upstream can go to the oldest waiter of any worker
  (:mod:`gateway.dispatch.handoff`).
- **Drains**: per upstream slot, the system-wide monotonic clock until which the upstream is
  drained (0: not drained; :mod:`gateway.dispatch.drain`). Not per worker: a worker that dies leaves
  them as they are, so a drain holds until it is undone or its deadline passes.
- **Wake-ups**: one eventfd per worker; writing to a worker's makes its event loop run its
  dispatch (and answer a metrics request, :mod:`gateway.observability.worker_metrics`).

The lock is ``flock`` on a file, taken through a separate open file description in each
process: the kernel drops it when its holder dies, even by SIGKILL. It is held for
microseconds, never across an ``await``, and is re-entrant within a process.

Usage::

    board = Board(workers=2, run_dir=Path(tempfile.mkdtemp()))   # supervisor, before fork
    seat = board.seat(index)                                      # in worker ``index``
    with seat.lock():
        slot = seat.upstream_slot("http://10.0.0.5:8080")
        if seat.in_flight(slot) < 1:
            seat.add(slot, 1)
    board.clear(index)                                            # supervisor, worker died
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import mmap
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

MAX_UPSTREAMS = 8192  # distinct upstream URLs over the supervisor's lifetime
MAX_TOKENS = 4096  # distinct token names over the supervisor's lifetime
MAX_EXCLUDED = 16  # upstreams a published head may exclude (more: it is not waited for)
_KEY = 16  # bytes of a slot key (a SHA-256 prefix of the URL or token name)
_MAGIC = 0x4F434355

# header (int32)
_H_MAGIC, _H_WORKERS, _H_UPSTREAMS, _H_TOKENS, _H_METRICS_SEQ, _H_DRAINS = range(6)
# per worker (int32): pid, ready, head priority, excluded count, waiting (interactive, job
# slices), metrics done
_W_PID, _W_READY, _W_PRIORITY, _W_EXCLUDED, _W_WAITING, _W_BACKGROUND, _W_METRICS = range(7)
_W_EXCL = 8  # first of MAX_EXCLUDED slot numbers
_W_INTS = _W_EXCL + MAX_EXCLUDED


class SlotsExhausted(RuntimeError):
    """More distinct upstream URLs or token names than the board holds."""


@dataclass(frozen=True)
class Head:
    """The waiter another worker serves next: lower ``(priority, enqueued)`` goes first."""

    worker: int
    priority: int
    enqueued: float
    excluded: frozenset[int]  # upstream slots it may not use
    waiting: int  # requests waiting in that worker, job slices included

    def can_use(self, slots: Iterable[int]) -> bool:
        """Whether one of ``slots`` is an upstream this waiter may be sent to."""
        return any(slot not in self.excluded for slot in slots)


class _Layout:
    """Byte offsets of the board's sections (each 8-byte aligned)."""

    def __init__(self, workers: int) -> None:
        self.size = 0

        def take(nbytes: int) -> int:
            start = self.size
            self.size += (nbytes + 7) // 8 * 8
            return start

        self.header = take(16 * 4)
        self.workers = take(workers * _W_INTS * 4)
        self.enqueued = take(workers * 8)
        self.upstream_keys = take(MAX_UPSTREAMS * _KEY)
        self.occupancy = take(workers * MAX_UPSTREAMS * 4)
        self.totals = take(MAX_UPSTREAMS * 4)
        self.token_keys = take(MAX_TOKENS * _KEY)
        self.token_in_flight = take(workers * MAX_TOKENS * 4)
        self.token_bucket = take(MAX_TOKENS * 8)
        self.token_stamp = take(MAX_TOKENS * 8)
        self.drain_until = take(MAX_UPSTREAMS * 8)


def slot_key(name: str) -> bytes:
    """The 16-byte key a URL or token name is stored under."""
    return hashlib.sha256(name.encode("utf-8", "surrogatepass")).digest()[:_KEY]


class _Lock:
    """``flock`` on one open file description, re-entrant within the process."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self._depth = 0

    def __enter__(self) -> None:
        if self._depth == 0:
            fcntl.flock(self.fd, fcntl.LOCK_EX)
        self._depth += 1

    def __exit__(self, *exc: object) -> None:
        self._depth -= 1
        if self._depth == 0:
            fcntl.flock(self.fd, fcntl.LOCK_UN)


class _Table:
    """Typed views of the shared memory and the lock of one process."""

    def __init__(self, mem: mmap.mmap, workers: int, lock_path: Path, wake_fds: list[int]) -> None:
        self.mem = mem
        self.count = workers
        self.layout = _Layout(workers)
        self.i32 = memoryview(mem).cast("i")
        self.f64 = memoryview(mem).cast("d")
        self.wake_fds = wake_fds
        self.lock_path = lock_path
        self._lock = _Lock(os.open(lock_path, os.O_RDWR))

    def lock(self) -> _Lock:
        return self._lock

    def close_lock(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self._lock.fd)

    # ------------------------------------------------------------------ addressing
    def header(self, field: int) -> int:
        return self.i32[self.layout.header // 4 + field]

    def set_header(self, field: int, value: int) -> None:
        self.i32[self.layout.header // 4 + field] = value

    def worker_int(self, worker: int, field: int) -> int:
        return self.i32[self.layout.workers // 4 + worker * _W_INTS + field]

    def set_worker_int(self, worker: int, field: int, value: int) -> None:
        self.i32[self.layout.workers // 4 + worker * _W_INTS + field] = value

    def _find(self, section: int, used: int, key: bytes) -> int:
        """Index of ``key`` among the first ``used`` keys of a key section, else -1."""
        end = section + used * _KEY
        pos = self.mem.find(key, section, end)
        while pos >= 0 and (pos - section) % _KEY:
            pos = self.mem.find(key, pos + 1, end)
        return -1 if pos < 0 else (pos - section) // _KEY

    def claim(self, section: int, used_field: int, limit: int, name: str, what: str) -> int:
        """The slot of ``name`` in a key section, claimed if new (under the lock)."""
        key = slot_key(name)
        with self._lock:
            used = self.header(used_field)
            index = self._find(section, used, key)
            if index >= 0:
                return index
            if used >= limit:
                raise SlotsExhausted(
                    f"the workers' shared table holds {limit} distinct {what}; {name!r} is one "
                    "more (restart the gateway to start a fresh table)"
                )
            self.mem[section + used * _KEY : section + (used + 1) * _KEY] = key
            self.set_header(used_field, used + 1)
            return used

    def clear_worker(self, worker: int) -> None:
        """Zero every row of ``worker`` (its counters, its head, its pid)."""
        lay = self.layout
        with self._lock:
            for base, width in ((lay.occupancy, MAX_UPSTREAMS), (lay.token_in_flight, MAX_TOKENS)):
                start = base + worker * width * 4
                self.mem[start : start + width * 4] = bytes(width * 4)
            start = lay.workers + worker * _W_INTS * 4
            self.mem[start : start + _W_INTS * 4] = bytes(_W_INTS * 4)
            self.f64[lay.enqueued // 8 + worker] = 0.0
            i32, rows, totals = self.i32, lay.occupancy // 4, lay.totals // 4
            for slot in range(self.header(_H_UPSTREAMS)):
                i32[totals + slot] = sum(
                    i32[rows + w * MAX_UPSTREAMS + slot] for w in range(self.count)
                )


class Board:
    """The shared table, created by the supervisor before it forks (see module doc)."""

    def __init__(self, workers: int, run_dir: Path) -> None:
        if workers < 1:
            raise ValueError("a board needs at least one worker")
        self.run_dir = run_dir
        lock_path = run_dir / "lock"
        lock_path.touch()
        size = _Layout(workers).size
        mem = mmap.mmap(-1, size, flags=mmap.MAP_SHARED)  # inherited by fork, shared
        wake = [os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC) for _ in range(workers)]
        self._table = _Table(mem, workers, lock_path, wake)
        self._table.set_header(_H_MAGIC, _MAGIC)
        self._table.set_header(_H_WORKERS, workers)

    @property
    def workers(self) -> int:
        return self._table.count

    def seat(self, index: int) -> Seat:
        """Worker ``index``'s handle (call it in that worker, after fork)."""
        if not 0 <= index < self.workers:
            raise ValueError(f"worker index {index} outside 0..{self.workers - 1}")
        t = self._table
        return Seat(index, _Table(t.mem, t.count, t.lock_path, t.wake_fds), self.run_dir)

    def set_pid(self, index: int, pid: int) -> None:
        with self._table.lock():
            self._table.set_worker_int(index, _W_PID, pid)

    def ready(self, index: int) -> bool:
        """Whether worker ``index`` has finished starting (it serves requests)."""
        return bool(self._table.worker_int(index, _W_READY))

    def clear(self, index: int) -> None:
        """Undo everything worker ``index`` held (it died or is about to be started)."""
        self._table.clear_worker(index)
        with contextlib.suppress(BlockingIOError, OSError):
            os.eventfd_read(self._table.wake_fds[index])

    def close(self) -> None:
        self._table.close_lock()
        for fd in self._table.wake_fds:
            with contextlib.suppress(OSError):
                os.close(fd)


class Seat:
    """One worker's handle on the board: its own rows, the others' heads, the lock."""

    def __init__(self, index: int, table: _Table, run_dir: Path) -> None:
        self.index = index
        self.workers = table.count
        self.run_dir = run_dir
        self._t = table
        self._reader: tuple[object, int] | None = None
        self._i32 = table.i32
        self._row = table.layout.occupancy // 4 + index * MAX_UPSTREAMS
        self._totals = table.layout.totals // 4
        first = table.layout.workers // 4 + _W_PRIORITY
        self._other_priorities = [first + w * _W_INTS for w in range(table.count) if w != index]

    def lock(self) -> _Lock:
        """The cross-process lock (a re-entrant context manager)."""
        return self._t.lock()

    # ------------------------------------------------------------------ upstreams
    def upstream_slot(self, url: str) -> int:
        """The slot of an upstream URL, the same in every worker; SlotsExhausted when full."""
        lay = self._t.layout
        return self._t.claim(lay.upstream_keys, _H_UPSTREAMS, MAX_UPSTREAMS, url, "upstream URLs")

    def in_flight(self, slot: int) -> int:
        """Attempts in flight at the upstream in ``slot``, over all workers."""
        return self._i32[self._totals + slot]

    def totals(self) -> tuple[memoryview, int]:
        """The in-flight totals column: ``view[base + slot]`` is :meth:`in_flight` of ``slot``."""
        return self._i32, self._totals

    def add(self, slot: int, delta: int) -> None:
        """Change this worker's in-flight count at the upstream in ``slot``."""
        i32 = self._i32
        with self._t.lock():
            i32[self._row + slot] += delta
            i32[self._totals + slot] += delta

    # ------------------------------------------------------------------ drains
    def drain_until(self, slot: int) -> float:
        """Until when (system-wide monotonic clock) the upstream in ``slot`` is drained; 0.0:
        it is not."""
        return self._t.f64[self._t.layout.drain_until // 8 + slot]

    def set_drain(self, slot: int, until: float) -> None:
        """Drain the upstream in ``slot`` until ``until`` (0.0: undrain it)."""
        t = self._t
        index = t.layout.drain_until // 8 + slot
        with t.lock():
            before = t.f64[index]
            t.f64[index] = until
            if bool(before) != bool(until):
                t.set_header(_H_DRAINS, t.header(_H_DRAINS) + (1 if until else -1))

    def drains(self) -> int:
        """How many upstream slots hold a drain deadline (expired ones included)."""
        return self._t.header(_H_DRAINS)

    # ------------------------------------------------------------------ tokens
    def token_slot(self, name: str) -> int:
        """The slot of a token name, the same in every worker; SlotsExhausted when full."""
        lay = self._t.layout
        return self._t.claim(lay.token_keys, _H_TOKENS, MAX_TOKENS, name, "token names")

    def token_in_flight(self, slot: int) -> int:
        i32, base = self._t.i32, self._t.layout.token_in_flight // 4 + slot
        return sum(i32[base + w * MAX_TOKENS] for w in range(self.workers))

    def token_add(self, slot: int, delta: int) -> None:
        self._t.i32[self._t.layout.token_in_flight // 4 + self.index * MAX_TOKENS + slot] += delta

    def bucket(self, slot: int) -> tuple[float, float]:
        """A token's rate bucket: (tokens, clock of the last update); tokens < 0: unused."""
        lay, f64 = self._t.layout, self._t.f64
        stamp = f64[lay.token_stamp // 8 + slot]
        tokens = f64[lay.token_bucket // 8 + slot]
        return (-1.0 if stamp == 0.0 else tokens), stamp

    def set_bucket(self, slot: int, tokens: float, stamp: float) -> None:
        lay, f64 = self._t.layout, self._t.f64
        f64[lay.token_bucket // 8 + slot] = tokens
        f64[lay.token_stamp // 8 + slot] = stamp or 1e-9

    # ------------------------------------------------------------------ heads
    def publish(
        self, priority: int, enqueued: float, excluded: list[int], waiting: int, background: int
    ) -> None:
        """This worker's next waiter (priority 0: none) and how many wait here (``waiting``
        requests, ``background`` job slices)."""
        t, me = self._t, self.index
        with t.lock():
            if len(excluded) > MAX_EXCLUDED:  # not describable: nobody waits for it
                priority = 0
            t.set_worker_int(me, _W_PRIORITY, priority)
            t.set_worker_int(me, _W_WAITING, waiting)
            t.set_worker_int(me, _W_BACKGROUND, background)
            t.set_worker_int(me, _W_EXCLUDED, len(excluded) if priority else 0)
            if priority:
                for n, slot in enumerate(excluded):
                    t.set_worker_int(me, _W_EXCL + n, slot)
            t.f64[t.layout.enqueued // 8 + me] = enqueued if priority else 0.0

    def others_wait(self) -> bool:
        """Whether another worker has published a waiter (one read per worker: it runs on
        every lease and release)."""
        i32 = self._i32
        return any(i32[i] for i in self._other_priorities)

    def heads(self) -> list[Head]:
        """The other workers' published heads (workers with a waiter only)."""
        t, out = self._t, []
        for w in range(self.workers):
            if w == self.index:
                continue
            priority = t.worker_int(w, _W_PRIORITY)
            if not priority or not t.worker_int(w, _W_PID):
                continue
            n = t.worker_int(w, _W_EXCLUDED)
            excluded = frozenset(t.worker_int(w, _W_EXCL + k) for k in range(n))
            enqueued = t.f64[t.layout.enqueued // 8 + w]
            waiting = t.worker_int(w, _W_WAITING) + t.worker_int(w, _W_BACKGROUND)
            out.append(Head(w, priority, enqueued, excluded, waiting))
        return out

    def waiting(self) -> int:
        """Requests (not job slices) waiting in every worker's central queue."""
        return sum(self._t.worker_int(w, _W_WAITING) for w in range(self.workers))

    def waiting_per_worker(self) -> list[int]:
        return [self._t.worker_int(w, _W_WAITING) for w in range(self.workers)]

    # ------------------------------------------------------------------ liveness
    def mark_ready(self) -> None:
        self._t.set_worker_int(self.index, _W_READY, 1)

    def live(self) -> list[int]:
        """Indexes of the workers that run and have finished starting."""
        t = self._t
        return [
            w for w in range(self.workers) if t.worker_int(w, _W_PID) and t.worker_int(w, _W_READY)
        ]

    def pid(self, worker: int) -> int:
        return self._t.worker_int(worker, _W_PID)

    # ------------------------------------------------------------------ wake-ups
    def wake(self, worker: int) -> None:
        """Make ``worker``'s event loop run its wake-up handler soon."""
        with contextlib.suppress(BlockingIOError, OSError):
            os.eventfd_write(self._t.wake_fds[worker], 1)

    def listen(self, loop: object, handler: Callable[[], None]) -> None:
        """Run ``handler`` on ``loop`` (an asyncio loop) whenever this worker is woken."""
        fd = self._t.wake_fds[self.index]

        def on_wake() -> None:
            with contextlib.suppress(BlockingIOError, OSError):
                os.eventfd_read(fd)
            handler()

        loop.add_reader(fd, on_wake)  # type: ignore[attr-defined]
        self._reader = (loop, fd)

    def unlisten(self) -> None:
        if self._reader is not None:
            loop, fd = self._reader
            with contextlib.suppress(Exception):
                loop.remove_reader(fd)  # type: ignore[attr-defined]
            self._reader = None

    # ------------------------------------------------------------------ metrics requests
    def request_metrics(self) -> int:
        """Ask every other worker for a fresh metrics dump; returns the request number."""
        t = self._t
        with t.lock():
            seq = t.header(_H_METRICS_SEQ) + 1
            t.set_header(_H_METRICS_SEQ, seq)
        for w in self.live():
            if w != self.index:
                self.wake(w)
        return seq

    def metrics_wanted(self) -> int:
        """The newest metrics request this worker has not answered yet, else 0."""
        seq = self._t.header(_H_METRICS_SEQ)
        return seq if seq > self._t.worker_int(self.index, _W_METRICS) else 0

    def metrics_answered(self, seq: int) -> None:
        self._t.set_worker_int(self.index, _W_METRICS, seq)

    def metrics_done(self, worker: int) -> int:
        """The newest metrics request ``worker`` has answered."""
        return self._t.worker_int(worker, _W_METRICS)

    def metrics_path(self, worker: int) -> Path:
        return self.run_dir / f"metrics-{worker}.prom"
