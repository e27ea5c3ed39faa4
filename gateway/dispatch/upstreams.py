"""One upstream's mutable state, the lease on it for one attempt, and the attempt outcomes.

Outcomes: ``success``, ``client_error`` (upstream 4xx), ``server_error`` (5xx), ``timeout``,
``connect_error``, ``reset`` (connection dropped, e.g. the uvicorn keep-alive reset after a
500), ``protocol_error`` (unusable 200 body), ``truncated`` (PDF pages missing), ``cancelled``.
``server_error``, ``timeout``, ``connect_error`` and ``protocol_error`` count towards passive
ejection; ``reset``, ``truncated`` and ``cancelled`` are neutral; ``success`` and
``client_error`` (the instance answered sensibly) reset the failure streak.

A ``connect_error`` also takes the upstream out of dispatch at once (see
:meth:`gateway.dispatch.pool.UpstreamPool.mark_down`), and an attempt cancelled because its upstream
was found stuck (``Lease.rescued``) ends as ``timeout``; after either, the next attempt of that
request is free of the retry budget (``Lease.free_retry``).

Usage::

    upstream = Upstream(spec=UpstreamSpec(url="http://a:8080"))
    upstream.state(now=time.monotonic())  # "healthy"
    lease = Lease(upstream=upstream, started=time.monotonic())
"""

from __future__ import annotations

import contextlib
import math
from collections import Counter, deque
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field

from gateway.config.settings import UpstreamSpec

OUTCOMES: tuple[str, ...] = (
    "success",
    "client_error",
    "server_error",
    "timeout",
    "connect_error",
    "reset",
    "protocol_error",
    "truncated",
    "cancelled",
)
FAILURE_OUTCOMES = frozenset({"server_error", "timeout", "connect_error", "protocol_error"})
GOOD_OUTCOMES = frozenset({"success", "client_error"})
SERVICE_SAMPLES = 16  # successful attempts behind an upstream's service-time estimate


@dataclass(eq=False)
class Upstream:
    """Mutable state of one upstream; kept across reloads while its URL stays configured."""

    spec: UpstreamSpec
    in_flight: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)
    consecutive_failures: int = 0
    ejections: int = 0
    ejection_level: int = 0
    ejected_until: float = 0.0
    probe_healthy: bool = True
    probe_checked: bool = False
    probe_successes: int = 0
    probe_failures: int = 0
    probe_timeouts: int = 0  # consecutive probes that timed out
    recover_on_probe: bool = False  # marked down by a connect error: one passing probe restores
    # its port refused (or timed out) the last connect, by an attempt or a probe, and nothing
    # answered since: even panic routing does not send it work (health checks on only)
    unreachable: bool = False
    last_error: str | None = None
    latencies: deque[float] = field(default_factory=lambda: deque(maxlen=512))
    ewma_s: float | None = None
    service_samples: deque[float] = field(default_factory=lambda: deque(maxlen=SERVICE_SAMPLES))
    service_s: float | None = None  # median of ``service_samples``; None until one success
    service_at: float = 0.0  # clock of the last service sample
    leases: set[Lease] = field(default_factory=set)  # attempts in flight here
    slot: int = -1  # its column in the workers' shared occupancy table (gateway.shared.occupancy)
    count_ix: int = -1  # where its count stands in the counters' column (the pool's chooser)
    # the keys of its vLLM, card and host (None: not named), and those named; set with ``spec``
    place_keys: tuple[Hashable | None, Hashable | None, Hashable | None] = (None, None, None)
    places: tuple[Hashable, ...] = ()
    place_ix: tuple[int, ...] = (0, 0, 0)  # the numbers its pool gives those places

    def __post_init__(self) -> None:
        self.set_spec(self.spec)

    def set_spec(self, spec: UpstreamSpec) -> None:
        """Take a (reloaded) spec, and the places its topology names."""
        self.spec = spec
        self.place_keys = (
            ("vllm", spec.vllm) if spec.vllm is not None else None,
            ("card", spec.host, spec.card) if spec.card is not None else None,
            ("host", spec.host) if spec.host is not None else None,
        )
        self.places = tuple(key for key in self.place_keys if key is not None)

    @property
    def url(self) -> str:
        return self.spec.url

    def is_ejected(self, now: float) -> bool:
        return self.ejected_until > now

    def state(self, now: float) -> str:
        if self.is_ejected(now):
            return "ejected"
        return "healthy" if self.probe_healthy else "unhealthy"

    def latency_ms(self) -> dict[str, float | None]:
        values = sorted(self.latencies)
        if not values:
            return {"p50": None, "p99": None, "count": 0}

        def pct(p: float) -> float:
            return round(values[min(len(values) - 1, math.ceil(p * len(values)) - 1)] * 1000, 1)

        return {"p50": pct(0.50), "p99": pct(0.99), "count": len(values)}


@dataclass(eq=False)
class Lease:
    """The right to send one attempt to ``upstream``; release it exactly once."""

    upstream: Upstream
    started: float
    queued_s: float = 0.0
    released: bool = False
    limited: bool = True  # counted against the concurrency limit (not a bypass call)
    cancel: Callable[[], None] | None = None  # set by the proxy while the attempt runs
    rescued: str | None = None  # why the pool cancelled the attempt (upstream stuck)
    free_retry: bool = False  # the next attempt of this request costs no retry budget
    places: tuple[Hashable, ...] = ()  # the vLLM, card and host it loads (UpstreamPool)

    def abort(self, reason: str) -> None:
        """Cancel the running attempt because its upstream is stuck (idempotent)."""
        if self.released or self.rescued is not None:
            return
        self.rescued = reason
        if self.cancel is not None:
            with contextlib.suppress(RuntimeError):  # the attempt is ending already
                self.cancel()
