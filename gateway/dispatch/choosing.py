"""Choosing an upstream: the balancing policy over the upstreams' loads, speeds and places.

Pure reads, no state of its own but the numbering of places: the policy
(:mod:`gateway.dispatch.policies`) compares load keys built here from the in-flight counts the
:class:`~gateway.shared.counters.Counters` hold (every worker's, when shared), the service-time
class of each upstream (``queue`` mode), and (topology-aware) the in-flight totals of its vLLM,
card and host.

Usage::

    chooser = Chooser(counters, rng, clock)
    chooser.configure(settings, upstreams)     # after every reload
    chosen = chooser.choose(candidates)
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Hashable, Sequence

from gateway.config.settings import Settings
from gateway.dispatch.policies import Policy, make_policy
from gateway.dispatch.upstreams import Upstream
from gateway.shared.counters import Counters

_HALF_CLASS_UP = math.sqrt(2)  # a service time within half a class of the average is class 0
_HALF_CLASS_DOWN = 1 / _HALF_CLASS_UP


class Chooser:
    """The policy and the load keys it compares; see module doc."""

    def __init__(
        self, counters: Counters, rng: random.Random, clock: Callable[[], float], settings: Settings
    ) -> None:
        self._counters = counters
        self._rng = rng
        self._clock = clock
        self.settings = settings
        self.policy: Policy = make_policy(settings.load_balance.mode, rng)
        self.upstreams: list[Upstream] = []
        self.place_loads: Callable[[], list[int]] = list
        """Attempts in flight at each numbered place, and a last 0; empty when nothing is in
        flight anywhere (:meth:`Counters.place_loads`)."""
        column, self._base = counters.column()
        self._column = column
        self.count: Callable[[Upstream], int] = lambda u: column[u.count_ix]
        """Attempts in flight at an upstream (every worker's, when shared)."""

    def configure(self, settings: Settings, upstreams: list[Upstream]) -> None:
        """Take new settings (a new policy when the mode changed) and the upstreams now
        configured."""
        if settings.load_balance.mode != self.settings.load_balance.mode:
            self.policy = make_policy(settings.load_balance.mode, self._rng)
        self.settings = settings
        self.upstreams = upstreams
        for u in upstreams:  # read for every upstream at every dispatch: no sum each time
            u.count_ix = self._base + u.slot
        self._index_places()

    def _index_places(self) -> None:
        """Number the places (vLLM, card, host) the upstreams name, so that a dispatch reads
        their loads from a list (:meth:`place_loads`): ``u.place_ix`` are the numbers of
        ``u``'s vLLM, card and host, one past the last place (a load that is always 0) for one
        it does not name."""
        members: dict[Hashable, list[Upstream]] = {}
        for u in self.upstreams:
            for place in u.places:
                members.setdefault(place, []).append(u)
        self.places = list(members)
        number = {place: i for i, place in enumerate(self.places)}
        for u in self.upstreams:
            u.place_ix = tuple(len(number) if p is None else number[p] for p in u.place_keys)
        self.place_loads = self._counters.place_loads(
            {place: [u.slot for u in group] for place, group in members.items()}
        )

    def counts(self, upstreams: Sequence[Upstream]) -> list[int]:
        """:attr:`count` of each of ``upstreams``."""
        column = self._column
        return [column[u.count_ix] for u in upstreams]

    def free(self, upstreams: Sequence[Upstream], limit: float) -> list[Upstream]:
        """Those of ``upstreams`` with fewer than ``limit`` attempts in flight (one pass: it
        runs for every request, over every upstream)."""
        column = self._column
        return [u for u in upstreams if column[u.count_ix] < limit]

    def choose(self, candidates: list[Upstream]) -> Upstream:
        return self.policy.choose(candidates, self.upstreams, self._load_keys)

    def _load_keys(self, candidates: Sequence[Upstream]) -> list[tuple[float, ...]] | None:
        """The sort key of each candidate: in-flight count, then (``queue`` mode) the speed
        class, then (topology-aware) the in-flight totals of its vLLM, card and host; None
        when every candidate's key is the same (an idle fleet of average speed)."""
        counts = self.counts(candidates)
        classes = self.speed_classes() if self.policy.uses_queue else {}
        loads = self.place_loads() if self.settings.load_balance.topology_aware else None
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

    def speed_classes(self) -> dict[str, int]:
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
        known = [u for u in self.upstreams if u.service_s and now - u.service_at <= memory]
        if not known:
            return {}
        services = [u.service_s or 0.0 for u in known]  # each set (known): `or` for the type
        average = sum(services) / len(services)
        low, high = average * _HALF_CLASS_DOWN, average * _HALF_CLASS_UP  # class 0 in between
        if low <= min(services) and max(services) < high:
            return {}
        return {
            u.spec.url: round(math.log2(service / average))
            for u, service in zip(known, services, strict=True)
            if not low <= service < high
        }
