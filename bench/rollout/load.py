"""Closed-loop clients and a capacity sampler, run while a change rolls through the fleet.

    load = ClientLoad(gateway_url, clients=8, headers=USER)
    capacity = CapacitySampler(gateway_url, headers=ADMIN)
    with load, capacity:
        stack.up()
    summary = summarize(load.results, capacity.samples)

Every client sends `/ocr-file` with a small PNG one request after another on its own keep-alive
connection (a fresh one after any error), and records each answer: its time, latency, status and
any transport error. The sampler reads `/upstreams` twice a second and counts the instances that
can take work (healthy, not drained).
"""

from __future__ import annotations

import io
import itertools
import statistics
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx
from PIL import Image

SERVING = "healthy"
"""The `/upstreams` state of an instance that takes new work."""


def png_bytes() -> bytes:
    image = Image.new("RGB", (160, 60), "white")
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


@dataclass(frozen=True)
class Answer:
    sent: float
    """Seconds since the load started."""
    latency: float
    status: int
    """HTTP status; 0 for a transport error (refused, reset, timed out)."""
    error: str = ""

    @property
    def ok(self) -> bool:
        return self.status == 200


class ClientLoad:
    """`clients` threads, each sending documents back to back until stopped."""

    def __init__(
        self,
        url: str,
        clients: int = 8,
        headers: Mapping[str, str] | None = None,
        timeout_s: float = 120.0,
    ):
        self.url, self.clients, self.timeout_s = url, clients, timeout_s
        self.headers = dict(headers or {})
        self.results: list[Answer] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._document = png_bytes()
        self.started = 0.0

    def __enter__(self) -> ClientLoad:
        self.started = time.monotonic()
        self._threads = [
            threading.Thread(target=self._client, name=f"client-{i}", daemon=True)
            for i in range(self.clients)
        ]
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(self.timeout_s + 5)

    def _client(self) -> None:
        client = httpx.Client(timeout=self.timeout_s, headers=self.headers)
        try:
            while not self._stop.is_set():
                sent = time.monotonic()
                try:
                    answer = client.post(
                        f"{self.url}/ocr-file",
                        files={"file": ("doc.png", self._document, "image/png")},
                    )
                    status, error = answer.status_code, "" if answer.is_success else answer.text
                except httpx.HTTPError as exc:
                    status, error = 0, f"{type(exc).__name__}: {exc}"
                    client.close()
                    client = httpx.Client(timeout=self.timeout_s, headers=self.headers)
                done = time.monotonic()
                with self._lock:
                    self.results.append(
                        Answer(sent - self.started, done - sent, status, error[:300])
                    )
                if status != 200:
                    time.sleep(0.05)  # a client that is refused does not spin
        finally:
            client.close()


@dataclass
class CapacitySampler:
    """Samples (seconds since start, instances serving, instances drained, total)."""

    url: str
    headers: Mapping[str, str] | None = None
    interval_s: float = 0.5
    samples: list[tuple[float, int, int, int]] = field(default_factory=list)
    errors: int = 0

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="capacity", daemon=True)
        self.started = 0.0

    def __enter__(self) -> CapacitySampler:
        self.started = time.monotonic()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        with httpx.Client(timeout=5, headers=dict(self.headers or {})) as client:
            while not self._stop.is_set():
                try:
                    doc = client.get(f"{self.url}/upstreams").json()
                    states = [u["state"] for u in doc["upstreams"]]
                    self.samples.append(
                        (
                            time.monotonic() - self.started,
                            states.count(SERVING),
                            sum(s in ("draining", "drained") for s in states),
                            len(states),
                        )
                    )
                except (httpx.HTTPError, ValueError, KeyError):
                    self.errors += 1  # the gateway itself being replaced
                self._stop.wait(self.interval_s)


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=1000, method="inclusive")[int(q * 1000) - 1]


def summarize(
    answers: list[Answer],
    samples: list[tuple[float, int, int, int]],
    change: tuple[float, float] | None = None,
) -> dict[str, Any]:
    """Failed requests, the capacity floor and p99 latency before and during `change` (its start
    and end, in seconds since the load started; None: the whole run is "during")."""
    start, end = change if change is not None else (0.0, float("inf"))
    before = [a.latency for a in answers if a.ok and a.sent < start]
    during = [a.latency for a in answers if a.ok and start <= a.sent <= end]
    failed = [a for a in answers if not a.ok]
    window = [s for s in samples if start <= s[0] <= end] or samples
    return {
        "requests": len(answers),
        "failed": len(failed),
        "failures": sorted({f"{a.status} {a.error[:120]}" for a in failed})[:10],
        "capacity_total": max((s[3] for s in samples), default=0),
        "capacity_floor": min((s[1] for s in window), default=None),
        "p99_before_s": percentile(before, 0.99),
        "p99_during_s": percentile(during, 0.99),
        "longest_gap_s": longest_gap(answers),
    }


def longest_gap(answers: list[Answer]) -> float:
    """The longest time in which no request succeeded (what a client calls an outage)."""
    done = sorted(a.sent + a.latency for a in answers if a.ok)
    return max((b - a for a, b in itertools.pairwise(done)), default=0.0)
