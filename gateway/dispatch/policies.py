"""Balancing policies: pure choice functions over upstream state (no I/O, no asyncio).

A policy picks one upstream among ``candidates`` (already filtered for health, tried
upstreams and, in ``queue`` mode, free capacity). Load-aware policies compare
the keys ``load_keys(candidates)`` gives, one per candidate: the gateway's in-flight count
first, then (topology-aware) the in-flight totals of the upstream's vLLM, card and host, so
among equally loaded instances the one on the least busy vLLM/card wins. ``None`` instead of
the keys says they are all the same.

Usage::

    policy = make_policy("p2c", rng=random.Random(1))
    chosen = policy.choose(candidates, order=pool.upstreams, load_keys=keys)
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import Protocol, TypeVar

T = TypeVar("T")
LoadKeys = Callable[[Sequence[T]], list[tuple[float, ...]] | None]


class Policy(Protocol):
    """Choose one of ``candidates`` (non-empty, in pool order)."""

    name: str
    uses_queue: bool

    def choose(self, candidates: Sequence[T], order: Sequence[T], load_keys: LoadKeys[T]) -> T: ...


def _least(candidates: Sequence[T], load_keys: LoadKeys[T], rng: random.Random) -> T:
    keys = load_keys(candidates)
    if keys is None:
        return candidates[0] if len(candidates) == 1 else rng.choice(candidates)
    best_key = min(keys)
    best = [item for item, key in zip(candidates, keys, strict=True) if key == best_key]
    return best[0] if len(best) == 1 else rng.choice(best)


class RoundRobinPolicy:
    """The seed's policy: cycle through the configured order, skipping non-candidates."""

    name = "round_robin"
    uses_queue = False

    def __init__(self, rng: random.Random | None = None) -> None:
        self._cursor = 0

    def choose(self, candidates: Sequence[T], order: Sequence[T], load_keys: LoadKeys[T]) -> T:
        allowed = {id(c) for c in candidates}
        n = len(order)
        for step in range(n):
            index = (self._cursor + step) % n
            if id(order[index]) in allowed:
                self._cursor = (index + 1) % n
                return order[index]
        return candidates[0]


class _Drawing:
    """A policy that draws at random (from ``rng``: a seeded one makes its choices repeatable)."""

    uses_queue = False

    def __init__(self, rng: random.Random | None = None) -> None:
        self._rng = rng or random.Random()


class RandomPolicy(_Drawing):
    """Uniform random choice."""

    name = "random"

    def choose(self, candidates: Sequence[T], order: Sequence[T], load_keys: LoadKeys[T]) -> T:
        return self._rng.choice(list(candidates))


class LeastInflightPolicy(_Drawing):
    """Full scan: the candidate with the lowest load key (random among exact ties)."""

    name = "least_inflight"

    def choose(self, candidates: Sequence[T], order: Sequence[T], load_keys: LoadKeys[T]) -> T:
        return _least(candidates, load_keys, self._rng)


class P2CPolicy(_Drawing):
    """Power of two choices: the less loaded of two random distinct candidates."""

    name = "p2c"

    def choose(self, candidates: Sequence[T], order: Sequence[T], load_keys: LoadKeys[T]) -> T:
        if len(candidates) <= 2:
            return _least(candidates, load_keys, self._rng)
        return _least(self._rng.sample(list(candidates), 2), load_keys, self._rng)


class QueuePolicy(LeastInflightPolicy):
    """Central FIFO queue with a per-upstream concurrency limit (the pool does the queueing);
    among the free upstreams it picks like ``least_inflight`` (topology tie-break)."""

    name = "queue"
    uses_queue = True


_POLICIES: dict[str, Callable[[random.Random | None], Policy]] = {
    "round_robin": RoundRobinPolicy,
    "random": RandomPolicy,
    "least_inflight": LeastInflightPolicy,
    "p2c": P2CPolicy,
    "queue": QueuePolicy,
}


def make_policy(name: str, rng: random.Random | None = None) -> Policy:
    """Build the policy called ``name`` (one of settings.POLICY_NAMES)."""
    try:
        cls = _POLICIES[name]
    except KeyError:
        raise ValueError(
            f"unknown policy {name!r} (expected one of {', '.join(_POLICIES)})"
        ) from None
    return cls(rng)
