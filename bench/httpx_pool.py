"""Why the gateway saturates: one shared httpx pool over many upstreams vs one pool per upstream.

    python -m bench.httpx_pool            # 48 zero-latency upstreams, 16 and 200 in flight

httpcore's pool re-scans every connection it holds (``has_expired`` polls each idle socket) and
every queued request whenever a request starts or ends, so with one ``AsyncClient`` for all
upstreams the CPU per request grows with the number of upstreams and with the requests in flight.
This measures requests/s and CPU per request of this process for both layouts, closed loop,
against the benchmark fleet (no gateway involved).
"""

from __future__ import annotations

import asyncio
import json
import os
import time

import httpx

from bench.common import parser
from bench.procs import start_fleet
from bench.procstat import cpu_s
from bench.workload import FleetSpec, png_b64


async def measure(layout: str, urls: list[str], concurrency: int, seconds: float) -> dict:
    limits = httpx.Limits(max_connections=1000, max_keepalive_connections=500)
    if layout == "shared":
        shared = httpx.AsyncClient(limits=limits)
        clients = [shared] * len(urls)
    else:
        clients = [httpx.AsyncClient(limits=limits) for _ in urls]
    body = {"file": png_b64(0.0, 0), "fileType": 1}
    done = 0
    stop = time.monotonic() + seconds

    async def worker(k: int) -> None:
        nonlocal done
        i = k
        while time.monotonic() < stop:
            i = (i + 1) % len(urls)
            r = await clients[i].post(urls[i] + "/layout-parsing", json=body)
            r.raise_for_status()
            done += 1

    c0, t0 = cpu_s(os.getpid()), time.monotonic()
    await asyncio.gather(*(worker(k) for k in range(concurrency)))
    dt, cpu = time.monotonic() - t0, cpu_s(os.getpid()) - c0
    for c in set(clients):
        await c.aclose()
    return {
        "layout": layout,
        "upstreams": len(urls),
        "in_flight": concurrency,
        "rps": round(done / dt),
        "cpu_ms_per_request": round(cpu / max(1, done) * 1000, 2),
    }


async def main_async(n: int, seconds: float, conc: list[int]) -> list[dict]:
    fleet = start_fleet(FleetSpec(n=n, zero_latency=True, slow_factors=()))
    try:
        out = []
        for layout in ("shared", "per_upstream"):
            for c in conc:
                r = await measure(layout, fleet.urls, c, seconds)
                print(json.dumps(r), flush=True)
                out.append(r)
        return out
    finally:
        fleet.stop()


def main(argv: list[str] | None = None) -> int:
    parser("httpx_pool", __doc__).parse_args(argv)  # --help
    asyncio.run(main_async(48, 5.0, [16, 200]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
