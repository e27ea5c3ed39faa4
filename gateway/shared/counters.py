"""The counts the pool and access control decide on, behind one interface for one process or
several.

The upstream pool (:mod:`gateway.dispatch.pool`) counts attempts in flight per upstream and keeps
drain deadlines; access control (:mod:`gateway.access.control`) counts requests in flight per
token and keeps each token's rate bucket. With one worker process these live in this process
(:class:`LocalCounters`); with several (the pre-fork supervisor) they live on the workers' shared
board (:class:`SharedCounters` over a :class:`~gateway.shared.occupancy.Seat`), so a limit holds
over every worker. Both users read and write them through :class:`Counters` alone and so have one
code path; what differs is only whose counts a read sums up.

Upstreams are addressed by slot (an int chosen by URL, stable across reloads and, shared, across
workers), tokens by name. A check-then-count that must be atomic across workers runs inside
:meth:`Counters.lock` (re-entrant; a no-op with one process, where the event loop already makes
a synchronous block atomic).

Usage::

    counters = LocalCounters() if seat is None else SharedCounters(seat)
    slot = counters.upstream_slot("http://a:8080")
    with counters.lock():
        if counters.in_flight(slot) < limit:
            counters.add(slot, 1)
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Hashable, Sequence
from contextlib import AbstractContextManager
from operator import itemgetter
from typing import Protocol

from gateway.shared.occupancy import Seat, SlotsExhausted

log = logging.getLogger("gateway.tokens")


class Counters(Protocol):
    """In-flight counts per upstream slot and per token, drain deadlines, rate buckets."""

    def lock(self) -> AbstractContextManager[object]:
        """Makes a read followed by a write atomic for every process sharing the counts."""
        ...

    # ----------------------------------------------------------------- upstreams
    def upstream_slot(self, url: str) -> int:
        """The slot of an upstream URL (stable); SlotsExhausted when no slot is left."""
        ...

    def in_flight(self, slot: int) -> int:
        """Attempts in flight at the upstream in ``slot`` (every process's)."""
        ...

    def column(self) -> tuple[Sequence[int], int]:
        """The in-flight counts as one live column: ``column[base + slot]`` is
        :meth:`in_flight` of ``slot`` (for the reads of every dispatch, without a call each)."""
        ...

    def add(self, slot: int, delta: int, places: tuple[Hashable, ...] = ()) -> None:
        """Change this process's attempts in flight at the upstream in ``slot``, which is at
        ``places`` (its vLLM, card, host) when the lease was taken."""
        ...

    def place_loads(self, groups: dict[Hashable, list[int]]) -> Callable[[], list[int]]:
        """A reader of the attempts in flight at each place of ``groups`` (place -> the slots
        of the upstreams there), in that order, and a last 0; empty when nothing is in flight
        anywhere. One process counts a lease at the places it was taken at (a reload that
        moves an upstream does not move its leases' load); shared, a place's load is the sum of
        its upstreams' counts."""
        ...

    # ----------------------------------------------------------------- drains
    def drains_active(self) -> bool:
        """Whether any drain deadline is set (an expired one included): a fast path."""
        ...

    def drain_until(self, slot: int) -> float:
        """Until when (monotonic clock) the upstream in ``slot`` is drained; 0.0: it is not."""
        ...

    def set_drain(self, slot: int, until: float) -> None:
        """Drain the upstream in ``slot`` until ``until`` (0.0: undrain it)."""
        ...

    # ----------------------------------------------------------------- tokens
    def token_in_flight(self, name: str) -> int:
        """Requests in flight counted for token ``name`` (every process's)."""
        ...

    def token_add(self, name: str, delta: int) -> None:
        """Change this process's requests in flight for token ``name``."""
        ...

    def bucket(self, name: str) -> tuple[float, float]:
        """Token ``name``'s rate bucket: (tokens, clock of its last update); tokens < 0: unused."""
        ...

    def set_bucket(self, name: str, tokens: float, stamp: float) -> None: ...

    # ----------------------------------------------------------------- reporting
    def workers(self) -> Seat | None:
        """The seat whose workers share the counts, None when this process alone counts."""
        ...


class LocalCounters:
    """The counts of one process (see :class:`Counters`)."""

    def __init__(self) -> None:
        self._slots: dict[str, int] = {}
        self._in_flight: list[int] = []
        self._places: dict[Hashable, int] = {}  # attempts in flight per place, those not 0
        self._drains: dict[int, float] = {}
        self._tokens: dict[str, int] = {}
        self._buckets: dict[str, tuple[float, float]] = {}
        self._lock = threading.RLock()  # entered in C: no Python frames on the hot path

    def lock(self) -> AbstractContextManager[object]:
        return self._lock

    def upstream_slot(self, url: str) -> int:
        slot = self._slots.get(url)
        if slot is None:
            slot = self._slots[url] = len(self._slots)
            self._in_flight.append(0)
        return slot

    def in_flight(self, slot: int) -> int:
        return self._in_flight[slot]

    def column(self) -> tuple[Sequence[int], int]:
        return self._in_flight, 0

    def add(self, slot: int, delta: int, places: tuple[Hashable, ...] = ()) -> None:
        self._in_flight[slot] += delta
        load = self._places
        for place in places:
            if (left := load.get(place, 0) + delta) > 0:
                load[place] = left
            else:
                load.pop(place, None)

    def place_loads(self, groups: dict[Hashable, list[int]]) -> Callable[[], list[int]]:
        load, places = self._places, list(groups)
        get = load.get

        def read() -> list[int]:
            if not load:
                return []
            return [*(get(place, 0) for place in places), 0]

        return read

    def drains_active(self) -> bool:
        return bool(self._drains)

    def drain_until(self, slot: int) -> float:
        return self._drains.get(slot, 0.0)

    def set_drain(self, slot: int, until: float) -> None:
        if until:
            self._drains[slot] = until
        else:
            self._drains.pop(slot, None)

    def token_in_flight(self, name: str) -> int:
        return self._tokens.get(name, 0)

    def token_add(self, name: str, delta: int) -> None:
        left = self._tokens.get(name, 0) + delta
        if left:
            self._tokens[name] = left
        else:
            self._tokens.pop(name, None)

    def bucket(self, name: str) -> tuple[float, float]:
        return self._buckets.get(name, (-1.0, 0.0))

    def set_bucket(self, name: str, tokens: float, stamp: float) -> None:
        self._buckets[name] = (tokens, stamp)

    def workers(self) -> Seat | None:
        return None


class SharedCounters:
    """The counts of every worker, on the board ``seat`` belongs to (see :class:`Counters`).

    A token the full table has no slot for is counted in this worker alone (logged once), as
    by :class:`LocalCounters`: its quotas then hold per worker.
    """

    def __init__(self, seat: Seat) -> None:
        self.seat = seat
        self._lock = seat.lock()
        self._totals, self._base = seat.totals()
        self._token_slots: dict[str, int] = {}
        self._unslotted = LocalCounters()  # tokens the table had no room for
        self._unslotted_names: set[str] = set()

    def lock(self) -> AbstractContextManager[object]:
        return self._lock

    def upstream_slot(self, url: str) -> int:
        return self.seat.upstream_slot(url)

    def in_flight(self, slot: int) -> int:
        return self._totals[self._base + slot]

    def column(self) -> tuple[Sequence[int], int]:
        return self._totals, self._base

    def add(self, slot: int, delta: int, places: tuple[Hashable, ...] = ()) -> None:
        self.seat.add(slot, delta)

    def place_loads(self, groups: dict[Hashable, list[int]]) -> Callable[[], list[int]]:
        slots = [slot for group in groups.values() for slot in group] or [0]
        lo, hi = self._base + min(slots), self._base + max(slots) + 1
        sums = [_summer([slot + self._base - lo for slot in group]) for group in groups.values()]
        totals = self._totals

        def read() -> list[int]:
            column = totals[lo:hi].tolist()
            if not any(column):
                return []
            return [*(total(column) for total in sums), 0]

        return read

    def drains_active(self) -> bool:
        return self.seat.drains() > 0

    def drain_until(self, slot: int) -> float:
        return self.seat.drain_until(slot)

    def set_drain(self, slot: int, until: float) -> None:
        self.seat.set_drain(slot, until)

    def _token_slot(self, name: str) -> int | None:
        slot = self._token_slots.get(name)
        if slot is None and name not in self._unslotted_names:
            try:
                slot = self._token_slots[name] = self.seat.token_slot(name)
            except SlotsExhausted as exc:
                log.error("token %r: quotas counted per worker: %s", name, exc)
                self._unslotted_names.add(name)
        return slot

    def token_in_flight(self, name: str) -> int:
        slot = self._token_slot(name)
        if slot is None:
            return self._unslotted.token_in_flight(name)
        return self.seat.token_in_flight(slot)

    def token_add(self, name: str, delta: int) -> None:
        slot = self._token_slot(name)
        if slot is None:
            self._unslotted.token_add(name, delta)
            return
        with self.seat.lock():
            self.seat.token_add(slot, delta)

    def bucket(self, name: str) -> tuple[float, float]:
        slot = self._token_slot(name)
        if slot is None:
            return self._unslotted.bucket(name)
        return self.seat.bucket(slot)

    def set_bucket(self, name: str, tokens: float, stamp: float) -> None:
        slot = self._token_slot(name)
        if slot is None:
            self._unslotted.set_bucket(name, tokens, stamp)
            return
        self.seat.set_bucket(slot, tokens, stamp)

    def workers(self) -> Seat | None:
        return self.seat


def _summer(offsets: list[int]) -> Callable[[list[int]], int]:
    """A function that sums the items of a list at ``offsets`` (in C, not a Python loop)."""
    if len(offsets) == 1:
        return itemgetter(offsets[0])
    pick = itemgetter(*offsets)
    return lambda column: sum(pick(column))
