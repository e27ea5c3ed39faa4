"""The reference: an ideal dispatcher (one FIFO queue handing each request to an idle instance).

Two forms, over the same seeded workload:

- ``simulate_ideal`` - an exact discrete-event replay (the reference the targets use).  It knows
  every instance's state and speed at every instant, has zero dispatch/network cost and no timer
  jitter, so it is a strict lower bound for any real dispatcher on this workload.
  ``pick="fastest"`` gives an arriving request the fastest idle instance (perfect knowledge of
  speeds); ``pick="longest_idle"`` is a speed-blind central queue (what a gateway can do).
- ``LiveIdeal`` - the same policy as a real in-process dispatcher sending ``/layout-parsing``
  straight to the simulated fleet over loopback, to show what real HTTP and timers add to the
  replay.
"""

from __future__ import annotations

import asyncio
import heapq
import json
from collections import deque

from bench.loadgen import Outcome, Sample
from bench.minihttp import ClientError, MiniClient
from bench.workload import Request, Workload


def simulate_ideal(
    workload: Workload,
    means: list[float],
    pick: str = "fastest",
    served_by: dict[int, int] | None = None,
) -> list[Sample]:
    """Replay ``workload`` through a central FIFO queue; ``served_by`` (if given) receives
    request id -> instance index."""
    reqs = workload.requests

    def key(i: int, now: float) -> tuple[float, int]:
        """The order idle instances are taken in: the fastest, or the one idle the longest."""
        return (means[i], i) if pick == "fastest" else (now, i)

    idle = [key(i, 0.0) for i in range(len(means))]
    heapq.heapify(idle)
    completions: list[tuple[float, int, int]] = []  # (time, index, request id)
    queue: deque[Request] = deque()
    out: list[Sample] = []

    def start(i: int, r: Request, now: float) -> None:
        done = now + r.work * means[i]
        if served_by is not None:
            served_by[r.id] = i
        heapq.heappush(completions, (done, i, r.id))
        out.append(Sample(r.id, r.t, done - r.t, True, True, 200, "", 1, done))

    k = 0
    while k < len(reqs) or completions:
        next_arr = reqs[k].t if k < len(reqs) else float("inf")
        if completions and completions[0][0] <= next_arr:
            now, i, _ = heapq.heappop(completions)
            if queue:
                start(i, queue.popleft(), now)
            else:
                heapq.heappush(idle, key(i, now))
        else:
            r = reqs[k]
            k += 1
            if idle:
                start(heapq.heappop(idle)[1], r, r.t)
            else:
                queue.append(r)
    out.sort(key=lambda s: s.id)
    return out


class LiveIdeal:
    """Real central-queue dispatcher with exact knowledge (it owns every instance's only slot)."""

    def __init__(self, ports: list[int], means: list[float], bodies: dict[int, bytes]):
        self.clients = [MiniClient("127.0.0.1", p) for p in ports]
        self.means = means
        self.bodies = bodies
        self.idle = [(m, i) for i, m in enumerate(means)]
        heapq.heapify(self.idle)
        self.queue: deque[tuple[Request, asyncio.Future]] = deque()
        self.tasks: set[asyncio.Task] = set()  # strong references: the loop keeps only weak ones

    async def send(self, req: Request) -> Outcome:
        fut = asyncio.get_running_loop().create_future()
        if self.idle:
            self._start(heapq.heappop(self.idle)[1], req, fut)
        else:
            self.queue.append((req, fut))
        return await fut

    def _start(self, i: int, req: Request, fut: asyncio.Future) -> None:
        task = asyncio.create_task(self._run(i, req, fut))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _run(self, i: int, req: Request, fut: asyncio.Future) -> None:
        try:
            status, _, data = await self.clients[i].request(
                "POST", "/layout-parsing", self.bodies[req.id]
            )
            ok = status == 200 and json.loads(data).get("errorCode") == 0
            out = Outcome(ok, status, "" if ok else f"HTTP {status}")
        except (ClientError, OSError, ValueError) as exc:
            out = Outcome(False, 0, repr(exc)[:80])
        if not fut.done():
            fut.set_result(out)
        if self.queue:
            nreq, nfut = self.queue.popleft()
            self._start(i, nreq, nfut)
        else:
            heapq.heappush(self.idle, (self.means[i], i))

    async def close(self) -> None:
        for c in self.clients:
            await c.close()
