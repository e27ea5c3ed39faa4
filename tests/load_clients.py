"""Continuous /ocr-file load from client threads, recording every answer and every error.

Half of the clients (rounded up) keep one keep-alive connection as long as the gateway lets them,
the others open a new connection for each request: between them they meet a gateway both in
the middle of a connection and at its accept queue.

Usage::

    with Load("http://127.0.0.1:9101", clients=8) as load:
        ...                                  # replace the gateway meanwhile
    assert load.errors == [] and set(load.statuses) == {200}
    load.longest_gap_s                       # the longest time without an answer
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import Counter

import httpx

from tests.gateway.samples import png_bytes


class Load:
    """See module doc."""

    def __init__(
        self,
        url: str,
        clients: int = 8,
        headers: dict[str, str] | None = None,
        timeout_s: float = 60.0,
    ) -> None:
        self.url = url
        self.headers = headers or {}
        self.timeout_s = timeout_s
        self.statuses: Counter[int] = Counter()
        self.errors: list[str] = []
        self.answered: list[float] = []  # monotonic times of the answers
        self.closing = 0  # answers that carried Connection: close
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._document = png_bytes()
        self._threads = [
            threading.Thread(target=self._run, args=(i % 2 == 0,), daemon=True)
            for i in range(clients)
        ]

    def __enter__(self) -> Load:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(self.timeout_s + 5)

    @property
    def total(self) -> int:
        return sum(self.statuses.values())

    @property
    def longest_gap_s(self) -> float:
        times = sorted(self.answered)
        return max((b - a for a, b in itertools.pairwise(times)), default=0.0)

    def answers_after(self, moment: float) -> int:
        """Answers that arrived after ``moment`` (a ``time.monotonic()``)."""
        with self._lock:
            return sum(1 for t in self.answered if t > moment)

    def _client(self) -> httpx.Client:
        return httpx.Client(
            base_url=self.url, timeout=self.timeout_s, trust_env=False, headers=self.headers
        )

    def _run(self, keep_alive: bool) -> None:
        client = self._client() if keep_alive else None
        try:
            while not self._stop.is_set():
                own = client or self._client()
                try:
                    reply = own.post("/ocr-file", files={"file": ("page.png", self._document)})
                except httpx.HTTPError as exc:
                    with self._lock:
                        self.errors.append(f"{type(exc).__name__}: {exc}")
                    time.sleep(0.01)
                    continue
                finally:
                    if client is None:
                        own.close()
                with self._lock:
                    self.statuses[reply.status_code] += 1
                    self.answered.append(time.monotonic())
                    if reply.headers.get("connection", "").lower() == "close":
                        self.closing += 1
        finally:
            if client is not None:
                client.close()
