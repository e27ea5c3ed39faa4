"""Open-loop (Poisson, never slowed by slow responses) and closed-loop load generation + stats.

Latency is measured from a request's *scheduled* send time, so a late send (the generator falling
behind) counts against the system, not hidden (no coordinated omission).  The generator reports
its own worst scheduling lag so a CPU-starved run is visible.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import re
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from bench.minihttp import ClientError, MiniClient
from bench.workload import Request, Workload, png_b64


@dataclass
class Outcome:
    ok: bool
    status: int = 0  # HTTP status, 0 for a transport error
    error: str = ""
    attempts: int = 1


@dataclass
class Sample:
    id: int
    t: float  # scheduled send time (s from start)
    latency: float  # s; for unfinished requests the time waited until the cut-off (a lower bound)
    ok: bool
    finished: bool
    status: int = 0
    error: str = ""
    attempts: int = 1
    done_at: float = 0.0  # completion time (s from start)


Sender = Callable[[Request], Awaitable[Outcome]]


@dataclass
class RunResult:
    samples: list[Sample]
    max_lag_s: float  # the latest the generator sent a request, behind its schedule


async def run_open_loop(
    send: Sender, workload: Workload, drain_s: float, on_time: dict[float, Callable] | None = None
) -> RunResult:
    """Fire every request at its scheduled time as its own task; wait at most ``drain_s`` after the
    last arrival; requests still open then are cut off and reported as unfinished."""
    loop = asyncio.get_running_loop()
    samples: list[Sample] = []
    t0 = loop.time() + 0.05
    max_lag = 0.0
    tasks: set[asyncio.Task] = set()
    pending: dict[int, Request] = {}

    async def one(req: Request) -> None:
        pending[req.id] = req
        try:
            out = await send(req)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a bug in a sender must not stop the run
            out = Outcome(False, 0, f"sender: {exc!r}")
        now = loop.time() - t0
        pending.pop(req.id, None)
        samples.append(
            Sample(
                req.id, req.t, now - req.t, out.ok, True, out.status, out.error, out.attempts, now
            )
        )

    events = sorted((on_time or {}).items())

    async def fire_events() -> None:
        for at, fn in events:
            await asyncio.sleep(max(0.0, t0 + at - loop.time()))
            r = fn()
            if asyncio.iscoroutine(r):
                await r

    ev_task = asyncio.create_task(fire_events()) if events else None
    for req in workload.requests:
        d = t0 + req.t - loop.time()
        if d > 0:
            await asyncio.sleep(d)
        else:
            max_lag = max(max_lag, -d)
        task = asyncio.create_task(one(req))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
    deadline = t0 + workload.duration_s + drain_s
    while tasks and loop.time() < deadline:
        await asyncio.wait(set(tasks), timeout=max(0.0, deadline - loop.time()))
    cut = loop.time() - t0
    for task in list(tasks):
        task.cancel()
    if tasks:
        await asyncio.gather(*tasks, return_exceptions=True)
    for req in pending.values():
        samples.append(Sample(req.id, req.t, cut - req.t, False, False, 0, "unfinished", 1, cut))
    if ev_task is not None:
        ev_task.cancel()
    samples.sort(key=lambda s: s.id)
    return RunResult(samples, max_lag)


# ---------------------------------------------------------------------------------- senders


def ocr_bodies(workload: Workload) -> dict[int, bytes]:
    """Pre-built ``POST /ocr`` bodies (so the generator spends no CPU on them during the run)."""
    return {r.id: json.dumps({"base64": png_b64(r.work, r.id)}).encode() for r in workload.requests}


def layout_bodies(workload: Workload) -> dict[int, bytes]:
    return {
        r.id: json.dumps({"file": png_b64(r.work, r.id), "fileType": 1}).encode()
        for r in workload.requests
    }


def gateway_sender(client: MiniClient, bodies: dict[int, bytes], path: str = "/ocr") -> Sender:
    async def send(req: Request) -> Outcome:
        try:
            status, _, data = await client.request("POST", path, bodies[req.id])
        except (ClientError, OSError) as exc:
            return Outcome(False, 0, type(exc).__name__ + ": " + str(exc)[:80])
        if status != 200:
            code = ""
            with contextlib.suppress(ValueError, AttributeError, TypeError):
                err = json.loads(data).get("error", {})
                code = f"{err.get('code', '')}: {str(err.get('message', ''))[:160]}"
            code = re.sub(r"https?://[\w.\-]+:\d+", "<upstream>", code)
            code = re.sub(r"\d+(\.\d+)?", "N", code)  # group messages that differ by counts
            return Outcome(False, status, f"HTTP {status} {code}".strip())
        attempts = 1
        try:
            body = json.loads(data)
            attempts = int(body.get("attempts", 1) or 1)
            if "text" not in body and "result" not in body:
                return Outcome(False, status, "200 without text/result")
        except (ValueError, TypeError):
            return Outcome(False, status, "invalid JSON")
        return Outcome(True, status, "", attempts)

    return send


# ---------------------------------------------------------------------------------- stats


def percentile(sorted_vals: list[float], q: float) -> float:
    if not sorted_vals:
        return math.nan
    k = max(0, min(len(sorted_vals) - 1, math.ceil(q / 100.0 * len(sorted_vals)) - 1))
    return sorted_vals[k]


def summarize(samples: list[Sample], warmup_s: float, duration_s: float, offered: float) -> dict:
    """Stats over requests *sent* in [warmup_s, duration_s).

    Latency percentiles include unfinished requests at their cut-off time (lower bounds, flagged
    ``censored``) so a policy cannot look better by never answering; fast errors are excluded from
    the percentiles and counted in ``errors``.
    """
    win = [s for s in samples if warmup_s <= s.t < duration_s]
    lat = sorted(
        [(s.latency, not s.finished) for s in win if s.ok or not s.finished], key=lambda x: x[0]
    )
    vals = [v for v, _ in lat]
    out: dict = {"sent": len(win), "offered_rps": round(offered, 2)}
    for q in (50, 95, 99):
        v = percentile(vals, q)
        k = max(0, min(len(lat) - 1, math.ceil(q / 100.0 * len(lat)) - 1)) if lat else 0
        out[f"p{q}"] = None if math.isnan(v) else round(v, 4)
        # a cut-off raises nothing but its own value, so the true quantile is >= v, and equal
        # unless a cut-off sample sits at or below rank k
        out[f"p{q}_censored"] = any(c for _, c in lat[: k + 1])
    # completion rate while arrivals run: OK answers (to any request) finishing in the window
    ok_done = [s for s in samples if s.ok and warmup_s <= s.done_at < duration_s]
    span = max(1e-9, duration_s - warmup_s)
    out["throughput_rps"] = round(len(ok_done) / span, 2)
    out["ok"] = sum(1 for s in win if s.ok)
    out["errors"] = sum(1 for s in win if s.finished and not s.ok)
    out["unfinished"] = sum(1 for s in win if not s.finished)
    out["error_kinds"] = dict(Counter(s.error for s in win if not s.ok).most_common(4))
    out["retried"] = sum(1 for s in win if s.attempts > 1)
    return out


# ---------------------------------------------------------------------------------- closed loop


async def run_closed_loop(
    send: Callable[[int], Awaitable[Outcome]],
    concurrency: int,
    duration_s: float,
    warmup_s: float = 1.0,
) -> dict:
    """``concurrency`` workers each send back to back for ``duration_s``; stats after warm-up."""
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    lat: list[float] = []
    errors = 0
    counter = 0

    async def worker() -> None:
        nonlocal errors, counter
        while loop.time() - t0 < duration_s:
            counter += 1
            s = loop.time()
            out = await send(counter)
            e = loop.time()
            if s - t0 >= warmup_s and e - t0 <= duration_s:
                if out.ok:
                    lat.append(e - s)
                else:
                    errors += 1

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    lat.sort()
    span = duration_s - warmup_s
    return {
        "concurrency": concurrency,
        "rps": round(len(lat) / span, 1),
        **latency_ms(lat),
        "errors": errors,
    }


def latency_ms(lat: list[float]) -> dict:
    """How many latencies (``lat``, sorted, in s) and their p50 and p99 in ms (None if none)."""
    pcts = {f"p{q}_ms": round(percentile(lat, q) * 1000, 3) if lat else None for q in (50, 99)}
    return {"n": len(lat), **pcts}
