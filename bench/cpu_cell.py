"""One measured cell of ``bench.proxy_cpu``: wrk against one route, CPU per request over a window.

Usage::

    ep = Endpoint("gateway", "ocr", gateway_port, gateway_pid)
    cell = run_cell(ep, body, lua_script, 32, WindowSpec(), None, fleet_pid, fleet_admin_port)
    cell["cpu_ms"], cell["sys_ms"], cell["rps"], cell["p99_ms"]   # or cell["failed"]: why not

The proxy's process-tree CPU (``bench.procstat``) and the requests that reached the fleet (its
``/_admin/stats`` counter) are read at both ends of a window inside wrk's run, in its steady
state (``plan_window``); wrk's CPU and the fleet's are measured apart, never charged to the proxy.
"""

from __future__ import annotations

import json
import math
import resource
import time
from dataclasses import dataclass, replace
from pathlib import Path

from bench.procstat import TreeMeter, busy_cores, machine_busy, tree_cpu_s, tree_times
from bench.proxies import call_json
from bench.wrk import WrkRun

ROUTES = {"pass": "/layout-parsing", "ocr": "/ocr"}


@dataclass(frozen=True)
class WindowSpec:
    """How each cell's wrk run is cut: a lead-in, the measured window, a tail (``plan_window``)."""

    lead_s: float = 0.3
    measure_s: float = 1.5
    tail_s: float = 0.2
    min_done: int = 20  # a window long enough for this many answers
    max_seconds: int = 12  # the longest wrk run
    min_window: int = 10  # fewer requests in a window (or fewer than connections): run again
    retry_seconds: int = 30  # the longest wrk run of that second try
    # other processes busier than this during a window: measure again, keep the quietest
    max_other_cores: float = 0.25
    busy_retries: int = 2


@dataclass
class Endpoint:
    """Where wrk sends one route's requests, and whose CPU that costs."""

    key: str  # "direct", "nginx", "nginx-auto", "gateway"
    route: str  # key of ROUTES
    port: int
    meter_pid: int | None  # the proxy tree's root; None for the fleet itself


def fleet_received(admin_port: int) -> int:
    """``/layout-parsing`` requests the fleet has received so far, over all instances."""
    status, body = call_json(admin_port, "/_admin/stats", b"{}")
    if status != 200:
        raise RuntimeError(f"fleet stats: HTTP {status}")
    return sum(i["received"] for i in body["instances"])


def check_answer(ep: Endpoint, body: bytes) -> str:
    """Why one request through ``ep`` is not answered as the protocol says; "" if it is."""
    status, ans = call_json(ep.port, ROUTES[ep.route], body)
    if status != 200:
        return f"HTTP {status}: {json.dumps(ans)[:300]}"
    if ep.route == "ocr" and not isinstance(ans.get("text"), str):
        return f"no text in the /ocr answer: {json.dumps(ans)[:300]}"
    if ep.route == "pass" and ans.get("errorCode") != 0:
        return f"not a PaddleX success envelope: {json.dumps(ans)[:300]}"
    return ""


def settle(meter: TreeMeter, quiet_s: float = 0.15, cap_s: float = 5.0) -> float:
    """Wait until the tree has used no CPU for ``quiet_s`` (it answered what it had in flight)."""
    t0 = time.monotonic()
    last, since = meter.read(), time.monotonic()
    while time.monotonic() - t0 < cap_s:
        time.sleep(0.05)
        now = meter.read()
        if now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= quiet_s:
            break
    return round(time.monotonic() - t0, 2)


def _children_cpu_s() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


@dataclass(frozen=True)
class Window:
    """When, in seconds from wrk's start, the measured window opens and closes; wrk's length."""

    start_s: float
    end_s: float
    wrk_s: int


def plan_window(spec: WindowSpec, conc: int, rps: float) -> Window:
    """The window of a cell whose rate is about ``rps``.

    A *round* is the time each of the ``conc`` connections takes to get one answer. The window
    opens after a round (at least ``lead_s``), when every connection is busy, and lasts two
    rounds, ``min_done`` answers and ``measure_s``, whichever is longest, within
    ``max_seconds`` of wrk's whole run. In that steady state about as many requests are in flight
    at both ends, so the CPU of requests cut by an end is not charged to others.
    """
    rps = max(rps, 1e-3)
    round_s = conc / rps
    lead = max(spec.lead_s, round_s)
    measure = max(spec.measure_s, spec.min_done / rps, 2 * round_s)
    budget = spec.max_seconds - spec.tail_s
    if lead + measure > budget:
        lead = min(lead, budget / 3)
        measure = budget - lead
    wrk_s = max(1, math.ceil(lead + measure + spec.tail_s - 1e-9))
    return Window(round(lead, 3), round(wrk_s - spec.tail_s, 3), wrk_s)


@dataclass(frozen=True)
class Sample:
    t: float
    forwarded: int
    proxy_cpu_s: float
    proxy_sys_s: float
    fleet_cpu_s: float
    machine: tuple[float, float]


def sample(admin: int, proxy_pid: int | None, fleet_pid: int) -> Sample:
    proxy_cpu_s, proxy_sys_s = tree_times(proxy_pid) if proxy_pid else (0.0, 0.0)
    return Sample(
        time.monotonic(),
        fleet_received(admin),
        proxy_cpu_s,
        proxy_sys_s,
        tree_cpu_s(fleet_pid),
        machine_busy(),
    )


def _sleep_until(t: float) -> None:
    time.sleep(max(0.0, t - time.monotonic()))


def run_cell(
    ep: Endpoint,
    body: bytes,
    script: Path,
    conc: int,
    spec: WindowSpec,
    rps_guess: float | None,
    fleet_pid: int,
    admin: int,
) -> dict:
    """One cell against ``ep``: CPU per request of the proxy and the fleet over a window.

    ``rps_guess`` (the same cell's rate at the previous concurrency), else the rate of the one
    checked request that goes first, plans the window (``plan_window``). A window that saw fewer
    than ``spec.min_window`` requests (at least one per connection) is too short to trust, say on
    a machine busy with other work: the cell runs once more, planned from the rate it saw, for
    up to ``spec.retry_seconds``; if that is short too, the cell is reported failed. A window
    in which other processes used more than ``spec.max_other_cores`` (CPU per request grows
    when they contend for the cores and caches) is measured again, up to ``spec.busy_retries``
    times, and the quietest window is kept (``busy_windows``: the others' load of each try).
    """
    t = time.monotonic()
    why = check_answer(ep, body)
    if why:
        return {"failed": why}
    need = max(spec.min_window, conc)
    win = plan_window(spec, conc, rps_guess or 1 / max(1e-6, time.monotonic() - t))
    out = measure_window(ep, script, conc, win, fleet_pid, admin)
    if out["forwarded"] < need:
        seen = max(out["rps"], out["wrk_rps"], 0.05)
        retry = replace(spec, max_seconds=spec.retry_seconds)
        first = {k: out[k] for k in ("forwarded", "window_s", "rps")}
        out = measure_window(ep, script, conc, plan_window(retry, conc, seen), fleet_pid, admin)
        out["first_try"] = first
    tries = [out]
    while tries[-1]["other_cores"] > spec.max_other_cores and len(tries) <= spec.busy_retries:
        tries.append(measure_window(ep, script, conc, win, fleet_pid, admin))
    if len(tries) > 1:
        busy = [t["other_cores"] for t in tries]
        out = min((t for t in tries if t["forwarded"] >= need), key=lambda t: t["other_cores"],
                  default=out)  # fmt: skip
        out["busy_windows"] = busy
    n = out["forwarded"]
    fleet_cpu_s, sys_s = out.pop("fleet_cpu_s"), out.pop("sys_s")
    if n < need:
        out["failed"] = (
            f"{n} requests reached the upstreams in the window, fewer than {need}: the machine "
            "was too busy for this cell"
        )
        return out
    if ep.meter_pid:
        out["cpu_ms"] = round(out["cpu_s"] / n * 1000, 4)
        out["sys_ms"] = round(sys_s / n * 1000, 4)  # of cpu_ms: in the kernel
    out["fleet_cpu_ms"] = round(fleet_cpu_s / n * 1000, 4)
    return out


def measure_window(
    ep: Endpoint, script: Path, conc: int, win: Window, fleet_pid: int, admin: int
) -> dict:
    """One wrk run; the proxy's and the fleet's CPU and the requests forwarded in ``win``."""
    wrk0 = _children_cpu_s()
    run = WrkRun(f"http://127.0.0.1:{ep.port}", script, conc, win.wrk_s).start()
    t0 = time.monotonic()
    _sleep_until(t0 + win.start_s)
    a = sample(admin, ep.meter_pid, fleet_pid)
    _sleep_until(t0 + win.end_s)
    b = sample(admin, ep.meter_pid, fleet_pid)
    res = run.result()
    wrk_cpu = _children_cpu_s() - wrk0  # wrk is the only child reaped meanwhile
    if ep.meter_pid:  # what it still had in flight must not run into the next cell
        settle(TreeMeter(ep.meter_pid))
    dt_s = b.t - a.t
    proxy_cpu, fleet_cpu = b.proxy_cpu_s - a.proxy_cpu_s, b.fleet_cpu_s - a.fleet_cpu_s
    machine_cores = busy_cores(a.machine, b.machine)
    wrk_cores = wrk_cpu / max(1e-6, time.monotonic() - t0)
    other = machine_cores - (proxy_cpu + fleet_cpu) / dt_s - wrk_cores
    return {
        **{k: v for k, v in res.to_dict().items() if k != "rps"},
        "wrk_rps": res.rps,
        "wrk_s": win.wrk_s,
        "window_s": [win.start_s, win.end_s],
        "forwarded": b.forwarded - a.forwarded,
        "rps": round((b.forwarded - a.forwarded) / dt_s, 1),
        "cpu_s": round(proxy_cpu, 3),
        "cpu_ms": None,
        "sys_s": b.proxy_sys_s - a.proxy_sys_s,
        "fleet_cpu_s": fleet_cpu,
        "fleet_cpu_ms": None,
        "wrk_cpu_ms": round(wrk_cpu / max(1, res.requests) * 1000, 4),
        "machine_cores": round(machine_cores, 2),
        "other_cores": round(max(0.0, other), 2),
    }
