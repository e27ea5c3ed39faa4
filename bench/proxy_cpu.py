"""Gateway CPU against nginx (issue 13): CPU per request, latency and throughput, in one run.

    python -m bench.proxy_cpu                  # the documented run (about 2.5 min on 2 cores)
    python -m bench.proxy_cpu --check          # the same, exit status 1 if a CPU target is missed
    python -m bench.proxy_cpu --from bench/results/proxy_cpu.json   # report (and check) a file
    python -m bench.proxy_cpu --gateway-rev HEAD  # the committed gateway/, not the working tree
    python -m bench.proxy_cpu --gateway-args "--workers 2"          # extra gateway arguments
    python -m bench.proxy_cpu --smoke          # seconds; tests/bench

One simulated PaddleX fleet (``bench.fleet``, zero-latency: every answer at once) serves nginx
and the gateway side by side. For each document size and concurrency, wrk (``bench.wrk``) sends
the same body, closed loop, to four targets in turn: the fleet directly, nginx
(``/layout-parsing`` pass-through), the gateway's native ``/layout-parsing`` (pass-through) and
the gateway's ``/ocr`` (detect the type, ``/layout-parsing`` then ``/restructure-pages``,
post-process). CPU per request is the proxy's process tree's CPU (``bench.procstat``: every
process of the tree, workers included) over a window in wrk's steady state, divided by the
requests that reached the fleet in it (``bench.cpu_cell``). wrk's and the fleet's CPU are
measured apart and never counted.

Results: ``bench/results/proxy_cpu.json``, the tables in docs/benchmarks.md (between markers,
``bench.proxy_cpu_report``) and ``docs/img/proxy_cpu_by_size.png`` (``bench.plots``).
"""

from __future__ import annotations

import base64
import json
import math
import random
import shlex
import shutil
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from bench.common import comma_list, log, parser, path_or_none, profile_name, run_meta, write_json
from bench.cpu_cell import ROUTES, Endpoint, WindowSpec, run_cell
from bench.procs import QUIET, gateway_config, gateway_import_error, start_fleet
from bench.procstat import tree
from bench.proxies import (
    ProxyProc,
    ensure_tools,
    gateway_revision,
    nginx_version,
    snapshot_rev,
    start_gateway,
    start_nginx,
)
from bench.proxy_cpu_report import cell
from bench.report import print_console
from bench.workload import FleetSpec, png_with_work
from bench.wrk import run_wrk, write_script
from fleetctl.png import encode_png

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "bench" / "results" / "proxy_cpu.json"
DOCS = REPO / "docs" / "benchmarks.md"
IMG_DIR = REPO / "docs" / "img"

KIB = 1024
SIZES: dict[str, int] = {  # document (image file) bytes; "tiny" is an 8 x 8 PNG
    "tiny": 0,
    "1 KB": KIB,
    "10 KB": 10 * KIB,
    "100 KB": 100 * KIB,
    "1 MB": KIB * KIB,
    "4 MB": 4 * KIB * KIB,
}


@dataclass(frozen=True)
class Target:
    """One CPU target of issue 13: the gateway's CPU per document on ``route`` at ``size``."""

    name: str
    route: str  # key of ROUTES
    size: str  # key of SIZES
    limit_ms: float


TARGETS = (
    Target("pass-through of a small document", "pass", "tiny", 0.6),
    Target("`/ocr` of a small image", "ocr", "tiny", 1.0),
    Target("`/ocr` of a 1 MB image", "ocr", "1 MB", 4.0),
)


@dataclass(frozen=True)
class Profile:
    name: str
    sizes: tuple[str, ...] = tuple(SIZES)
    concurrency: tuple[int, ...] = (1, 32)
    window: WindowSpec = field(default_factory=WindowSpec)
    warmup_s: int = 1  # wrk seconds per proxy route before measuring (0: none)
    instances: int = 48
    nginx_workers: tuple[str, ...] = ("1",)  # each a worker_processes value: "1", "2", "auto"
    gateway_args: tuple[str, ...] = ()
    gateway_extra: str = ""  # JSON merged into the gateway config
    gateway_rev: str = ""  # a git revision to take gateway/ from; "": the working tree
    with_nginx: bool = True


PROFILES = {
    "default": Profile("default"),
    "smoke": Profile(
        "smoke",
        sizes=("tiny", "1 KB"),
        concurrency=(2,),
        window=WindowSpec(measure_s=0.5, max_seconds=1, retry_seconds=2),
        warmup_s=0,
        instances=4,
    ),
}


# ------------------------------------------------------------------------------ documents


def document(size: str, seed: int = 13) -> bytes:
    """A PNG of about ``SIZES[size]`` bytes of noise (incompressible), carrying work 0."""
    n = SIZES[size]
    if n == 0:
        return png_with_work(0.0, 0)
    side = max(1, int(((n - 120) / 3) ** 0.5))  # 3 bytes a pixel plus a filter byte a row
    rng = random.Random(seed + n)
    rows = [rng.randbytes(3 * side) for _ in range(side)]
    return encode_png(side, side, rows, rgb=True, text={b"bench": b"bench-work=0;id=0"}, level=1)


def bodies(doc: bytes) -> dict[str, bytes]:
    """The request body of each route for one document (the same base64 in both)."""
    b64 = base64.b64encode(doc).decode()
    return {
        "pass": json.dumps({"file": b64, "fileType": 1}).encode(),
        "ocr": json.dumps({"base64": b64}).encode(),
    }


# ------------------------------------------------------------------------------ the run


def _endpoints(fleet_port: int, proxies: dict[str, ProxyProc]) -> list[Endpoint]:
    """The fleet itself, then each proxy's routes, in the order every cell measures them."""
    eps = [Endpoint("direct", "pass", fleet_port, None)]
    eps += [Endpoint(k, "pass", px.port, px.pid) for k, px in proxies.items() if k != "gateway"]
    if (gw := proxies.get("gateway")) is not None:
        eps += [Endpoint("gateway", route, gw.port, gw.pid) for route in ("pass", "ocr")]
    return eps


def run(prof: Profile, keep_logs: bool = False) -> dict:
    """Start the fleet and the proxies, measure every cell, return the results dict."""
    from bench.balancing import default_policy, gateway_fingerprint

    missing = ensure_tools(("nginx", "wrk") if prof.with_nginx else ("wrk",))
    if missing:
        raise SystemExit("; ".join(missing.values()))
    t_start = time.monotonic()
    workdir = Path(tempfile.mkdtemp(prefix="bench-proxy-cpu-"))
    rev = prof.gateway_rev
    src = snapshot_rev(workdir, rev)
    err = gateway_import_error(src)
    if err:
        raise SystemExit(f"gateway/ does not import: {err}")
    policy = default_policy(src)
    fleet = start_fleet(FleetSpec(n=prof.instances, slow_factors=(), zero_latency=True))
    proxies: dict[str, ProxyProc] = {}
    try:
        cfg = gateway_config(fleet.urls, policy, QUIET, json.loads(prof.gateway_extra or "{}"))
        try:
            if prof.with_nginx:
                for w in prof.nginx_workers:
                    key = "nginx" if w == "1" else f"nginx-{w}"
                    proxies[key] = start_nginx(fleet.ports, workdir / key, w)
            gw_args = list(prof.gateway_args)
            proxies["gateway"] = start_gateway(cfg, workdir / "gateway", src, gw_args)
        except RuntimeError as exc:
            raise SystemExit(f"bench.proxy_cpu: {exc}") from None
        results = {
            "meta": _meta(prof, policy, gateway_fingerprint(src / "gateway"), cfg),
            "cells": measure(prof, fleet, proxies, workdir),
        }
        # after the load: the processes each tree had (workers started on demand included)
        results["meta"]["processes"] = {k: len(tree(px.pid)) for k, px in proxies.items()}
        if proxies["gateway"].proc.poll() is not None:
            log(f"the gateway died:\n{proxies['gateway'].log_tail()}")
    finally:
        for px in proxies.values():
            px.stop()
        fleet.stop()
        if keep_logs:
            log(f"configs and logs kept in {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    results["meta"]["wall_s"] = round(time.monotonic() - t_start, 1)
    results["targets"] = evaluate_targets(results["cells"])
    return results


def measure(prof: Profile, fleet, proxies: dict[str, ProxyProc], workdir: Path) -> list[dict]:
    """Every cell: per size, per concurrency, each endpoint in turn (the same minute for all)."""
    admin, fleet_pid = fleet.info["admin"], fleet.proc.pid
    eps = _endpoints(fleet.ports[0], proxies)
    scripts: dict[tuple[str, str], tuple[bytes, Path]] = {}  # (size, route) -> body, script
    docs: dict[str, int] = {}
    for size in prof.sizes:
        doc = document(size)
        docs[size] = len(doc)
        for route, body in bodies(doc).items():
            name = f"{route}-{size.replace(' ', '')}"
            body_path = workdir / f"body-{name}.json"
            body_path.write_bytes(body)
            script = write_script(workdir / f"post-{name}.lua", body_path, ROUTES[route])
            scripts[size, route] = (body, script)
    warm = prof.sizes[0]
    for ep in eps:  # open the upstream connections, let Python warm up
        if ep.meter_pid and prof.warmup_s > 0:
            run_wrk(f"http://127.0.0.1:{ep.port}", scripts[warm, ep.route][1], 32, prof.warmup_s)
    cells = []
    rps: dict[tuple[str, str, str], float] = {}  # (target, route, size) -> last rate measured
    for size in prof.sizes:
        for conc in prof.concurrency:
            for ep in eps:
                body, script = scripts[size, ep.route]
                cell = {
                    "target": ep.key,
                    "route": ROUTES[ep.route],
                    "size": size,
                    "doc_bytes": docs[size],
                    "body_bytes": len(body),
                    "concurrency": conc,
                }
                key = (ep.key, ep.route, size)
                try:
                    cell.update(
                        run_cell(
                            ep, body, script, conc, prof.window, rps.get(key), fleet_pid, admin
                        )
                    )
                    rps[key] = cell["rps"]
                except (RuntimeError, OSError) as exc:
                    cell["failed"] = str(exc)[:500]
                cells.append(cell)
                log(brief(cell))
    return cells


def brief(c: dict) -> str:
    head = f"{c['target']:<10} {c['route']:<16} {c['size']:>6} c={c['concurrency']:<3}"
    if "failed" in c:
        return f"{head} FAILED {c['failed']}"
    cpu = f"{c['cpu_ms']:.3f} ms CPU" if c.get("cpu_ms") is not None else "(the fleet)"
    err = f" errors {c['errors']}" if c["errors"] else ""
    return (
        f"{head} {cpu:>14}  p50 {c['p50_ms']:.2f} p99 {c['p99_ms']:.2f} ms  {c['rps']:.0f}/s"
        f"  other {c['other_cores']:.2f} cores{err}"
    )


def _meta(prof: Profile, policy: str, sources: dict, cfg: dict) -> dict:
    return run_meta(
        prof.name,
        nginx=nginx_version(),
        gateway_sources=sources,
        gateway_revision=gateway_revision(prof.gateway_rev),
        gateway_policy=policy,
        gateway_args=list(prof.gateway_args),
        gateway_config={k: v for k, v in cfg.items() if k != "upstreams"},
        settings=asdict(prof),
        sizes={s: SIZES[s] for s in prof.sizes},
    )


# ------------------------------------------------------------------------------ targets


def find(cells: list[dict], target: str, route: str, size: str, conc: int) -> dict | None:
    """The cell whose CPU was measured for target/route (a key of ROUTES)/size/conc, or None."""
    c = cell(cells, target, ROUTES.get(route, route), size, conc)
    return None if c is None or "failed" in c or c.get("cpu_ms") is None else c


def evaluate_targets(cells: list[dict]) -> list[dict]:
    """Each CPU target: the gateway's CPU per document at every concurrency, worst one judged."""
    concs = sorted({c["concurrency"] for c in cells})
    out = []
    for t in TARGETS:
        found = {conc: find(cells, "gateway", t.route, t.size, conc) for conc in concs}
        per = {str(conc): c["cpu_ms"] for conc, c in found.items() if c is not None}
        worst = max(per.values()) if per else None
        out.append(
            {
                **asdict(t),
                "cpu_ms": per,
                "worst_ms": worst,
                "met": None if worst is None else worst <= t.limit_ms,
            }
        )
    return out


def print_check(targets: list[dict]) -> bool:
    """Print PASS / FAIL per target; True if every measured target passed."""
    ok = True
    for t in targets:
        if t["met"] is None:
            print(f"NOT MEASURED  {t['name']} (<= {t['limit_ms']} ms CPU)")
            continue
        ok = ok and t["met"]
        per = ", ".join(f"c={k}: {v:.3f} ms" for k, v in t["cpu_ms"].items())
        word = "PASS" if t["met"] else "FAIL"
        print(f"{word:<13} {t['name']}: {t['worst_ms']:.3f} ms, limit {t['limit_ms']} ms ({per})")
    return ok


# ------------------------------------------------------------------------------ CLI


def publish(results: dict, out: Path | None, docs: Path | None, img_dir: Path | None) -> None:
    """Write the results file, the plot and the docs tables (each where given)."""
    from bench import plots
    from bench.proxy_cpu_report import build_report, update_docs

    if out is not None:
        write_json(out, results)
        log(f"results written to {out}")
    report = build_report(results)
    print_console(report)
    if img_dir is not None:
        why = plots.unavailable()
        if why:
            log(f"no plot: {why}")
        else:
            path = plots.plot_cpu_by_size(results, img_dir / plots.CPU_BY_SIZE)
            log(f"plot written to {path}")
    if docs is not None:
        log(update_docs(docs, report))


OUTPUT_OPTIONS = ("--out", "--docs", "--img-dir")  # where results go, not what is measured


def measured_command(argv: list[str]) -> str:
    """The command line that reproduces a run's numbers: ``argv`` less its output options."""
    kept: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
        elif arg in OUTPUT_OPTIONS:
            skip = True
        elif arg != "--keep-logs" and not arg.startswith(tuple(o + "=" for o in OUTPUT_OPTIONS)):
            kept.append(arg)
    return " ".join(["python -m bench.proxy_cpu", *map(shlex.quote, kept)])


def main(argv: list[str] | None = None) -> int:
    ap = parser("proxy_cpu", __doc__, smoke="seconds: 4 upstreams, 2 small sizes")
    ap.add_argument("--check", action="store_true", help="exit 1 if a CPU target is missed")
    ap.add_argument("--from", dest="from_file", type=Path, help="report a results file, no run")
    ap.add_argument("--sizes", type=comma_list(choices=SIZES), help="some of " + ", ".join(SIZES))
    ap.add_argument("--concurrency", type=comma_list(int, least=1), help="counts, e.g. 1,32")
    ap.add_argument("--seconds", type=float, help="shortest measured window per cell (1.5)")
    ap.add_argument("--nginx-workers", type=comma_list(), help="worker_processes values: 1,auto")
    ap.add_argument("--no-nginx", action="store_true", help="measure the gateway alone")
    ap.add_argument("--gateway-args", default="", help='extra gateway arguments: "--workers 2"')
    ap.add_argument("--gateway-extra", default="", help="JSON merged into the gateway config")
    ap.add_argument("--gateway-rev", default="", help="measure gateway/ of this git revision")
    ap.add_argument("--out", type=Path, help=f"results JSON (default {RESULTS.relative_to(REPO)})")
    ap.add_argument("--docs", help=f'Markdown to update (default {DOCS.relative_to(REPO)}), "none"')
    ap.add_argument(
        "--img-dir", help=f'folder of the PNG (default {IMG_DIR.relative_to(REPO)}), "none"'
    )
    ap.add_argument("--keep-logs", action="store_true", help="keep the configs and logs")
    raw_argv = sys.argv[1:] if argv is None else argv
    args = ap.parse_args(raw_argv)
    prof = PROFILES[profile_name(args, "smoke")]
    changes: dict = {}
    if args.sizes:
        changes["sizes"] = tuple(args.sizes)
    if args.concurrency:
        changes["concurrency"] = tuple(args.concurrency)
    if args.seconds:
        w = prof.window
        changes["window"] = replace(
            w, measure_s=args.seconds, max_seconds=max(math.ceil(args.seconds + 1), w.max_seconds)
        )
    if args.nginx_workers:
        changes["nginx_workers"] = tuple(args.nginx_workers)
    if args.no_nginx:
        changes["with_nginx"] = False
    try:
        if not isinstance(json.loads(args.gateway_extra or "{}"), dict):
            raise ValueError("not a JSON object")
    except ValueError as exc:
        ap.error(f"--gateway-extra: {exc}")
    changes["gateway_args"] = tuple(shlex.split(args.gateway_args))
    changes["gateway_extra"] = args.gateway_extra
    changes["gateway_rev"] = args.gateway_rev
    # the committed results, plot and docs are written by the documented run alone (any run when
    # told where): a smoke run or a subset of the grid leaves them as they are
    partial = prof.name == "smoke" or bool(args.sizes or args.concurrency or args.seconds)
    partial = partial or args.no_nginx
    prof = replace(prof, **changes)
    docs = path_or_none(args.docs, None if partial else DOCS)
    img_dir = path_or_none(args.img_dir, None if partial else IMG_DIR)
    if args.from_file:
        results = json.loads(args.from_file.read_text())
        results["targets"] = evaluate_targets(results["cells"])
        publish(results, None, docs, img_dir)
    else:
        results = run(prof, args.keep_logs)
        results["meta"]["command"] = measured_command(raw_argv)
        publish(results, args.out or (None if partial else RESULTS), docs, img_dir)
    ok = print_check(results["targets"])
    return 1 if args.check and not ok else 0


if __name__ == "__main__":
    sys.exit(main())
