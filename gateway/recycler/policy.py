"""What to recycle now, from what the recycler observed: plain functions, no I/O.

An instance is due when its container's memory passed ``max_memory_mb`` or it served
``max_documents`` attempts since its last restart, and it has run ``min_uptime_s`` (a limit set
below what a fresh instance needs would otherwise restart it over and over). A due instance is
recycled only while everything else on its host serves: any other instance of the host that is
drained, draining, unhealthy, ejected or not running holds every recycle of the host (a rollout,
a `fleetctl recycle`, a failing card), and the gateway must keep another healthy upstream. One
instance at a time per host: within `maxUnavailableCards` (at least one card) by construction.

    >>> limits = Limits(max_memory_mb=16000, max_documents=None, min_uptime_s=0)
    >>> a = Observation("http://h:9120", "paddle-9120", 0, "healthy", True, 900.0, 17000 << 20, 3)
    >>> b = Observation("http://h:9121", "paddle-9121", 0, "healthy", True, 900.0, 900 << 20, 5)
    >>> choose([a, b], limits, {a.url: "healthy", b.url: "healthy"}).instance.container
    'paddle-9120'
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

MB = 1 << 20
SERVING = "healthy"
"""The one gateway state in which an instance counts as serving."""


@dataclass(frozen=True)
class Limits:
    max_memory_mb: int | None
    max_documents: int | None
    min_uptime_s: float


@dataclass(frozen=True)
class Observation:
    """One PaddleX instance as the recycler saw it in one check."""

    url: str
    """As the gateway knows it (its upstream URL)."""
    container: str
    card: int
    state: str
    """The gateway's state of it: healthy, unhealthy, ejected, draining, drained, unknown."""
    running: bool
    uptime_s: float | None
    memory_bytes: int | None
    """In use as `docker stats` shows it (:func:`memory_in_use`); None when unknown."""
    served: int
    """Attempts the gateway sent it since its container last started (as far as seen)."""


@dataclass(frozen=True)
class Decision:
    instance: Observation | None
    """The instance to recycle now, or None."""
    reason: str
    """Why it is recycled; with no instance, why nothing is (empty: nothing is due)."""


def memory_in_use(memory_stats: Mapping[str, object]) -> int | None:
    """A container's memory in use from the Engine API's ``memory_stats``, as `docker stats`
    computes it: the usage minus the inactive page cache (``total_inactive_file`` on cgroup v1,
    ``inactive_file`` on v2), which the kernel reclaims before it runs out. None when the
    engine gave no usage (a stopped container)."""
    usage = memory_stats.get("usage")
    if not isinstance(usage, int):
        return None
    stats = memory_stats.get("stats")
    stats = stats if isinstance(stats, Mapping) else {}
    for key in ("total_inactive_file", "inactive_file"):
        cache = stats.get(key)
        if isinstance(cache, int) and cache < usage:
            return usage - cache
    return usage


def due(obs: Observation, limits: Limits) -> str | None:
    """Why `obs` should be recycled (``"memory 17000 MB > 16000 MB"``), None if it should
    not (yet)."""
    if not obs.running or obs.uptime_s is None or obs.uptime_s < limits.min_uptime_s:
        return None
    if limits.max_memory_mb is not None and obs.memory_bytes is not None:
        used = obs.memory_bytes / MB
        if used > limits.max_memory_mb:
            return f"memory {used:.0f} MB > {limits.max_memory_mb} MB"
    if limits.max_documents is not None and obs.served >= limits.max_documents:
        return f"documents {obs.served} >= {limits.max_documents}"
    return None


def _urgency(obs: Observation, limits: Limits) -> tuple[float, float]:
    """Memory over its limit first (the largest overrun), then the most documents."""
    over = 0.0
    if limits.max_memory_mb is not None and obs.memory_bytes is not None:
        over = max(0.0, obs.memory_bytes / MB / limits.max_memory_mb - 1.0)
    documents = obs.served / limits.max_documents if limits.max_documents else 0.0
    return (over, documents)


def choose(
    host: Sequence[Observation], limits: Limits, gateway_states: Mapping[str, str]
) -> Decision:
    """The instance of `host` (its instances) to recycle now, if any.

    `gateway_states` holds the state of every upstream of the gateway (URL -> state), those of
    other hosts included: the recycle must leave the gateway another healthy upstream.
    """
    candidates = [(obs, why) for obs in host if (why := due(obs, limits)) is not None]
    if not candidates:
        return Decision(None, "")
    obs, why = max(candidates, key=lambda c: _urgency(c[0], limits))
    out = [
        o.container
        for o in host
        if o.url != obs.url and (not o.running or gateway_states.get(o.url, o.state) != SERVING)
    ]
    if out:
        return Decision(
            None,
            f"{obs.container} is due ({why}) but waits: not serving on this host: "
            + ", ".join(out),
        )
    others = [u for u, state in gateway_states.items() if u != obs.url and state == SERVING]
    if not others:
        return Decision(
            None,
            f"{obs.container} is due ({why}) but waits: the gateway has no other healthy upstream",
        )
    return Decision(obs, why)
