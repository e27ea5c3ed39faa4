"""Scale-out benchmark (issue 13, "Beyond one host"): a gateway per host behind HAProxy, against
one ideal dispatcher over the whole fleet.

    python -m bench.hierarchy            # 4 hosts of 12, loads 50/70/85/95 %, 14 s windows
    python -m bench.hierarchy --quick    # 8 s windows
    python -m bench.hierarchy --smoke    # seconds; for tests/bench
    python -m bench.hierarchy --report bench/results/hierarchy-default.json   # Markdown tables

The simulated fleet of the balancing benchmark (``bench/fleet.py``: 48 instances, one document
at a time each, 3 of them 3-5x slower) is cut into hosts of consecutive instances. Each host gets
its own real gateway (``python -m gateway``, the default policy) over its instances alone, and
one real HAProxy (``haproxy -W -db``, the config the Pulumi program renders:
``components/haproxy.py``, least connections weighted by instance count, ``/ready`` checks)
fronts them. The open-loop Poisson workload of ``bench/balancing.py`` (same seed, same work per
document) goes to HAProxy, and its p99 is compared with the exact replay of one ideal dispatcher
over all 48 instances (``bench/ideal.py``); the target is 1.5x at every load. Beside it: one
gateway over all 48 (the balancing benchmark's default row), and the replay of a load-blind split
(each document to the next host in turn, as DNS round robin or an L4 VIP would do, then an ideal
dispatcher inside the host).

Needs ``haproxy`` on PATH (``apt-get install haproxy``). Results: ``bench/results/
hierarchy-<profile>.json``; a PNG of p99 against load in ``docs/img/`` if matplotlib imports.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, replace
from functools import partial
from pathlib import Path
from unittest import mock

from bench.balancing import (
    GATEWAY_SRC,
    Profile,
    brief,
    default_policy,
    des_summary,
    gateway_fingerprint,
    gateway_run,
    measured,
    open_loop,
    snapshot_importable_gateway,
)
from bench.balancing import PROFILES as BALANCING_PROFILES
from bench.common import (
    log,
    parser,
    profile_name,
    pyplot,
    run_meta,
    save_figure,
    unavailable,
    write_json,
)
from bench.ideal import simulate_ideal
from bench.loadgen import Sample, gateway_sender, ocr_bodies, summarize
from bench.minihttp import MiniClient
from bench.plots import p99_lines
from bench.procs import (
    FleetProc,
    GatewayProc,
    free_port,
    gateway_config,
    spawn,
    start_fleet,
    start_gateway,
    tmpdir,
    until_healthy,
)
from bench.proxies import ProxyProc
from bench.report import Report, Table, fmt_percentile, print_console, render_markdown
from bench.workload import Workload, make_workload
from components.haproxy import HEALTH_URI, Backend, HaproxySpec, render_haproxy

REPO = Path(__file__).resolve().parent.parent
RESULTS_DIR = REPO / "bench" / "results"
PLOT = REPO / "docs" / "img" / "hierarchy_p99_by_load.png"
TARGET = 1.5
SBIN = "/usr/sbin:/sbin"
GATEWAY_WORKERS = "1"
"""Worker processes per gateway (``GATEWAY_WORKERS``): the simulated hosts share this machine's
cores, so each gateway is one process, the one-gateway row's too."""
ROWS = {
    "ideal": "one ideal dispatcher over all (replay)",
    "hierarchy": "HAProxy leastconn -> a gateway per host",
    "one_gateway": "one gateway over all",
    "split_round_robin": "load-blind split, ideal in each host (replay)",
}


@dataclass(frozen=True)
class HierarchyProfile:
    base: Profile
    """Fleet, loads, windows and the disturbance rules of the balancing benchmark profile of
    the same name."""
    hosts: int = 4


ONE_CLIENT_FOR_MANY = {"server": {"max_connections_per_client": 1000}}
"""The load generator stands for many clients: no per-client connection bound cuts it, neither
a gateway's (the one gateway's; behind HAProxy the stack lifts it, as here) nor HAProxy's."""


def _profile(name: str, **extra: object) -> HierarchyProfile:
    base = replace(BALANCING_PROFILES[name], gateway_extra=ONE_CLIENT_FOR_MANY)
    return HierarchyProfile(base, **extra)  # type: ignore[arg-type]


PROFILES = {
    "default": _profile("default"),
    "quick": _profile("quick"),
    "smoke": _profile("smoke", hosts=2),
}


def host_groups(n: int, hosts: int) -> list[list[int]]:
    """Instance indexes of each host: consecutive blocks, as sizes as equal as they can be."""
    if not 1 <= hosts <= n:
        raise ValueError(f"{hosts} hosts for {n} instances")
    cuts = [round(k * n / hosts) for k in range(hosts + 1)]
    return [list(range(cuts[k], cuts[k + 1])) for k in range(hosts)]


def split_round_robin(
    workload: Workload, means: list[float], groups: list[list[int]]
) -> list[Sample]:
    """Replay a load-blind split: document k goes to host k mod H, where an ideal dispatcher
    serves it (the best a DNS name or a VIP without load feedback can do)."""
    samples: list[Sample] = []
    for k, group in enumerate(groups):
        mine = [r for r in workload.requests if r.id % len(groups) == k]
        part = Workload(workload.rate_rps / len(groups), workload.duration_s, mine)
        samples += simulate_ideal(part, [means[i] for i in group], "fastest")
    return sorted(samples, key=lambda s: s.id)


# ------------------------------------------------------------------------------ HAProxy


def haproxy_binary() -> str | None:
    """haproxy on PATH, else in the sbin folders a user's PATH may leave out."""
    return shutil.which("haproxy", path=os.pathsep.join((os.environ.get("PATH", ""), SBIN)))


async def start_haproxy(spec: HaproxySpec, workdir: Path, tag: str) -> ProxyProc:
    """HAProxy as the balancer container runs it, on loopback; returns once its own health
    URI answers 200 (every gateway up)."""
    binary = haproxy_binary()
    if binary is None:
        raise RuntimeError("haproxy is not installed: apt-get install haproxy")
    config = workdir / f"haproxy-{tag}.cfg"
    config.write_text(render_haproxy(spec))
    log_path = workdir / f"haproxy-{tag}.log"
    proc = spawn([binary, "-W", "-db", "-f", str(config)], log_path)
    url = f"http://127.0.0.1:{spec.port}{HEALTH_URI}"
    await until_healthy(url, proc, 20, "haproxy", log_path)
    return ProxyProc("haproxy", proc, spec.port, log_path)


# ------------------------------------------------------------------------------ one run


async def run_hierarchy(
    fleet: FleetProc,
    policy: str,
    workload: Workload,
    prof: HierarchyProfile,
    workdir: Path,
    tag: str,
    src: Path,
) -> tuple[dict, list[Sample]]:
    """A fresh gateway per host and a fresh HAProxy in front; the open-loop workload through
    HAProxy. Returns the summary (latency, CPU, each host's share) and the samples."""
    base = prof.base
    groups = host_groups(len(fleet.ports), prof.hosts)
    gateways: list[GatewayProc] = []
    hp: ProxyProc | None = None
    client: MiniClient | None = None
    try:
        for k, group in enumerate(groups):
            cfg = gateway_config([fleet.urls[i] for i in group], policy, base.gateway_extra)
            gateways.append(await start_gateway(cfg, workdir, f"{tag}-host-{k}", src=src))
        spec = HaproxySpec(
            port=free_port(),
            backends=tuple(
                Backend(f"host-{k}", "127.0.0.1", gw.port, weight=len(groups[k]))
                for k, gw in enumerate(gateways)
            ),
            bind_address="127.0.0.1",
            max_conn_per_client=None,
            log=False,
        )
        hp = await start_haproxy(spec, workdir, tag)
        client = MiniClient("127.0.0.1", hp.port)
        pids = {f"gateway-{k}": gw.proc.pid for k, gw in enumerate(gateways)}
        send = gateway_sender(client, ocr_bodies(workload))
        summary, samples = await open_loop(
            send, workload, fleet, {**pids, "haproxy": hp.proc.pid}, base.warmup_s, base.drain_s
        )
        cpu = summary["cpu_cores"]
        summary["cpu_cores"] = {"gateways": round(sum(cpu.pop(k) for k in pids), 3), **cpu}
        stats = await fleet.stats()
        received = [sum(stats[i]["received"] for i in group) for group in groups]
        summary["host_share"] = [round(r / max(1, sum(received)), 4) for r in received]
        died = [k for k, gw in enumerate(gateways) if gw.proc.poll() is not None]
        if died or hp.proc.poll() is not None:
            summary["died"] = {"gateways": died, "haproxy": hp.proc.poll()}
        return summary, samples
    finally:
        if client is not None:
            await client.close()
        if hp is not None:
            hp.stop()
        for gw in gateways:
            gw.stop()
        await fleet.reset()


# ------------------------------------------------------------------------------ the benchmark


async def run(prof: HierarchyProfile, out_path: Path) -> dict:
    base = prof.base
    workdir = tmpdir()
    src = await snapshot_importable_gateway(workdir, 0.0)
    GATEWAY_SRC["src"] = src  # the one-gateway comparison starts from this snapshot too
    policy = default_policy(src)
    cap = base.fleet.capacity_rps()
    groups = host_groups(base.fleet.n, prof.hosts)
    results: dict = {
        "meta": run_meta(
            base.name,
            fleet=asdict(base.fleet),
            capacity_rps=round(cap, 2),
            hosts=prof.hosts,
            host_instances=[len(g) for g in groups],
            policy=policy,
            gateway_workers=os.environ["GATEWAY_WORKERS"],
            gateway_sources=gateway_fingerprint(src / "gateway"),
            haproxy=_haproxy_version(),
            windows={"duration_s": base.duration_s, "warmup_s": base.warmup_s},
            command=" ".join(["python -m bench.hierarchy", *sys.argv[1:]]),
            profile_settings=asdict(prof)["base"] | {"hosts": prof.hosts},
        ),
        "loads": {},
    }
    t0 = time.monotonic()
    fleet = start_fleet(base.fleet)
    try:
        means, slow = fleet.info["means"], set(fleet.info["slow"])
        results["meta"]["slow_by_host"] = [sorted(slow & set(g)) for g in groups]
        for load in base.loads:
            key = f"{round(load * 100)}"
            wl = make_workload(load * cap, base.duration_s, base.fleet.seed, base.fleet.sigma)
            window = (base.warmup_s, base.duration_s)
            rows: dict = {
                "ideal": des_summary(wl, means, "fastest", *window, slow),
                "split_round_robin": summarize(
                    split_round_robin(wl, means, groups), *window, wl.rate_rps
                ),
            }
            log(f"hierarchy at {key}% ({wl.rate_rps:.1f} req/s, {len(wl.requests)} requests)")
            once = partial(run_hierarchy, fleet, policy, wl, prof, workdir, f"h-{key}", src)
            rows["hierarchy"], _ = await measured(once, base, f"hierarchy at {key}%")
            log("  " + brief(rows["hierarchy"]))
            log(f"one gateway at {key}%")
            rows["one_gateway"], _ = await gateway_run(
                fleet, policy, wl, base, workdir, f"one-{key}", base.warmup_s, base.drain_s
            )
            log("  " + brief(rows["one_gateway"]))
            results["loads"][key] = {"rate_rps": round(wl.rate_rps, 2), "rows": rows}
            results["targets"] = targets(results)
            results["meta"]["wall_s"] = round(time.monotonic() - t0, 1)
            write_json(out_path, results)
    finally:
        fleet.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    return results


def targets(results: dict) -> dict:
    """The hierarchy's p99 over the ideal's at each load; met where <= 1.5 and measured (not a
    lower bound)."""
    out: dict = {"target": TARGET, "loads": {}}
    for key, blk in results["loads"].items():
        h, ideal = blk["rows"].get("hierarchy", {}), blk["rows"]["ideal"]
        if h.get("p99") and ideal.get("p99"):
            ratio = h["p99"] / ideal["p99"]
            met = ratio <= TARGET and not h["p99_censored"] and not h["errors"]
            out["loads"][key] = {"ratio": round(ratio, 3), "met": met}
    out["met"] = bool(out["loads"]) and all(x["met"] for x in out["loads"].values())
    return out


def _haproxy_version() -> str | None:
    binary = haproxy_binary()
    if binary is None:
        return None
    done = subprocess.run([binary, "-v"], capture_output=True, text=True, check=False)
    return done.stdout.splitlines()[0] if done.stdout else None


# ------------------------------------------------------------------------------ report


def build_report(results: dict) -> Report:
    meta = results["meta"]
    intro = (
        f"{meta['fleet']['n']} simulated instances ({meta['capacity_rps']} req/s of capacity) on "
        f"{meta['hosts']} hosts of {'/'.join(map(str, meta['host_instances']))}; slow instances "
        f"by host: {meta.get('slow_by_host')}; gateway policy `{meta['policy']}`; "
        f"{meta.get('haproxy') or 'haproxy'}; {meta['cpus']} CPUs; `{meta['command']}`."
    )
    t = results.get("targets", {"loads": {}})
    p99 = Table(
        "p99 latency by load",
        ("load", *ROWS.values(), "hierarchy / ideal", f"<= {TARGET}x"),
        ("left",) + ("right",) * (len(ROWS) + 1) + ("left",),
    )
    p50 = Table("p50 latency by load", ("load", *ROWS.values()))
    detail = Table(
        "The hierarchy's runs",
        ("load", "p95", "throughput", "errors", "unfinished", "host share", "CPU cores", "machine"),
        ("left",) + ("right",) * 4 + ("left",) * 3,
    )
    for key, blk in results["loads"].items():
        rows = blk["rows"]
        tk = t["loads"].get(key)
        verdict = ("**yes**" if tk["met"] else "**no**") if tk else "-"
        ratio = f"{tk['ratio']:.2f}" if tk else "-"
        p99.add(f"{key} %", *_cells(rows, "p99"), ratio, verdict)
        p50.add(f"{key} %", *_cells(rows, "p50"))
        h = rows.get("hierarchy", {})
        if "p99" in h:
            detail.add(
                f"{key} %",
                fmt_percentile(h, "p95"),
                f"{h['throughput_rps']} /s",
                str(h["errors"]),
                str(h["unfinished"]),
                " / ".join(f"{s:.2f}" for s in h.get("host_share", [])),
                ", ".join(f"{k} {v:.2f}" for k, v in h.get("cpu_cores", {}).items()),
                h.get("disturbed", "quiet"),
            )
    return Report(intro, [p99, p50, detail])


def _cells(rows: dict, key: str) -> list[str]:
    return [fmt_percentile(rows[k], key) if "p99" in rows.get(k, {}) else "-" for k in ROWS]


def plot(results: dict, path: Path) -> str:
    """p99 against load for each row; returns why no plot was drawn, or ""."""
    if why := unavailable():
        return why
    plt = pyplot()
    loads = sorted(results["loads"], key=int)
    fig, ax = plt.subplots(figsize=(7, 4.2))
    styles = {
        "ideal": ("black", "--", "o"),
        "hierarchy": ("tab:blue", "-", "s"),
        "one_gateway": ("tab:green", "-", "^"),
        "split_round_robin": ("tab:red", ":", "v"),
    }
    p99_lines(ax, results["loads"], {
        name: {"label": ROWS[name], "color": color, "linestyle": line, "marker": marker}
        for name, (color, line, marker) in styles.items()
    })  # fmt: skip
    ideal = [(int(k), results["loads"][k]["rows"]["ideal"]["p99"]) for k in loads]
    ax.plot(
        [x for x, _ in ideal],
        [TARGET * y for _, y in ideal],
        color="gray",
        linestyle="-.",
        label=f"target: {TARGET} x the ideal",
    )
    ax.set_xlabel("load, % of the fleet's capacity")
    ax.set_ylabel("p99 latency, s")
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title(f"{results['meta']['fleet']['n']} instances, {results['meta']['hosts']} hosts")
    save_figure(fig, path)
    return ""


def main(argv: list[str] | None = None) -> int:
    ap = parser("hierarchy", __doc__, quick="8 s windows", smoke="seconds; for tests/bench")
    ap.add_argument("--report", metavar="FILE", help="print the Markdown tables of a results file")
    ap.add_argument("--out", help="results JSON (default bench/results/hierarchy-<profile>.json)")
    args = ap.parse_args(argv)
    if args.report:
        print(render_markdown(build_report(json.loads(Path(args.report).read_text()))), end="")
        return 0
    name = profile_name(args, "quick", "smoke")
    prof = PROFILES[name]
    if haproxy_binary() is None:
        ap.error("haproxy is not installed: apt-get install haproxy")
    out = Path(args.out) if args.out else RESULTS_DIR / f"hierarchy-{name}.json"
    # every `python -m gateway` started meanwhile reads it; the environment is restored after
    with mock.patch.dict(os.environ, GATEWAY_WORKERS=GATEWAY_WORKERS):
        results = asyncio.run(run(prof, out))
    log(f"results written to {out}")
    if name != "smoke":  # the docs' plot is the documented run's
        log(plot(results, PLOT) or f"plot written to {PLOT}")
    with contextlib.suppress(BrokenPipeError):
        print_console(build_report(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
