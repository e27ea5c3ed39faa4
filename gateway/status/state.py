"""The document the status page draws: ``GET /status/api/state``.

Everything comes from this gateway's memory, its job store and, for the vLLM servers (which
the gateway does not call itself), one short probe of each vLLM's ``/metrics`` at most every
:data:`VLLM_PROBE_S` seconds while someone looks at the page, all vLLM at once. With 10 hosts
of 8 cards (160 vLLM, 480 PaddleX) the document is about 200 kB and a probe round one second.

Usage::

    state = StatusState()
    doc = await state.document(runtime)
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from typing import TYPE_CHECKING, Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from gateway.jobs.backend import StoreUnavailable

if TYPE_CHECKING:
    from gateway.runtime import Runtime

VLLM_PROBE_S = 5.0
VLLM_TIMEOUT_S = 1.5
VLLM_SERIES = {
    "vllm:num_requests_running": "running",
    "vllm:num_requests_waiting": "waiting",
    "vllm:kv_cache_usage_perc": "kv_cache",
}
_TICKS = os.sysconf("SC_CLK_TCK")


def process_stats(pids: list[int]) -> dict[str, Any]:
    """CPU seconds and resident memory of these processes (from /proc; absent ones skipped)."""
    cpu = 0.0
    rss = 0
    page = os.sysconf("SC_PAGE_SIZE")
    for pid in pids:
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()  # noqa: SIM115
            cpu += (int(fields[11]) + int(fields[12])) / _TICKS
            rss += int(open(f"/proc/{pid}/statm").read().split()[1]) * page  # noqa: SIM115
    return {"cpu_seconds": round(cpu, 2), "rss_bytes": rss, "processes": len(pids)}


def gateway_pids(runtime: Runtime) -> list[int]:
    """This process, and with worker processes every worker and their supervisor."""
    seat = runtime.seat
    if seat is None:
        return [os.getpid()]
    pids = {os.getpid(), os.getppid()}
    pids.update(pid for pid in (seat.pid(w) for w in range(seat.workers)) if pid)
    return sorted(pids)


def parse_vllm(text: str) -> dict[str, float]:
    """The series the page shows from one vLLM's exposition (summed over engines)."""
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            key = VLLM_SERIES.get(sample.name)
            if key is not None:
                out[key] = out.get(key, 0.0) + sample.value
    return out


class StatusState:
    """Builds the document; keeps the last vLLM probe round (module doc)."""

    def __init__(self) -> None:
        self._vllm: dict[str, dict[str, Any]] = {}
        self._probed = 0.0
        self._probe: asyncio.Task[None] | None = None

    async def _probe_one(self, client: httpx.AsyncClient, url: str) -> None:
        try:
            answer = await client.get(f"{url.rstrip('/')}/metrics", timeout=VLLM_TIMEOUT_S)
            if answer.status_code != 200:
                raise ValueError(f"HTTP {answer.status_code}")
            self._vllm[url] = {"state": "healthy", **parse_vllm(answer.text)}
        except (httpx.HTTPError, ValueError) as exc:
            self._vllm[url] = {"state": "down", "error": type(exc).__name__}

    async def _probe_all(self, client: httpx.AsyncClient, urls: list[str]) -> None:
        await asyncio.gather(*(self._probe_one(client, url) for url in urls))
        for gone in set(self._vllm) - set(urls):
            del self._vllm[gone]

    def _refresh_vllm(self, runtime: Runtime, urls: list[str]) -> None:
        """Start a probe round unless one runs or the last is recent (never waited for)."""
        now = time.monotonic()
        client = runtime.aux_client
        if client is None:  # the runtime is not started: nothing to probe with
            return
        if (self._probe is None or self._probe.done()) and now - self._probed >= VLLM_PROBE_S:
            self._probed = now
            self._probe = asyncio.create_task(self._probe_all(client, urls))

    async def document(self, runtime: Runtime) -> dict[str, Any]:
        snapshot = runtime.pool.snapshot()
        upstreams = snapshot["upstreams"]
        vllm_urls = sorted({u["vllm"] for u in upstreams if u.get("vllm")})
        self._refresh_vllm(runtime, vllm_urls)
        waiting = sorted(
            runtime.pool.queue.breakdown().items(), key=lambda kv: (kv[0][0], kv[0][1] or "")
        )
        jobs = None
        if runtime.jobs is not None:
            store = runtime.jobs[0]
            with contextlib.suppress(StoreUnavailable):  # the page shows no job store
                jobs = await store.stats()
        return {
            "time": time.time(),
            "mode": snapshot["mode"],
            "panic": snapshot["panic"],
            "queue": {
                "depth": snapshot["queue_depth"],
                "waiting": [
                    {"priority": p, "token": t or "-", "count": n}
                    for (p, t), n in waiting
                ],
            },
            "upstreams": [
                {
                    key: u.get(key)
                    for key in (
                        "url", "host", "card", "vllm", "container", "state", "in_flight",
                        "latency_ms", "requests", "ejections", "last_error",
                    )
                }
                for u in upstreams
            ],
            "vllm": {url: self._vllm.get(url, {"state": "unknown"}) for url in vllm_urls},
            "jobs": jobs,
            "gateway": process_stats(gateway_pids(runtime)),
        }  # fmt: skip
