"""Seeded workload: fleet shape, Poisson arrivals and per-document work.

The service time of a request is a property of the request (its *work*, a unitless draw from a
heavy-tailed distribution with mean 1) times the serving instance's mean service time and slowness
factor.  The work is carried inside the PNG the client sends (a ``tEXt`` chunk), so every policy,
the live ideal dispatcher and the discrete-event reference see exactly the same workload for the
same seed: same arrival times, same work per document.

A PDF costs what a page-slicing gateway must pay for: ``request_s`` per request plus ``page_s``
per page (:meth:`FleetSpec.pdf_seconds`), times the instance's slowness factor, so finer slices
are not free.
"""

from __future__ import annotations

import base64
import math
import random
import re
from dataclasses import dataclass, field

from fleetctl.png import encode_png

WORK_MARKER = b"bench-work="
_WORK_RE = re.compile(rb"bench-work=([0-9.eE+-]+);id=(\d+)")


@dataclass(frozen=True)
class InstanceSpec:
    index: int
    mean_s: float  # mean service time of this instance (work 1.0 takes this long)
    slow: bool = False
    factor: float = 1.0  # slowness (1 fast, 3-5 slow, 0 zero-latency); scales PDF costs too


@dataclass(frozen=True)
class FleetSpec:
    """Shape of the simulated fleet."""

    n: int = 48
    mean_s: float = 0.5  # mean service time of a fast instance
    slow_factors: tuple[float, ...] = (3.0, 4.0, 5.0)  # one slow instance per factor
    sigma: float = 1.0  # lognormal shape of the per-document work (mean fixed at 1)
    seed: int = 42
    zero_latency: bool = False  # scenario 3: answer at once
    request_s: float = 0.4  # PDF cost model: fixed seconds per /layout-parsing of a PDF ...
    page_s: float = 0.2  # ... plus this per page (both times the instance's factor)

    def instances(self) -> list[InstanceSpec]:
        rng = random.Random(self.seed * 7919 + 1)
        slow_idx = sorted(rng.sample(range(self.n), k=min(len(self.slow_factors), self.n)))
        factors = dict(zip(slow_idx, self.slow_factors, strict=False))
        out = []
        for i in range(self.n):
            f = factors.get(i, 1.0)
            mean = 0.0 if self.zero_latency else self.mean_s * f
            factor = 0.0 if self.zero_latency else f
            out.append(InstanceSpec(index=i, mean_s=mean, slow=f != 1.0, factor=factor))
        return out

    def pdf_seconds(self, pages: int, factor: float = 1.0) -> float:
        """Service time of one ``/layout-parsing`` of a ``pages``-page PDF on an instance of
        slowness ``factor``.

        >>> FleetSpec(request_s=0.4, page_s=0.2).pdf_seconds(16)
        3.6
        """
        return round((self.request_s + pages * self.page_s) * factor, 9)

    def page_capacity(self, slice_pages: int) -> float:
        """Pages/s of the whole fleet with every instance always busy on ``slice_pages``-page
        requests (slow instances at their own rate)."""
        return sum(
            slice_pages / self.pdf_seconds(slice_pages, s.factor)
            for s in self.instances()
            if s.factor > 0
        )

    def instance_equivalents(self) -> float:
        """The fleet's size in fast instances: sum over instances of 1 / factor."""
        return sum(1.0 / s.factor for s in self.instances() if s.factor > 0)

    def capacity_rps(self) -> float:
        """Sum over instances of 1 / mean service time (slow ones included)."""
        return sum(1.0 / s.mean_s for s in self.instances() if s.mean_s > 0)


@dataclass(frozen=True)
class Request:
    id: int
    t: float  # scheduled send time, seconds from the start of the run
    work: float  # service time on an instance = work * instance mean_s


@dataclass
class Workload:
    rate_rps: float
    duration_s: float
    requests: list[Request] = field(default_factory=list)


def make_workload(rate_rps: float, duration_s: float, seed: int, sigma: float) -> Workload:
    """Poisson arrivals at ``rate_rps`` for ``duration_s`` seconds, lognormal work with mean 1.

    The unit-rate gaps and the works come from one seeded stream and are only *scaled* by the rate,
    so request k has the same work at every load level of a run.
    """
    rng = random.Random(seed)
    mu = -0.5 * sigma * sigma  # E[lognormal(mu, sigma)] = 1
    reqs: list[Request] = []
    t = 0.0
    while True:
        gap = rng.expovariate(1.0)
        work = rng.lognormvariate(mu, sigma) if sigma > 0 else 1.0
        t += gap / rate_rps
        if t >= duration_s:
            break
        reqs.append(Request(id=len(reqs), t=t, work=work))
    return Workload(rate_rps=rate_rps, duration_s=duration_s, requests=reqs)


# ---------------------------------------------------------------- tiny PNG carrying the work


def png_with_work(work: float, req_id: int, size: int = 8) -> bytes:
    """A valid size x size grayscale PNG with a tEXt chunk ``bench=bench-work=<w>;id=<k>``."""
    rows = [bytes((x * 31 + y * 17) & 0xFF for x in range(size)) for y in range(size)]
    text = WORK_MARKER + f"{work:.6f};id={req_id}".encode()
    return encode_png(size, size, rows, rgb=False, text={b"bench": text})


def png_b64(work: float, req_id: int) -> str:
    return base64.b64encode(png_with_work(work, req_id)).decode()


def parse_work(file_bytes: bytes) -> tuple[float, int] | None:
    m = _WORK_RE.search(file_bytes)
    if not m:
        return None
    w = float(m.group(1))
    if not math.isfinite(w) or w < 0:
        return None
    return w, int(m.group(2))
