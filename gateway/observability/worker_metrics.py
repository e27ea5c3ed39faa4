"""``/metrics`` of a gateway with several worker processes: every worker's series, labelled.

Each worker keeps its own registry (:class:`gateway.observability.metrics.GatewayMetrics`). The
worker that answers a scrape asks the others for a fresh exposition (a request number on the board
and a wake-up, :mod:`gateway.shared.occupancy`), renders its own meanwhile, waits up to
:data:`WAIT_S` for theirs (files in the supervisor's run directory) and returns them all in one
exposition, each sample with a ``worker`` label (``"0"`` .. ``"N-1"``). Sum them in PromQL with
``sum without (worker) (...)``. A restarted worker starts its counters at zero, which
Prometheus reads as a counter reset of that worker's series. A worker that does not answer in
time contributes its previous exposition, if any.

Usage::

    metrics = WorkerMetrics(seat)
    body, content_type = metrics.render(pool.gauge_snapshot, access.in_flight())  # the scrape
    metrics.answer(pool.gauge_snapshot, access.in_flight())  # in every worker's wake-up handler
"""

from __future__ import annotations

import contextlib
import os
import time

from gateway.observability.metrics import GatewayMetrics, Gauges
from gateway.shared.occupancy import Seat

WAIT_S = 0.5  # how long a scrape waits for the other workers' expositions
_POLL_S = 0.002


def label_line(line: str, worker: int) -> str:
    """One sample line of the text format with ``worker="N"`` added to its labels."""
    brace = line.find("{")
    space = line.find(" ")
    if 0 <= brace < space:
        sep = "" if line[brace + 1] == "}" else ","
        return f'{line[: brace + 1]}worker="{worker}"{sep}{line[brace + 1 :]}'
    return f'{line[:space]}{{worker="{worker}"}}{line[space:]}'


def merge_expositions(texts: list[tuple[int, str]]) -> str:
    """The workers' text expositions as one: each family's HELP and TYPE once, then every
    worker's samples of it, labelled with the worker."""
    headers: dict[str, list[str]] = {}
    samples: dict[str, list[str]] = {}
    for worker, text in texts:
        family = ""
        for line in text.splitlines():
            if line.startswith(("# HELP ", "# TYPE ")):
                family = line.split(" ", 3)[2]
                kinds = headers.setdefault(family, [])
                samples.setdefault(family, [])
                if not any(h[:7] == line[:7] for h in kinds):
                    kinds.append(line)
            elif line and not line.startswith("#"):
                samples.setdefault(family, []).append(label_line(line, worker))
    out = []
    for family, lines in samples.items():
        out.extend(headers.get(family, []))
        out.extend(lines)
    return "\n".join(out) + "\n"


class WorkerMetrics(GatewayMetrics):
    """:class:`GatewayMetrics` whose :meth:`render` gathers every worker's (module doc)."""

    def __init__(self, seat: Seat) -> None:
        super().__init__()
        self.seat = seat

    def _own(self, gauges: Gauges, in_flight: dict[str, int] | None) -> tuple[bytes, str]:
        return super().render(gauges, in_flight)

    def _write(self, body: bytes) -> None:
        path = self.seat.metrics_path(self.seat.index)
        tmp = path.with_name(f".{path.name}.{os.getpid()}")
        tmp.write_bytes(body)
        os.replace(tmp, path)

    def answer(self, gauges: Gauges, in_flight: dict[str, int] | None = None) -> None:
        """Write this worker's exposition if another worker asked for one."""
        seq = self.seat.metrics_wanted()
        if seq:
            body, _ = self._own(gauges, in_flight)
            self._write(body)
            self.seat.metrics_answered(seq)

    def render(self, gauges: Gauges, in_flight: dict[str, int] | None = None) -> tuple[bytes, str]:
        seat = self.seat
        seq = seat.request_metrics()
        body, content_type = self._own(gauges, in_flight)
        self._write(body)
        seat.metrics_answered(seq)
        others = [w for w in seat.live() if w != seat.index]
        deadline = time.monotonic() + WAIT_S
        while any(seat.metrics_done(w) < seq for w in others) and time.monotonic() < deadline:
            self.answer(gauges, in_flight)  # another worker's scrape may be waiting for us
            time.sleep(_POLL_S)
        texts = [(seat.index, body.decode())]
        for w in others:
            with contextlib.suppress(OSError):
                texts.append((w, seat.metrics_path(w).read_text()))
        texts.sort()
        return merge_expositions(texts).encode(), content_type
