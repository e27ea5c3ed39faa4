"""Instructions per request of gateway revisions, counted by valgrind: the gateway's CPU cost
per request in a unit that the rest of the machine does not disturb.

CPU time per request drifts by tens of percent on a shared machine (``bench.cpu_ab`` measures
it in interleaved rounds and still sees +-5 % between two runs of one revision); the number of
instructions a process executes for the same requests does not. Each variant's gateway (one
worker unless ``--workers``, ``PYTHONHASHSEED`` fixed) runs under cachegrind with its cache
simulation off: only instructions are counted. Every run gets the same warm-up (20 requests of
each route and size), then serves ``n`` requests of one cell; the count per request is the
difference to a run that serves none after the warm-up, over ``n`` (start-up, warm-up and
shut-down cancel out). Two runs of one revision differ by 0.04-0.5 % (1.3 % once, with 600
tiny requests a cell; ``--revs HEAD,HEAD`` shows it).

    python -m bench.instructions --revs 36addbe,HEAD              # pass and ocr, tiny and 1 MB
    python -m bench.instructions --revs 36addbe, --sizes tiny     # '': the working tree
    python -m bench.instructions --revs 36addbe,HEAD --workers 2  # every process counted

Needs ``valgrind``; the fleet is the zero-latency sim fleet of ``bench.cpu_ab``.
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import re
import shutil
import sys
import tempfile
from pathlib import Path

from bench import procs
from bench.common import comma_list, log, run_meta, write_json
from bench.cpu_cell import ROUTES
from bench.proxies import gateway_revision, snapshot_rev
from bench.proxy_cpu import SIZES, bodies, document
from bench.report import Table
from bench.workload import FleetSpec

WARM_UP = 20  # requests of every route and size before anything is counted
REQUESTS = {"tiny": 1500, "1 MB": 120}  # counted requests per cell, by document size


Request = tuple[str, bytes]
"""A route's name (``bench.cpu_cell.ROUTES``) and a body."""


def count(
    src: Path, cfg_path: Path, requests: list[Request], workdir: Path, workers: int = 1
) -> int:
    """Instructions the gateway of ``src`` (all its processes: the supervisor and its
    ``workers``) executes from its start to its exit, having served ``requests`` on one
    kept-alive connection."""
    run = workdir / f"run-{len(list(workdir.glob('run-*')))}"
    run.mkdir()
    out = run / "cachegrind.out"
    port = procs.free_port()
    cmd = ["valgrind", "--tool=cachegrind", "--cache-sim=no", f"--cachegrind-out-file={out}.%p"]
    cmd += [sys.executable, "-m", "gateway", "--config", str(cfg_path), "--workers", str(workers)]
    cmd += ["--host", "127.0.0.1", "--port", str(port)]
    env = {**procs.gateway_env(src), "PYTHONHASHSEED": "0"}
    proc = procs.spawn(cmd, out.with_suffix(".log"), cwd=src, env=env)
    try:
        # Python's start-up under valgrind: about 40 s here
        health = f"http://127.0.0.1:{port}/health"
        asyncio.run(procs.until_healthy(health, proc, 300, "the gateway", out.with_suffix(".log")))
        # http.client sends a request's head and (bytes) body in one write: the gateway reads
        # each request in as many reads every time (httpx writes them apart, and then how
        # often the server reads varies from run to run, and with it the count)
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
        for route, body in requests:
            connection.request("POST", ROUTES[route], body, {"Content-Type": "application/json"})
            answer = connection.getresponse()
            text = answer.read()
            if answer.status != 200:
                raise SystemExit(f"{route}: HTTP {answer.status} {text[:200]!r}")
        connection.close()
    finally:
        procs.stop_group(proc, 300)
    found = [re.search(r"^summary: (\d+)", f.read_text(), re.M) for f in run.glob("*.out.*")]
    if not found or None in found:
        raise SystemExit(f"an instruction count is missing in {run}")
    return sum(int(m.group(1)) for m in found if m is not None)


def variant_names(revs: list[str]) -> list[str]:
    """A name per revision ('' is the working tree); a revision given again is numbered, so
    that one revision measured twice shows the method's own spread.

    >>> variant_names(["36addbe", "", "", ""])
    ['36addbe', 'worktree', 'worktree (2)', 'worktree (3)']
    """
    bases = [rev or "worktree" for rev in revs]
    return [
        name if bases[:i].count(name) == 0 else f"{name} ({bases[:i].count(name) + 1})"
        for i, name in enumerate(bases)
    ]


def measure(args: argparse.Namespace) -> dict:
    """Per revision and cell, the instructions per request."""
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed (Debian: apt-get install valgrind)")
    workdir = Path(tempfile.mkdtemp(prefix="bench-instructions-"))
    fleet = procs.start_fleet(FleetSpec(n=48, slow_factors=(), zero_latency=True))
    cfg_path = workdir / "gateway.json"
    # service times measured under valgrind swing widely, and the speed classes they make
    # come and go between runs, each class costing a pass over every upstream: forgotten at once
    forget = {"load_balance": {"speed_memory_s": 1e-6}}
    cfg = procs.gateway_config(fleet.urls, "queue", procs.QUIET, forget)
    cfg_path.write_text(json.dumps(cfg))
    docs = {size: bodies(document(size)) for size in args.sizes}
    warm = [(route, docs[size][route]) for size in args.sizes for route in args.routes] * WARM_UP
    cells: dict[str, dict[str, float]] = {}
    names = variant_names(args.revs)
    try:
        for rev, name in zip(args.revs, names, strict=True):
            src = snapshot_rev(workdir / name.replace(" ", "-"), rev)
            base = count(src, cfg_path, warm, workdir, args.workers)
            for size in args.sizes:
                for route in args.routes:
                    n = REQUESTS.get(size, 100)
                    requests = warm + [(route, docs[size][route])] * n
                    total = count(src, cfg_path, requests, workdir, args.workers)
                    per = (total - base) / n
                    cells.setdefault(f"{route} {size}", {})[name] = per
                    log(f"{name} {route} {size}: {per:,.0f} instructions a request")
    finally:
        fleet.stop()
    revisions = {name: gateway_revision(rev) for rev, name in zip(args.revs, names, strict=True)}
    meta = run_meta("default", revisions=revisions, workers=args.workers)
    return {"meta": meta, "names": names, "cells": cells}


def report(result: dict) -> str:
    """Instructions per request of each variant, and each against the first."""
    names = result["names"]
    head = ["route, document", *(f"`{n}`" for n in names)]
    head += [f"`{n}` / `{names[0]}`" for n in names[1:]]
    table = Table("instructions per request", tuple(head))
    for cell, per in result["cells"].items():
        row = [cell, *(f"{per[n]:,.0f}" for n in names)]
        row += [f"{per[n] / per[names[0]]:.3f}" for n in names[1:]]
        table.add(*row)
    return table.markdown()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.instructions", description=__doc__)
    parser.add_argument("--revs", type=lambda s: s.split(","), default=["HEAD", ""])
    parser.add_argument("--routes", type=comma_list(str, ROUTES), default=["pass", "ocr"])
    parser.add_argument("--sizes", type=comma_list(str, SIZES), default=["tiny", "1 MB"])
    parser.add_argument("--workers", type=int, default=1, help="the gateway's processes")
    parser.add_argument("--out", type=Path, help="write the counts as JSON here")
    args = parser.parse_args(argv)
    result = measure(args)
    if args.out:
        write_json(args.out, result)
    print(report(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
