"""Closed-loop clients and a capacity sampler, run while the fleet or its gateway changes.

    load = ClientLoad(gateway_url, clients=8, headers=USER)
    capacity = CapacitySampler(gateway_url, headers=ADMIN)
    with load, capacity:
        stack.up()
    summary = summarize(load.answers, capacity.samples)
    load.errors, load.statuses, load.closing, load.longest_gap_s

Each client sends `/ocr-file` with a small PNG, one request after another. Half of them
(rounded up) keep one keep-alive connection as long as the gateway lets them (a fresh one after
a transport error); the others open a new connection for each request: between them they meet
a gateway both in the middle of a connection and at its accept queue. Every answer is recorded:
when it was sent, its latency, its status (0 for a transport error), the error and whether it
carried `Connection: close`. The sampler reads `/upstreams` twice a second and counts the
instances that take work (healthy, not drained).

This is the one load client of the project: the rollout benchmark (`python -m bench.rollout`)
and the tests of the rollout and the gateway handover use it.
"""

from __future__ import annotations

import io
import itertools
import statistics
import threading
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx
from PIL import Image

SERVING = "healthy"
"""The `/upstreams` state of an instance that takes new work."""
OUT = ("draining", "drained")
"""The `/upstreams` states of an instance taken out of service on purpose."""


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
    closing: bool = False
    """The answer carried `Connection: close` (a gateway on its way out)."""

    @property
    def ok(self) -> bool:
        return self.status == 200

    @property
    def done(self) -> float:
        return self.sent + self.latency


class ClientLoad:
    """`clients` threads, each sending documents back to back until stopped; `keep_alive` of
    them (default: half, rounded up) on one kept-alive connection, the rest on a new connection
    per request."""

    def __init__(
        self,
        url: str,
        clients: int = 8,
        headers: Mapping[str, str] | None = None,
        timeout_s: float = 120.0,
        keep_alive: int | None = None,
    ):
        if clients < 1:
            raise ValueError(f"clients: {clients}, at least 1")
        self.url, self.clients, self.timeout_s = url.rstrip("/"), clients, timeout_s
        self.keep_alive = (clients + 1) // 2 if keep_alive is None else keep_alive
        if not 0 <= self.keep_alive <= clients:
            raise ValueError(f"keep_alive: {keep_alive}, between 0 and clients ({clients})")
        self.headers = dict(headers or {})
        self.answers: list[Answer] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._document = png_bytes()
        self.started = 0.0

    def __enter__(self) -> ClientLoad:
        self.started = time.monotonic()
        self._threads = [
            threading.Thread(target=self._client, args=(i < self.keep_alive,), daemon=True,
                             name=f"client-{i}")
            for i in range(self.clients)
        ]  # fmt: skip
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(self.timeout_s + 5)

    def now(self) -> float:
        """Seconds since the load started (the clock of `Answer.sent`)."""
        return time.monotonic() - self.started

    # ---------------------------------------------------------------- what the clients saw

    @property
    def results(self) -> list[Answer]:
        with self._lock:
            return list(self.answers)

    @property
    def total(self) -> int:
        """Requests answered or failed so far."""
        return len(self.answers)

    @property
    def statuses(self) -> Counter[int]:
        """HTTP status -> answers (transport errors are in `errors`)."""
        return Counter(a.status for a in self.results if a.status)

    @property
    def errors(self) -> list[str]:
        """The transport errors (refused, reset, timed out), in order."""
        return [a.error for a in self.results if a.status == 0]

    @property
    def closing(self) -> int:
        """Answers that carried `Connection: close`."""
        return sum(a.closing for a in self.results)

    @property
    def longest_gap_s(self) -> float:
        """The longest time without a successful answer (what a client calls an outage)."""
        return longest_gap(self.results)

    def answers_after(self, moment: float) -> int:
        """Answers that arrived after `moment` (a `time.monotonic()`)."""
        since = moment - self.started
        return sum(1 for a in self.results if a.status and a.done > since)

    # ---------------------------------------------------------------- the clients

    def _new_client(self, keep_alive: bool) -> httpx.Client:
        limits = httpx.Limits(max_keepalive_connections=1 if keep_alive else 0)
        return httpx.Client(
            base_url=self.url,
            timeout=self.timeout_s,
            headers=self.headers,
            limits=limits,
            trust_env=False,
        )

    def _client(self, keep_alive: bool) -> None:
        client = self._new_client(keep_alive)
        try:
            while not self._stop.is_set():
                sent = time.monotonic()
                closing = False
                try:
                    reply = client.post(
                        "/ocr-file", files={"file": ("doc.png", self._document, "image/png")}
                    )
                    status, error = reply.status_code, "" if reply.is_success else reply.text
                    closing = reply.headers.get("connection", "").lower() == "close"
                except httpx.HTTPError as exc:
                    status, error = 0, f"{type(exc).__name__}: {exc}"
                    client.close()
                    client = self._new_client(keep_alive)
                done = time.monotonic()
                answer = Answer(sent - self.started, done - sent, status, error[:300], closing)
                with self._lock:
                    self.answers.append(answer)
                if status != 200:
                    time.sleep(0.05)  # a client that is refused does not spin
        finally:
            client.close()


Sample = tuple[float, int, int, int]
"""(seconds since the sampler started, instances serving, instances drained, all)."""


@dataclass
class CapacitySampler:
    """Reads `/upstreams` every `interval_s` into `samples` (see `Sample`)."""

    url: str
    headers: Mapping[str, str] | None = None
    interval_s: float = 0.5
    samples: list[Sample] = field(default_factory=list)
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
        headers = dict(self.headers or {})
        with httpx.Client(timeout=5, headers=headers, trust_env=False) as client:
            while not self._stop.is_set():
                try:
                    doc = client.get(f"{self.url}/upstreams").json()
                    states = [u["state"] for u in doc["upstreams"]]
                    self.samples.append(
                        (
                            time.monotonic() - self.started,
                            states.count(SERVING),
                            sum(s in OUT for s in states),
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
    samples: list[Sample],
    change: tuple[float, float] | None = None,
) -> dict[str, Any]:
    """Failed requests, the capacity floor and p99 latency before and during `change` (its start
    and end, in seconds since the load started; None: the whole run is "during"). The load and
    the sampler are assumed to have started together."""
    start, end = change if change is not None else (0.0, float("inf"))
    before = [a.latency for a in answers if a.ok and a.sent < start]
    during = [a.latency for a in answers if a.ok and start <= a.sent <= end]
    failed = [a for a in answers if not a.ok]
    window = [s for s in samples if start <= s[0] <= end] or samples
    return {
        "requests": len(answers),
        "failed": len(failed),
        "failures": dict(Counter(f"{a.status} {a.error[:120]}" for a in failed).most_common(10)),
        "closing": sum(a.closing for a in answers),
        "capacity_total": max((s[3] for s in samples), default=0),
        "capacity_floor": min((s[1] for s in window), default=None),
        "p99_before_s": percentile(before, 0.99),
        "p99_during_s": percentile(during, 0.99),
        "longest_gap_s": longest_gap(answers),
    }


def longest_gap(answers: list[Answer]) -> float:
    """The longest time in which no request succeeded (what a client calls an outage)."""
    done = sorted(a.done for a in answers if a.ok)
    return max((b - a for a, b in itertools.pairwise(done)), default=0.0)
