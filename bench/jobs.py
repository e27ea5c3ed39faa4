"""Jobs benchmark of issue 12: long documents at fleet speed.

    python -m bench.jobs             # the documented run (about 4 min on 2 cores)
    python -m bench.jobs --quick     # shorter windows (about 2 min)
    python -m bench.jobs --smoke     # seconds: 4 instances, small documents (tests/bench)

Against a real gateway process (``python -m gateway``, queue mode, two tenants' tokens, its
job store in a temporary folder) and the simulated fleet (``bench/fleet.py``: 48 instances,
one inference at a time each, PDFs costing ``request_s`` per request plus ``page_s`` per
page), over the official job protocol:

1. idle fleet: a 100-page job's latency with fan-out vs one instance parsing the PDF whole;
2. mixed load: one-page ``/ocr`` documents at 40 % of the capacity, alone and while 100-page
   jobs take another 45 %; the one-page p99 of both;
3. saturation: 40 jobs at once and nothing else; pages/s vs the fleet's capacity;
4. ``kill -9`` of the gateway while 20 jobs run, restarted on the same store: every job
   whole and in order, pages parsed twice.

Job slices go through a slice keeper (``python -m gateway.keeper``) in front of the fleet, as
the Pulumi program deploys one per host; ``--no-keeper`` sends them straight to the instances.

Results: ``bench/results/jobs-<profile>.json`` and the markdown printed at the end (the
table in docs/benchmarks.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import json
import os
import shutil
import signal
import sys
from collections.abc import AsyncIterator, Iterator, Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from bench.common import comma_list, parser, profile_name, run_meta, write_json
from bench.jobs_report import markdown, targets
from bench.jobs_scenarios import (
    ADMIN_TOKEN,
    TOKENS,
    Context,
    Profile,
    capacities,
    scenario_idle,
    scenario_kill,
    scenario_mixed,
    scenario_saturation,
    sha,
)
from bench.procs import (
    FleetProc,
    GatewayProc,
    KeeperProc,
    gateway_config,
    snapshot_gateway,
    start_fleet,
    start_gateway,
    start_keeper,
    tmpdir,
)
from bench.workload import FleetSpec

RESULTS_DIR = Path(__file__).resolve().parent / "results"

DEFAULT = Profile("default")
PROFILES = {
    "default": DEFAULT,
    "quick": replace(DEFAULT, name="quick", idle_runs=2, mixed_s=15.0, mixed_warmup_s=3.0,
                     saturation_jobs=25),
    "smoke": Profile(
        "smoke", FleetSpec(n=4, slow_factors=(), request_s=0.05, page_s=0.02), doc_pages=12,
        threshold_pages=2, max_slice_pages=4, idle_runs=1, mixed_s=1.0, mixed_warmup_s=0.2,
        saturation_jobs=4, kill_jobs=3, lease_s=2.0,
    ),
}  # fmt: skip
SCENARIOS = {
    "idle": scenario_idle,
    "mixed": scenario_mixed,
    "saturation": scenario_saturation,
    "kill": scenario_kill,
}


def config(
    prof: Profile,
    fleet: FleetProc,
    jobs_dir: Path,
    keeper: KeeperProc | None,
    tokens: Mapping[str, str] = TOKENS,
) -> dict[str, Any]:
    """The gateway's config: queue mode, the tenants' ``tokens`` (name -> token), the job store
    in ``jobs_dir``, the ``keeper`` in front of every instance."""
    cfg = gateway_config(
        fleet.urls,
        "queue",
        {
            "load_balance": {"queue_max_depth": 4096},
            "auth": {
                "tokens": [{"name": n, "sha256": sha(t)} for n, t in tokens.items()],
                "admin_tokens": [{"name": "bench-admin", "sha256": sha(ADMIN_TOKEN)}],
            },
            "fanout": {
                "threshold_pages": prof.threshold_pages,
                "max_slice_pages": prof.max_slice_pages,
            },
            "jobs": {"dir": str(jobs_dir), "lease_s": prof.lease_s},
            "server": {"max_connections": 4000, "max_connections_per_client": 4000},
            "reload": {"enabled": False},
        },
    )
    if keeper is not None:
        cfg["upstreams"] = [{**up, "keeper": keeper.url} for up in cfg["upstreams"]]
    return cfg


@dataclass
class Stack:
    """The processes of one run: the fleet, the keeper (if any) and every gateway started."""

    workdir: Path
    src: Path
    fleet: FleetProc
    keeper: KeeperProc | None = None
    gateways: list[GatewayProc] = field(default_factory=list)

    async def start_gateway(self, cfg: dict[str, Any], name: str, **kw: Any) -> GatewayProc:
        gateway = await start_gateway(cfg, self.workdir, name, src=self.src, **kw)
        self.gateways.append(gateway)
        return gateway


@dataclass(frozen=True)
class BacklogProfile:
    """A backlog many tokens submit at once (:mod:`bench.jobs_scale`,
    :mod:`bench.jobs_shared_store`): the fleet, the jobs and the gateway's job settings."""

    name: str
    fleet: FleetSpec
    jobs: int
    tokens: int
    doc_pages: int
    submit_parallel: int = 4  # uploads in flight per token
    threshold_pages: int = 8  # fanout.threshold_pages (the gateway's default)
    max_slice_pages: int = 16  # fanout.max_slice_pages (the gateway's default)
    lease_s: float = 6.0

    def jobs_profile(self) -> Profile:
        """The :mod:`bench.jobs` profile whose gateway config and capacity this run shares."""
        return Profile(
            self.name, self.fleet, doc_pages=self.doc_pages, threshold_pages=self.threshold_pages,
            max_slice_pages=self.max_slice_pages, lease_s=self.lease_s,
        )  # fmt: skip

    @staticmethod
    def token(index: int) -> str:
        return f"bench-backlog-token-{index}"

    def config(
        self, stack: Stack, jobs_dir: Path, more_tokens: Mapping[str, str] | None = None
    ) -> dict[str, Any]:
        """:func:`config` with one token per tenant of the backlog (and ``more_tokens``)."""
        assert stack.keeper is not None
        tokens = {f"tenant-{i}": self.token(i) for i in range(self.tokens)} | dict(
            more_tokens or {}
        )
        return config(self.jobs_profile(), stack.fleet, jobs_dir, stack.keeper, tokens)


@contextlib.asynccontextmanager
async def processes(
    spec: FleetSpec, keep: bool, src: Path | None = None, with_keeper: bool = True
) -> AsyncIterator[Stack]:
    """The fleet and a slice keeper in front of it (``with_keeper``), in a temporary folder
    (kept when ``keep``); gateways are started on the `Stack`. All stopped on the way out."""
    workdir = tmpdir()
    stack = Stack(workdir, src or snapshot_gateway(workdir), start_fleet(spec))
    try:
        if with_keeper:
            stack.keeper = await start_keeper(stack.fleet.urls, workdir, stack.src)
        yield stack
    finally:
        for gateway in stack.gateways:
            gateway.stop()
        if stack.keeper is not None:
            stack.keeper.stop()
        stack.fleet.stop()
        if keep:
            print(f"kept {workdir}", file=sys.stderr)
        else:
            shutil.rmtree(workdir, ignore_errors=True)


@contextlib.contextmanager
def sigterm_unwinds() -> Iterator[None]:
    """A SIGTERM (timeout, CI) unwinds like Ctrl-C, so the processes are stopped."""
    previous = signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def result_of(
    prof: Any, started: dt.datetime, jobs_prof: Profile, meta_extra: dict[str, Any], **parts: Any
) -> dict[str, Any]:
    """A run's result: its ``meta`` (:func:`bench.common.run_meta` and when it started), its
    profile (the fleet as a dict), the fleet's capacity under ``jobs_prof`` and what it
    measured (``parts``)."""
    return {
        "meta": run_meta(prof.name, started=started.isoformat(timespec="seconds"), **meta_extra),
        "profile": asdict(prof),
        "capacity": capacities(jobs_prof),
        **parts,
    }


def write_results(result: dict[str, Any], out: Path, table: str) -> None:
    """The result as JSON in ``out``, its markdown table on stdout, where it went on stderr."""
    write_json(out, result)
    print(table)
    print(f"results: {out}", file=sys.stderr)


async def run(
    prof: Profile,
    scenarios: tuple[str, ...],
    keep: bool,
    src: Path | None = None,
    with_keeper: bool = True,
) -> dict[str, Any]:
    async with processes(prof.fleet, keep, src, with_keeper) as stack:
        cfg = config(prof, stack.fleet, stack.workdir / "jobs", stack.keeper)

        async def launch(name: str) -> GatewayProc:
            gateway = await stack.start_gateway(cfg, name)
            ctx.gateway, ctx.url = gateway, f"http://127.0.0.1:{gateway.port}"
            return gateway

        ctx = Context(prof, stack.fleet, "", stack.workdir, restart=launch, keeper=stack.keeper)
        await launch("jobs")
        out: dict[str, Any] = {}
        for name, scenario in SCENARIOS.items():
            if name in scenarios:
                print(f"-- scenario {name}", file=sys.stderr, flush=True)
                out[name] = await scenario(ctx)
                print(json.dumps(out[name])[:600], file=sys.stderr, flush=True)
        return out


def main(argv: list[str] | None = None) -> int:
    ap = parser("jobs", __doc__, quick="shorter windows", smoke="seconds (tests/bench)")
    ap.add_argument(
        "--slow", action="store_true", help="3 slow instances (3x, 4x, 5x) as in bench.balancing"
    )
    ap.add_argument("--scenarios", type=comma_list(choices=SCENARIOS), default=",".join(SCENARIOS))
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--keep-logs", action="store_true")
    ap.add_argument("--no-keeper", action="store_true", help="job slices straight to the instances")
    ap.add_argument(
        "--gateway-src",
        type=Path,
        default=None,
        help="a folder holding gateway/ to run (default: a copy of the checkout's)",
    )
    ap.add_argument(
        "--workers",
        type=int,
        default=None,
        help="gateway worker processes (default: the gateway's own, one per core)",
    )
    args = ap.parse_args(argv)
    if args.workers is not None:
        os.environ["GATEWAY_WORKERS"] = str(args.workers)  # read by python -m gateway
    prof = PROFILES[profile_name(args, "quick", "smoke")]
    if args.slow:
        prof = replace(
            prof, name=prof.name + "-slow", fleet=replace(prof.fleet, slow_factors=(3.0, 4.0, 5.0))
        )
    scenarios = tuple(args.scenarios)
    started = dt.datetime.now(dt.UTC)
    with sigterm_unwinds():
        measured = asyncio.run(
            run(prof, scenarios, args.keep_logs, args.gateway_src, not args.no_keeper)
        )
    workers = os.environ.get("GATEWAY_WORKERS", "default (one per core)")
    meta_extra = {"gateway_workers": workers, "keeper": not args.no_keeper}
    result = result_of(prof, started, prof, meta_extra, scenarios=measured)
    result["targets"] = targets(result)
    write_results(result, args.out or RESULTS_DIR / f"jobs-{prof.name}.json", markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
