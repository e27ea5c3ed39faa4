"""Soak: an hour of mixed load on a sim fleet deployed by the real Pulumi engine, with faults.

    python -m bench.soak                            # 60 min, a fault every 5 min (the docs' run)
    python -m bench.soak --minutes 5 --fault-every 50 --out /tmp/soak.json   # the CI variant

Application teams' traffic through fleetctl's own client (its retries, as they would use it):
small images and 3-page PDFs through ``/ocr``, and 12-page PDFs through the official job
protocol (fanned out over the instances). Faults, in turn, every ``--fault-every`` seconds:

1. ``kill -9`` of one PaddleX service (the operator's repair, a minute later: ``fleetctl
   recycle`` of that instance);
2. ``docker stop`` of one vLLM (repaired by the next ``pulumi up``, which refreshes first);
3. ``kill -9`` of the gateway's process (Docker starts its container again);
4. ``pulumi up`` growing the fleet by one card, and at the next turn shrinking it back.

Reported: requests and pages lost (an answer a client never got after its retries; a job
that failed or came back short or out of order), p99 latency per window, gateway and keeper
memory over time (``docs/img/soak_memory.png``), and every fault with what it did.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from PIL import Image

from bench.common import parser, pyplot, save_figure, write_json
from bench.report import Table
from bench.rollout.load import percentile, png_bytes
from fleetctl.client import AsyncClient, OcrError, RetryPolicy
from fleetctl.jobclient import JobPolicy, ocr_job
from tests.e2e.sim_stack import SimStack, sim_stack, tokens
from tests.e2e.test_fleet_on_docker import docker

REPO = Path(__file__).resolve().parent.parent
PORTS = 23000
USER_TOKEN = "soak-user-" + os.urandom(12).hex()
ADMIN_TOKEN = "soak-admin-" + os.urandom(12).hex()
WORKERS = {"image": 4, "pdf": 2, "job": 2}
"""Clients sending small images, sending 3-page PDFs, running 12-page jobs."""
SIM_PORT = re.compile(r"sim-vllm:\d+")
"""The simulated model names the vLLM that answered: equal pages differ only there."""


@dataclass
class Sample:
    t: float
    kind: str
    ok: bool
    latency: float
    error: str = ""


@dataclass
class Run:
    started: float = field(default_factory=time.monotonic)
    samples: list[Sample] = field(default_factory=list)
    faults: list[dict[str, Any]] = field(default_factory=list)
    memory: list[dict[str, Any]] = field(default_factory=list)
    jobs: dict[str, int] = field(default_factory=lambda: {"done": 0, "lost": 0, "pages": 0})
    pages_lost: int = 0

    def now(self) -> float:
        return time.monotonic() - self.started


def pdf_bytes(pages: int, seed: int) -> bytes:
    """Pages of distinct sizes, so a page out of order shows in the text."""
    images = [Image.new("RGB", (200 + 7 * i + seed, 260 + 3 * i), "white") for i in range(pages)]
    buffer = io.BytesIO()
    images[0].save(buffer, format="PDF", save_all=True, append_images=images[1:])
    return buffer.getvalue()


def normal(text: str) -> str:
    return SIM_PORT.sub("sim-vllm", text)


async def sync_worker(url: str, kind: str, document: bytes, run: Run, stop: asyncio.Event):
    retry = RetryPolicy(max_attempts=8, backoff_max=10.0)
    client = AsyncClient(url, token=USER_TOKEN, retry=retry, timeout=300, trust_env=False)
    name = "doc.png" if kind == "image" else "doc.pdf"
    try:
        while not stop.is_set():
            began = time.monotonic()
            try:
                await client.ocr(document, filename=name)
                ok, error = True, ""
            except OcrError as exc:
                ok, error = False, str(exc)[:200]
            run.samples.append(Sample(run.now(), kind, ok, time.monotonic() - began, error))
    finally:
        await client.aclose()


async def job_worker(url: str, seed: int, run: Run, stop: asyncio.Event, reference: list[str]):
    """12-page jobs, each compared page by page with the document's text from before the
    faults: whole and in order, or its pages count as lost."""
    client = AsyncClient(url, token=USER_TOKEN, timeout=300, trust_env=False)
    path = Path(tempfile.mkdtemp(prefix="soak-")) / f"job-{seed}.pdf"
    path.write_bytes(pdf_bytes(12, seed))
    policy = JobPolicy(mode="always", timeout_s=1800)
    try:
        while not stop.is_set():
            began = time.monotonic()
            try:
                result = await ocr_job(client, path, policy)
                whole, pages, error = normal(result.text) == reference[seed], result.pages, ""
            except OcrError as exc:
                whole, pages, error = False, 0, str(exc)[:200]
            run.jobs["done" if whole else "lost"] += 1
            run.jobs["pages"] += pages
            run.pages_lost += 0 if whole else 12
            run.samples.append(Sample(run.now(), "job", whole, time.monotonic() - began, error))
    finally:
        await client.aclose()


async def references(url: str, seeds: int) -> list[str]:
    """Each job document's text through ``/ocr`` (no fan-out) on the healthy fleet."""
    async with AsyncClient(url, token=USER_TOKEN, timeout=300, trust_env=False) as client:
        found = []
        for seed in range(seeds):
            result = await client.ocr(pdf_bytes(12, seed), filename="doc.pdf")
            found.append(normal(result.text))
        return found


class Faults:
    """Applies one fault a turn, in the order of the module doc, on its own thread."""

    def __init__(self, fleet: SimStack, run: Run, every_s: float, outputs: Path):
        self.fleet, self.run, self.every_s, self.outputs = fleet, run, every_s, outputs
        self.turn = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, name="faults", daemon=True)
        self.grown = False

    def _loop(self) -> None:
        while not self.stop.wait(self.every_s):
            fault = (self.kill_paddlex, self.stop_vllm, self.kill_gateway, self.resize)[
                self.turn % 4
            ]
            self.turn += 1
            began = self.run.now()
            try:
                what = fault()
                ok = True
            except Exception as exc:  # a fault that could not be applied is a finding
                what, ok = f"{fault.__name__} failed: {exc}"[:500], False
            self.run.faults.append(
                {"t": round(began, 1), "took_s": round(self.run.now() - began, 1), "ok": ok,
                 "what": what}
            )  # fmt: skip

    def kill_paddlex(self) -> str:
        paddlex = self.fleet.plan.paddlex[self.turn % len(self.fleet.plan.paddlex)]
        pid_file = f"/tmp/paddlex-{paddlex.port}.pid"
        docker("exec", paddlex.container_name, "sh", "-c", f"kill -9 $(cat {pid_file})")
        if self.stop.wait(60):
            return f"kill -9 of {paddlex.container_name}'s service"
        done = subprocess.run(
            [sys.executable, "-m", "fleetctl", "recycle", "--outputs", str(self.outputs),
             str(paddlex.port), "--wait", "60"],
            cwd=REPO, env={**os.environ, "PADDLEOCR_FLEET_ADMIN_TOKEN": ADMIN_TOKEN},
            capture_output=True, text=True, timeout=600, check=False,
        )  # fmt: skip
        return (
            f"kill -9 of {paddlex.container_name}'s service; a minute later fleetctl recycle: "
            f"exit {done.returncode}"
        )

    def stop_vllm(self) -> str:
        vllm = self.fleet.plan.vllm[self.turn % len(self.fleet.plan.vllm)]
        docker("stop", vllm.container_name)
        if self.stop.wait(30):
            return f"docker stop {vllm.container_name}"
        self.fleet.stack.up()
        return f"docker stop {vllm.container_name}; 30 s later pulumi up (refresh) started it"

    def kill_gateway(self) -> str:
        found = docker("ps", "-q", "--filter", "label=paddleocr-fleet.role=gateway",
                       "--filter", f"label={self.fleet.label}").stdout.split()  # fmt: skip
        for cid in found:
            pid = docker("inspect", "-f", "{{.State.Pid}}", cid).stdout.strip()
            subprocess.run(["kill", "-9", pid], check=False)
        return f"kill -9 of the gateway process ({len(found)} container(s)); Docker restarts it"

    def resize(self) -> str:
        cards = int(self.fleet.config["cards"])
        cards = cards - 1 if self.grown else cards + 1
        self.grown = not self.grown
        self.fleet.set(cards=str(cards))
        self.fleet.stack.up()
        self.outputs.write_text(json.dumps(self.fleet.stack.outputs()))
        return f"pulumi up to {cards} cards"


def sample_memory(fleet: SimStack, run: Run, stop: threading.Event, every_s: float) -> None:
    """The gateway's and the keeper's container memory (`docker stats`), every `every_s`."""
    while not stop.wait(every_s):
        names = docker("ps", "--filter", f"label={fleet.label}", "--format", "{{.Names}}")
        wanted = [n for n in names.stdout.split() if n.startswith(fleet.gateway_name)]
        if not wanted:
            continue
        stats = docker("stats", "--no-stream", "--format", "{{.Name}} {{.MemUsage}}", *wanted)
        point: dict[str, Any] = {"t": round(run.now(), 1)}
        for line in stats.stdout.splitlines():
            name, usage = line.split(" ", 1)
            role = "keeper" if name.startswith(f"{fleet.gateway_name}-keeper") else "gateway"
            point[role] = round(_mib(usage.split("/")[0].strip()), 1)
        run.memory.append(point)


def _mib(text: str) -> float:
    number, unit = re.match(r"([0-9.]+)\s*([A-Za-z]+)", text).groups()  # type: ignore[union-attr]
    scale = {"B": 1 / 2**20, "KiB": 1 / 1024, "MiB": 1, "GiB": 1024, "kB": 1 / 1049, "MB": 0.954}
    return float(number) * scale.get(unit, 1)


async def drive(
    url: str, run: Run, seconds: float, workers: dict[str, int], reference: list[str]
) -> None:
    stop = asyncio.Event()
    png, pdf = png_bytes(), pdf_bytes(3, 99)
    tasks = [
        *(sync_worker(url, "image", png, run, stop) for _ in range(workers["image"])),
        *(sync_worker(url, "pdf", pdf, run, stop) for _ in range(workers["pdf"])),
        *(job_worker(url, seed, run, stop, reference) for seed in range(workers["job"])),
    ]
    running = [asyncio.create_task(t) for t in tasks]
    await asyncio.sleep(seconds)
    stop.set()
    await asyncio.gather(*running)


def summarize(run: Run, window_s: float) -> dict[str, Any]:
    windows = []
    end = max((s.t for s in run.samples), default=0.0)
    start = 0.0
    while start < end:
        inside = [s for s in run.samples if start <= s.t < start + window_s]
        row: dict[str, Any] = {"from_min": round(start / 60, 1)}
        for kind in ("image", "pdf", "job"):
            done = [s.latency for s in inside if s.kind == kind and s.ok]
            row[kind] = {
                "ok": len(done),
                "lost": sum(1 for s in inside if s.kind == kind and not s.ok),
                "p99_s": None if not done else round(percentile(done, 0.99) or 0, 3),
            }
        windows.append(row)
        start += window_s
    lost = [s for s in run.samples if not s.ok]
    return {
        "requests": sum(1 for s in run.samples if s.kind != "job"),
        "requests_lost": sum(1 for s in lost if s.kind != "job"),
        "jobs": run.jobs,
        "pages_lost": run.pages_lost,
        "losses": sorted({f"{s.kind}: {s.error[:150]}" for s in lost})[:20],
        "windows": windows,
        "faults": run.faults,
        "memory": run.memory,
    }


def soak(
    minutes: float, fault_every_s: float, window_s: float, workers: dict[str, int], ports: int
) -> dict[str, Any]:
    run = Run()
    secrets = tokens(USER_TOKEN, ADMIN_TOKEN)
    config = {"cards": "2", "paddlexPerVllm": "3", "simVllmLoadSeconds": "10"}
    with sim_stack(f"soak-{ports}", ports, secrets, **config) as fleet:
        fleet.stack.up()
        outputs = Path(tempfile.mkdtemp(prefix="soak-")) / "outputs.json"
        outputs.write_text(json.dumps(fleet.stack.outputs()))
        reference = asyncio.run(references(fleet.url, workers["job"]))
        run.started = time.monotonic()  # the clock of the report: the load's start
        faults = Faults(fleet, run, fault_every_s, outputs)
        memory_stop = threading.Event()
        memory = threading.Thread(
            target=sample_memory, args=(fleet, run, memory_stop, 10.0), daemon=True
        )
        memory.start()
        faults.thread.start()
        try:
            asyncio.run(drive(fleet.url, run, minutes * 60, workers, reference))
        finally:
            faults.stop.set()
            faults.thread.join(900)
            memory_stop.set()
            memory.join(30)
    return summarize(run, window_s)


def plot_memory(result: dict[str, Any], path: Path) -> None:
    plt = pyplot()

    fig, ax = plt.subplots(figsize=(8, 3.5))
    for role, color in (("gateway", "tab:blue"), ("keeper", "tab:green")):
        points = [(p["t"] / 60, p[role]) for p in result["memory"] if role in p]
        if points:
            ax.plot(*zip(*points, strict=True), label=role, color=color)
    for fault in result["faults"]:
        ax.axvline(fault["t"] / 60, color="gray", lw=0.5, ls=":")
    ax.set_xlabel("minutes (dotted: a fault)")
    ax.set_ylabel("container memory, MiB")
    ax.set_ylim(bottom=0)
    ax.legend()
    ax.set_title("Soak: gateway and keeper memory")
    save_figure(fig, path)


def markdown(result: dict[str, Any]) -> str:
    lines = [
        f"- requests: {result['requests']}, lost after the client's retries: "
        f"{result['requests_lost']}",
        f"- jobs: {result['jobs']['done']} whole and in order, {result['jobs']['lost']} lost "
        f"({result['pages_lost']} pages lost, {result['jobs']['pages']} pages returned)",
        "",
    ]
    kinds = ("images ok / lost / p99 s", "3-page PDFs ok / lost / p99 s", "jobs ok / lost")
    windows = Table("windows", ("from minute", *kinds), ("left",) * 4)
    for w in result["windows"]:
        cells = [
            f"{w[k]['ok']} / {w[k]['lost']} / {w[k]['p99_s'] if w[k]['p99_s'] is not None else '-'}"
            for k in ("image", "pdf")
        ]
        windows.add(f"{w['from_min']:g}", *cells, f"{w['job']['ok']} / {w['job']['lost']}")
    faults = Table("faults", ("minute", "fault", "took s", "ok"), ("left",) * 4)
    for f in result["faults"]:
        faults.add(f"{f['t'] / 60:.1f}", str(f["what"]), str(f["took_s"]), str(f["ok"]))
    lines += [windows.markdown(), "", faults.markdown()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = parser("soak", __doc__)
    ap.add_argument("--minutes", type=float, default=60)
    ap.add_argument("--fault-every", type=float, default=300, help="seconds between faults")
    ap.add_argument("--window", type=float, default=300, help="seconds per report window")
    ap.add_argument("--ports", type=int, default=PORTS, help="the stack's block of ports")
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "soak.json")
    ap.add_argument("--plot", type=Path, default=REPO / "docs" / "img" / "soak_memory.png")
    a = ap.parse_args(argv)
    result = soak(a.minutes, a.fault_every, a.window, WORKERS, a.ports)
    result["command"] = "python -m bench.soak " + " ".join(argv or sys.argv[1:])
    write_json(a.out, result)
    with contextlib.suppress(ImportError):
        plot_memory(result, a.plot)
    print(markdown(result))
    return 0 if result["requests_lost"] == 0 and result["pages_lost"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
