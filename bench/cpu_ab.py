"""Gateway variants side by side, in interleaved rounds of one run: CPU per request, throughput.

On a shared machine CPU time per request drifts by tens of percent within minutes (other
people's work contends for the cores and caches; nginx itself shows it), so two variants
measured minutes apart cannot be compared. Here every variant runs at once against the same
zero-latency fleet, and wrk drives each in turn, round after round: the median and the best
round of each, and each variant's median against the first one's. A variant is a revision of
``gateway/`` with a worker count.

    python -m bench.cpu_ab --revs 8e31c30,HEAD --routes pass,ocr --sizes "tiny,1 MB"
    python -m bench.cpu_ab --revs HEAD, --workers 2     # '' (a trailing comma): the working tree
    python -m bench.cpu_ab --revs HEAD --workers 1,2 --fleet canned -c 32 --routes ocr \\
        --sizes "tiny,1 MB" --out bench/results/workers-scaling.json   # what workers buy
    python -m bench.cpu_ab --revs HEAD --workers 1,2 --fleet canned -c 32 --sizes tiny \
        --worker-cores 0.8      # each worker capped at 0.8 of a core: cores of its own

CPU is the variant's whole process tree (``bench.procstat``) over wrk's run, divided by the
requests wrk saw answered (each is one upstream request on ``pass``, two on ``ocr``).
Throughput is wrk's answers per second. ``--fleet canned`` puts the gateway in front of one
nginx worker answering every upstream port with a fixed PaddleX answer (``bench.proxies``), so
that on a small machine the fleet takes as little CPU from the gateway as it can; ``sim`` is the
simulated fleet (``bench.fleet``), which reads every document. The cores the others used (wrk,
the fleet, everything else on the machine) are measured in each run and reported, since they
bound what a second worker can add on a machine whose cores they share; ``--worker-cores``
caps each worker (``bench.cpucap``) so that they no longer do.
"""

from __future__ import annotations

import argparse
import itertools
import multiprocessing
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from bench.common import comma_list, write_json
from bench.cpu_cell import ROUTES
from bench.cpucap import MIN_CORES, CpuCapError, CpuCaps, machine_cores
from bench.fleet import layout_answer
from bench.procs import QUIET, gateway_config, start_fleet
from bench.procstat import MachineMeter, TreeMeter, tree
from bench.proxies import (
    ProxyProc,
    gateway_revision,
    snapshot_rev,
    start_canned_fleet,
    start_gateway,
)
from bench.proxy_cpu import SIZES, bodies, document
from bench.report import Table
from bench.workload import FleetSpec
from bench.wrk import run_wrk, write_script
from doubles.paddlex import healthy, restructure_result, success
from gateway.wire import paddlex_routes


@dataclass(frozen=True)
class Variant:
    """One gateway to measure: ``gateway/`` of ``rev`` ('' the working tree), ``workers``."""

    rev: str
    workers: int

    def name(self, many_workers: bool) -> str:
        base = self.rev or "worktree"
        return f"{base} x{self.workers}" if many_workers else base


def canned_answers() -> dict[str, dict]:
    """What every upstream of the canned fleet answers, by path: one 8 x 8 page of text."""
    layout = layout_answer("bench document 0 served by the canned fleet", 1, 1, "bench")
    pages = [{**p, "markdownImages": {}} for p in layout["result"]["layoutParsingResults"]]
    return {
        paddlex_routes.LAYOUT_PARSING: layout,
        paddlex_routes.RESTRUCTURE_PAGES: success(restructure_result(pages, True), "bench"),
        paddlex_routes.HEALTH: healthy("bench"),
    }


def _spin(n: int) -> float:
    t = time.perf_counter()
    s = 0
    for i in range(n):
        s += i * i
    return time.perf_counter() - t


def parallel_speedup(n: int = 4_000_000) -> float:
    """How much faster two CPU-bound processes do two loops than one does one: 2.0 is ideal."""
    _spin(n // 10)
    one = _spin(n)
    with multiprocessing.get_context("spawn").Pool(2) as pool:
        pool.map(_spin, [n // 10, n // 10])  # started and warm
        t = time.perf_counter()
        pool.map(_spin, [n, n])
        two = time.perf_counter() - t
    return round(2 * one / two, 2)


def _start_fleet(kind: str, workdir: Path) -> tuple[list[str], int, object]:
    """(upstream URLs, the fleet's pid, a handle with ``stop()``) of the ``kind`` fleet."""
    if kind == "canned":
        ng: ProxyProc = start_canned_fleet(48, workdir / "canned-fleet", canned_answers())
        return [f"http://127.0.0.1:{p}" for p in ng.ports], ng.pid, ng
    fleet = start_fleet(FleetSpec(n=48, slow_factors=(), zero_latency=True))
    return fleet.urls, fleet.proc.pid, fleet


def _run_once(gw: ProxyProc, script: Path, args: argparse.Namespace, fleet_pid: int) -> dict:
    """One wrk run against ``gw``: CPU per answer, answers per second, the others' cores."""
    gateway, fleet, machine = TreeMeter(gw.pid), TreeMeter(fleet_pid), MachineMeter()
    t0 = time.monotonic()
    res = run_wrk(f"http://127.0.0.1:{gw.port}", script, args.c, args.s)
    elapsed = time.monotonic() - t0
    gw_s, fleet_s, busy = gateway.read(), fleet.read(), machine.read()
    return {
        "ms": gw_s / max(1, res.requests) * 1000,
        "rps": res.rps,
        "gateway_cores": gw_s / elapsed,
        "fleet_cores": fleet_s / elapsed,
        "other_cores": max(0.0, busy - (gw_s + fleet_s) / elapsed),
        "errors": res.errors,
    }


def measure(args: argparse.Namespace) -> list[dict]:
    """Every (route, size) cell: per variant the figures of each round."""
    workdir = Path(tempfile.mkdtemp(prefix="bench-cpu-ab-"))
    urls, fleet_pid, fleet = _start_fleet(args.fleet, workdir)
    cfg = gateway_config(urls, "queue", QUIET)
    many = len(args.workers) > 1
    gateways: dict[str, ProxyProc] = {}
    caps = CpuCaps() if args.worker_cores else None
    capped: dict[str, list[int]] = {}
    try:
        srcs = {rev: snapshot_rev(workdir / (rev or "worktree"), rev) for rev in args.revs}
        for rev, workers in itertools.product(args.revs, args.workers):
            name = Variant(rev, workers).name(many)
            folder = workdir / f"gw-{name.replace(' ', '-')}"
            gateways[name] = start_gateway(cfg, folder, srcs[rev], ["--workers", str(workers)])
            if caps is not None:
                capped[name] = worker_pids(gateways[name].pid, workers)
                for pid in capped[name]:
                    caps.cap(pid, args.worker_cores)
        cells = []
        for size in args.sizes:
            routes = bodies(document(size))
            for route in args.routes:
                body = workdir / f"{route}-{size.replace(' ', '')}.json"
                body.write_bytes(routes[route])
                script = write_script(body.with_suffix(".lua"), body, ROUTES[route])
                rounds: dict[str, list[dict]] = {name: [] for name in gateways}
                order = list(gateways.items())
                for k in range(args.rounds):
                    for name, gw in order if k % 2 == 0 else reversed(order):
                        rounds[name].append(_run_once(gw, script, args, fleet_pid))
                        if (
                            name in capped
                            and worker_pids(gw.pid, len(capped[name])) != capped[name]
                        ):
                            raise SystemExit(f"{name}: a worker was restarted, out of its cap")
                cells.append({"route": route, "size": size, "rounds": rounds})
        return cells
    finally:
        for gw in gateways.values():
            gw.stop()
        if caps is not None:
            caps.close()
        fleet.stop()


def worker_pids(gateway_pid: int, workers: int) -> list[int]:
    """The processes that serve: the gateway itself with one worker, else its forked workers
    (the supervisor only waits)."""
    if workers == 1:
        return [gateway_pid]
    found = sorted(p.pid for p in tree(gateway_pid) if p.ppid() == gateway_pid)
    if len(found) != workers:
        raise SystemExit(f"gateway {gateway_pid}: {len(found)} worker processes, not {workers}")
    return found


def _median(runs: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in runs)


def bound_rps(
    workers: int, gateway_ms: float, others_ms: float, cores: float, worker_cores: float = 1.0
) -> float:
    """The most answers/s a gateway of ``workers`` processes can give on this machine, from
    what one answer costs it (``gateway_ms`` of CPU) and everything else (``others_ms``: wrk,
    the fleet, the kernel on their side): each worker has at most ``worker_cores`` (one core,
    or its cap), and all of them and the others share ``cores``.

    >>> round(bound_rps(1, 0.2, 0.05, 2))   # one worker: its own core is the limit
    5000
    >>> round(bound_rps(2, 0.2, 0.05, 2))   # two: the machine, shared with the others
    8000
    """
    own = workers * worker_cores / gateway_ms
    return min(own, cores / (gateway_ms + others_ms)) * 1000


def report(
    cells: list[dict],
    names: list[str],
    workers: dict[str, int] | None = None,
    worker_cores: float = 1.0,
) -> str:
    """A markdown table: per variant the median (best) ms per answer, the median answers/s and
    the median cores the gateway and the others used; each variant against the first: ms,
    answers/s, and answers/s per core the gateway had (1.00: it scales with the cores it gets).

    With ``workers`` (variant -> its worker count), two columns per variant more: the bound on
    answers/s this machine sets for it (:func:`bound_rps`, from the run's own costs) and the
    ratio of the bounds against the first variant: what any gateway of those costs could show
    (``worker_cores``: each worker's cap, ``--worker-cores``).
    """
    cores_here = float(machine_cores())
    head = ["route", "document"]
    head += [f"`{n}` ms median (best)" for n in names] + [f"`{n}` answers/s" for n in names]
    head += [f"`{n}` cores: gateway, others" for n in names]
    if workers:
        head += [f"`{n}` bound answers/s (reached)" for n in names]
    for n in names[1:]:
        head += [f"`{n}` / `{names[0]}`: {what}" for what in ("ms", "answers/s", "per core")]
        if workers:
            head.append(f"`{n}` / `{names[0]}`: bound")
    table = Table("A/B", tuple(head), ("left",) * len(head))
    for cell in cells:
        runs = cell["rounds"]
        ms = {n: _median(runs[n], "ms") for n in names}
        rps = {n: _median(runs[n], "rps") for n in names}
        cores = {n: _median(runs[n], "gateway_cores") for n in names}
        others = {
            n: statistics.median(r["fleet_cores"] + r["other_cores"] for r in runs[n])
            for n in names
        }
        bound = {
            n: bound_rps(workers[n], ms[n], others[n] / rps[n] * 1000, cores_here, worker_cores)
            for n in (names if workers else ())
        }
        row = [cell["route"], cell["size"]]
        row += [f"{ms[n]:.3f} ({min(r['ms'] for r in runs[n]):.3f})" for n in names]
        row += [f"{rps[n]:,.0f}" for n in names]
        row += [f"{cores[n]:.2f}, {others[n]:.2f}" for n in names]
        row += [f"{bound[n]:,.0f} ({rps[n] / bound[n]:.2f})" for n in bound]
        first = names[0]
        for n in names[1:]:
            per_core = (rps[n] / cores[n]) / (rps[first] / cores[first])
            row += [f"{ms[n] / ms[first]:.2f}", f"**{rps[n] / rps[first]:.2f}**", f"{per_core:.2f}"]
            if workers:
                row.append(f"{bound[n] / bound[first]:.2f}")
        table.add(*row)
    return table.markdown()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--revs", type=lambda s: s.split(","), default=["HEAD", ""])  # '': tree
    parser.add_argument("--routes", type=comma_list(choices=ROUTES), default=["pass", "ocr"])
    parser.add_argument("--sizes", type=comma_list(choices=SIZES), default=["tiny", "1 MB"])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--workers", type=comma_list(int, least=1), default=[1], help="e.g. 1,2")
    parser.add_argument("--fleet", choices=("sim", "canned"), default="sim")
    parser.add_argument("-c", type=int, default=1, help="wrk connections")
    parser.add_argument("-s", type=int, default=2, help="seconds per wrk run")
    parser.add_argument("--out", type=Path, help="write the rounds as JSON here")
    parser.add_argument(
        "--worker-cores",
        type=float,
        metavar="X",
        help="cap every gateway worker at X cores (a CPU cgroup each; root): a host whose "
        "cores are the gateway's own, the rest left to wrk and the fleet (bench.cpucap)",
    )
    args = parser.parse_args(argv)
    if args.worker_cores is not None:
        if not MIN_CORES <= args.worker_cores <= 1:
            parser.error(
                f"--worker-cores: {args.worker_cores:g}; a share of a core, {MIN_CORES} to 1"
            )
        try:
            CpuCaps().check()
        except CpuCapError as exc:
            parser.error(f"--worker-cores: {exc}")
    speedup = parallel_speedup()
    cells = measure(args)
    after = parallel_speedup()
    many = len(args.workers) > 1
    variants = [Variant(r, w) for r, w in itertools.product(args.revs, args.workers)]
    names = [v.name(many) for v in variants]
    workers = {v.name(many): v.workers for v in variants} if many else None
    print(report(cells, names, workers, args.worker_cores or 1.0))
    print(f"\ntwo CPU-bound processes against one, before and after: {speedup} and {after}")
    if args.out:
        meta = {
            "argv": sys.argv[1:] if argv is None else argv,
            "fleet": args.fleet,
            "c": args.c,
            "seconds": args.s,
            "worker_cores": args.worker_cores,
        }
        meta["parallel_speedup"] = [speedup, after]
        meta["gateways"] = {rev or "worktree": gateway_revision(rev) for rev in args.revs}
        meta["when"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        write_json(args.out, {"meta": meta, "cells": cells})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
