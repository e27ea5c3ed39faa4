"""CPU per request of gateway revisions side by side, in interleaved rounds (one run).

On a shared machine CPU time per request drifts by tens of percent within minutes (other
people's work contends for the cores and caches; nginx itself shows it), so two revisions
measured minutes apart cannot be compared. Here every revision runs at once against the same
zero-latency fleet, and wrk drives each in turn, round after round: the median and the best
round of each, and each revision's median against the first one's.

    python -m bench.cpu_ab --revs 8e31c30,HEAD --routes pass,ocr --sizes "tiny,1 MB"
    python -m bench.cpu_ab --revs HEAD, --workers 2     # '' (a trailing comma): the working tree

CPU is the revision's whole process tree (``bench.procstat``) over wrk's run, divided by the
requests wrk saw answered (each is one upstream request on ``pass``, two on ``ocr``).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import tempfile
from pathlib import Path

from bench.cpu_cell import ROUTES
from bench.procs import gateway_config, snapshot_gateway, start_fleet
from bench.procstat import tree_cpu_s
from bench.proxies import snapshot_rev, start_gateway
from bench.proxy_cpu import bodies, document
from bench.workload import FleetSpec
from bench.wrk import parse_output, write_script, wrk_command


def measure(args: argparse.Namespace) -> list[dict]:
    """Every (route, size) cell: per revision the CPU per request of each round."""
    workdir = Path(tempfile.mkdtemp(prefix="bench-cpu-ab-"))
    fleet = start_fleet(FleetSpec(n=48, slow_factors=(), zero_latency=True))
    cfg = gateway_config(
        fleet.urls, "queue", {"health": {"enabled": False}, "reload": {"enabled": False}}
    )
    gateways = {}
    try:
        for rev in args.revs:
            name = rev or "worktree"
            src = snapshot_rev(workdir / name, rev) if rev else snapshot_gateway(workdir / name)
            gateways[name] = start_gateway(
                cfg, workdir / f"gw-{name}", src, ["--workers", str(args.workers)]
            )
        cells = []
        for size in args.sizes:
            routes = bodies(document(size))
            for route in args.routes:
                body = workdir / f"{route}-{size.replace(' ', '')}.json"
                body.write_bytes(routes[route])
                script = write_script(body.with_suffix(".lua"), body, ROUTES[route])
                rounds: dict[str, list[float]] = {name: [] for name in gateways}
                for _ in range(args.rounds):
                    for name, gw in gateways.items():
                        before = tree_cpu_s(gw.pid)
                        cmd = wrk_command(f"http://127.0.0.1:{gw.port}", script, args.c, args.s)
                        out = subprocess.run(cmd, capture_output=True, text=True, check=True)
                        done = max(1, parse_output(out.stdout).requests)
                        rounds[name].append((tree_cpu_s(gw.pid) - before) / done * 1000)
                cells.append({"route": route, "size": size, "rounds": rounds})
        return cells
    finally:
        for gw in gateways.values():
            gw.stop()
        fleet.stop()


def report(cells: list[dict], args: argparse.Namespace) -> str:
    """A markdown table: median (best) ms per revision, and the median against the first."""
    names = [rev or "worktree" for rev in args.revs]
    head = "| route | document | " + " | ".join(f"`{n}` median (best)" for n in names)
    head += " | " + " | ".join(f"`{n}` / `{names[0]}`" for n in names[1:]) + " |"
    lines = [head, "|" + " --- |" * (2 + 2 * len(names) - 1)]
    for cell in cells:
        med = {n: statistics.median(cell["rounds"][n]) for n in names}
        row = [cell["route"], cell["size"]]
        row += [f"{med[n]:.3f} ({min(cell['rounds'][n]):.3f}) ms" for n in names]
        row += [f"{med[n] / med[names[0]]:.2f}" for n in names[1:]]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--revs", type=lambda s: s.split(","), default=["HEAD", ""])
    parser.add_argument("--routes", type=lambda s: s.split(","), default=["pass", "ocr"])
    parser.add_argument("--sizes", type=lambda s: s.split(","), default=["tiny", "1 MB"])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("-c", type=int, default=1, help="wrk connections")
    parser.add_argument("-s", type=int, default=2, help="seconds per wrk run")
    args = parser.parse_args(argv)
    print(report(measure(args), args))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
