"""Day-two operations on the fleet: status, verify, restart, start-all.

Each operation takes a `Fleet` (see `fleetctl.topology`), a selection of instances and a
`Docker`, and returns plain rows (dicts) so the CLI can print a table or JSON.

Usage::

    fleet = load_fleet("outputs.json")
    rows = asyncio.run(status(fleet, fleet.instances, Docker()))
    bad = [r for r in rows if not r["ok"]]
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import httpx

from fleetctl import probes
from fleetctl.docker import ContainerState, Docker, DockerError
from fleetctl.topology import Fleet, Instance
from gateway.wire import paddlex_routes

Say = Callable[[str], None]


def container_states(
    docker: Docker, insts: list[Instance]
) -> dict[tuple[str, str], ContainerState | str]:
    """``(host, container) -> ContainerState``, or a string when it could not be read."""
    out: dict[tuple[str, str], ContainerState | str] = {}
    if not docker.available:
        return {(i.host, i.container): "n/a (no docker CLI)" for i in insts}
    groups: dict[tuple[str, str | None], list[Instance]] = defaultdict(list)
    for i in insts:
        groups[(i.host, i.docker_host)].append(i)
    for (host, dh), members in groups.items():
        try:
            states = docker.inspect([m.container for m in members], dh)
        except DockerError as e:
            for m in members:
                out[(host, m.container)] = f"error: {e}"
            continue
        for m in members:
            out[(host, m.container)] = states[m.container]
    return out


DRIFT_STATUSES = ("missing", "exited", "created", "dead")
"""Container states that `pulumi up --refresh` repairs: it creates a container its engine lost
and starts a stopped one (then waits for it), where a plain `up` without a refresh sees the
state it recorded and changes nothing."""


def repair_command(stack: str | None) -> str:
    return "pulumi up --refresh" + (f" --stack {stack}" if stack else "")


def repair(rows: list[dict[str, Any]], stack: str | None) -> dict[str, Any] | None:
    """The containers of `rows` that are missing or stopped (``container_status``), and the
    command that repairs them; None when there are none."""
    drifted = [r for r in rows if r.get("container_status") in DRIFT_STATUSES]
    if not drifted:
        return None
    return {
        "containers": [
            {"container": r["container"], "host": r["host"], "state": r["container_state"]}
            for r in drifted
        ],
        "command": repair_command(stack),
    }


def with_container_states(
    rows: list[dict[str, Any]], insts: list[Instance], docker: Docker
) -> list[dict[str, Any]]:
    """`rows` (one per instance, in order) with each container's ``container_status``."""
    states = container_states(docker, insts)
    out = []
    for row, inst in zip(rows, insts, strict=True):
        st = states[(inst.host, inst.container)]
        status = st.status if isinstance(st, ContainerState) else None
        state = st.describe() if isinstance(st, ContainerState) else st
        out.append(
            {
                **row,
                "container": inst.container,
                "container_state": state,
                "container_status": status,
            }
        )
    return out


def _gateway_view(
    inst: Instance, ups: dict[str, dict[str, Any]] | None, summary: str
) -> tuple[str, bool]:
    if inst.kind == "gateway":
        return summary, ups is not None
    if ups is None:
        return "-", True  # the gateway row carries the failure
    if inst.kind == "vllm":
        mine = [u for u in ups.values() if str(u.get("vllm", "")).rstrip("/") == inst.url]
        if not mine:
            return "-", True
        healthy = sum(u.get("state") == "healthy" for u in mine)
        return f"{healthy}/{len(mine)} paddlex healthy", True
    u = ups.get(inst.url)
    if u is None:
        return "not in gateway", False
    state = str(u.get("state", "?"))
    flight = u.get("in_flight")
    text = state + (f", {flight} in flight" if flight else "")
    if state in ("draining", "drained"):  # out of service on purpose (fleetctl drain)
        left = u.get("drained_for_s")
        return text + (f", {left:.0f}s left" if isinstance(left, int | float) else ""), True
    return text, state == "healthy"


async def status(
    fleet: Fleet,
    insts: list[Instance],
    docker: Docker,
    timeout: float = 5.0,
    admin_token: str | None = None,
) -> list[dict[str, Any]]:
    """One row per instance: container state, HTTP health, bound vLLM, gateway view, ``ok``.

    The gateway's view comes from ``/upstreams`` with `admin_token`: in the per-host layout,
    each host's from that host's gateway (`Fleet.gateway_urls`). When a gateway refuses it,
    every row it would describe carries the reason as ``gateway_error``.
    """
    states = await asyncio.to_thread(container_states, docker, insts)
    urls = fleet.gateway_urls()
    async with httpx.AsyncClient(trust_env=False) as http:
        healths = await asyncio.gather(*(probes.health(http, i, timeout) for i in insts))
        fetched = await asyncio.gather(
            *(probes.gateway_upstreams(http, url, timeout, admin_token) for url in urls.values())
        )
    views = dict(zip(urls, fetched, strict=True))

    def view_of(inst: Instance) -> probes.GatewayView:
        if not views:
            return probes.GatewayView(None, "no gateway in topology")
        if "" in views:
            return views[""]
        return views.get(inst.host) or probes.GatewayView(None, f"no gateway on {inst.host}")

    rows = []
    for inst, h in zip(insts, healths, strict=True):
        gw = view_of(inst)
        st = states[(inst.host, inst.container)]
        docker_error = None
        if isinstance(st, ContainerState):
            cstate, c_ok = st.describe(), st.running
        elif st.startswith("error: "):
            cstate, c_ok, docker_error = "docker error", False, st[len("error: ") :]
        else:
            cstate, c_ok = st, True  # no docker CLI here: judge by HTTP alone
        view, g_ok = _gateway_view(inst, gw.upstreams, gw.summary)
        rows.append(
            {
                "host": inst.host,
                "card": inst.card,
                "kind": inst.kind,
                "port": inst.port,
                "url": inst.url,
                "container": inst.container,
                "container_state": cstate,
                "container_status": st.status if isinstance(st, ContainerState) else None,
                "health": h.detail,
                "vllm": inst.vllm_port,
                "gateway": view,
                "ok": c_ok and h.ok and g_ok,
                **({"docker_error": docker_error} if docker_error else {}),
                **({"gateway_error": gw.summary} if gw.refused else {}),
            }
        )
    return rows


async def verify(
    fleet: Fleet,
    insts: list[Instance],
    timeout: float = 300.0,
    concurrency: int = 16,
    token: str | None = None,
) -> list[dict[str, Any]]:
    """End-to-end check of each instance on its own (vLLM models, PaddleX parse, gateway OCR
    with `token`)."""
    sem = asyncio.Semaphore(concurrency)

    async def one(http: httpx.AsyncClient, inst: Instance) -> dict[str, Any]:
        async with sem:
            if inst.kind == "vllm":
                check, p = "GET /v1/models", await probes.vllm_models(http, inst)
            elif inst.kind == "paddlex":
                check = f"POST {paddlex_routes.LAYOUT_PARSING}"
                p = await probes.paddlex_parse(http, inst, timeout)
            else:
                check, p = "POST /ocr", await probes.gateway_ocr(http, inst.url, timeout, token)
        return {
            "host": inst.host,
            "card": inst.card,
            "kind": inst.kind,
            "port": inst.port,
            "url": inst.url,
            "check": check,
            "ok": p.ok,
            "detail": p.detail,
            "elapsed_s": round(p.elapsed_s, 3),
        }

    async with httpx.AsyncClient(trust_env=False) as http:
        return list(await asyncio.gather(*(one(http, i) for i in insts)))


async def _wait(insts: list[Instance], timeout: float, say: Say) -> bool:
    if not insts:
        return True
    say(f"waiting up to {timeout:.0f}s for /health of {len(insts)} instance(s) ...")
    async with httpx.AsyncClient(trust_env=False) as http:
        res = await asyncio.gather(*(probes.wait_healthy(http, i, timeout) for i in insts))
    ok = True
    for inst, p in zip(insts, res, strict=True):
        say(f"  {inst.label} {inst.container}: {p.detail}")
        ok &= p.ok
    return ok


def start_paddlex(inst: Instance, docker: Docker, say: Say) -> None:
    """Re-run the rendered ``paddlex --serve`` start command of a PaddleX container."""
    if not inst.start_command:
        raise DockerError(f"topology has no start_command for {inst.label}")
    say(f"{inst.label}: {inst.start_command}")
    docker.shell(inst.start_command, inst.docker_host)


def restart(inst: Instance, docker: Docker, say: Say, wait: float | None = 600.0) -> bool:
    """``docker restart``; for PaddleX also re-run its start command; then wait for /health."""
    say(
        f"{inst.label}: docker restart {inst.container}"
        + (f" (DOCKER_HOST={inst.docker_host})" if inst.docker_host else "")
    )
    docker.restart(inst.container, inst.docker_host)
    if inst.kind == "paddlex":
        start_paddlex(inst, docker, say)
    if wait is None:
        return True
    return asyncio.run(_wait([inst], wait, say))


def start_all(insts: list[Instance], docker: Docker, say: Say, wait: float | None = 600.0) -> bool:
    """Start stopped containers (vLLM and gateway first), then (re)start PaddleX services.

    A PaddleX container whose service does not answer ``/health`` gets its start command
    re-run, after its vLLM answers (PaddleX needs it to build its pipeline).
    """
    states = container_states(docker, insts)
    ok = True
    for inst in insts:
        st = states[(inst.host, inst.container)]
        if isinstance(st, str):
            say(f"{inst.label} {inst.container}: {st}")
            ok = False
        elif st.status == "missing":
            say(f"{inst.label}: container {inst.container} does not exist (run `pulumi up`)")
            ok = False
        elif not st.running and inst.kind != "paddlex":
            say(f"{inst.label}: docker start {inst.container} (was {st.describe()})")
            docker.start(inst.container, inst.docker_host)
    backends = [i for i in insts if i.kind != "paddlex"]
    if wait is not None:
        ok &= asyncio.run(_wait(backends, wait, say))
    paddlex = [
        i
        for i in insts
        if i.kind == "paddlex"
        and isinstance(states[(i.host, i.container)], ContainerState)
        and states[(i.host, i.container)].status != "missing"
    ]

    async def down(cands: list[Instance]) -> list[Instance]:
        async with httpx.AsyncClient(trust_env=False) as http:
            res = await asyncio.gather(*(probes.health(http, i) for i in cands))
        return [i for i, p in zip(cands, res, strict=True) if not p.ok]

    to_start = asyncio.run(down(paddlex))
    for inst in to_start:
        st = states[(inst.host, inst.container)]
        assert isinstance(st, ContainerState)
        try:
            if not st.running:
                say(f"{inst.label}: docker start {inst.container} (was {st.describe()})")
                docker.start(inst.container, inst.docker_host)
            start_paddlex(inst, docker, say)
        except DockerError as e:
            say(f"{inst.label}: {e}")
            ok = False
    if not to_start:
        say("all PaddleX services answer /health; nothing to start")
    if wait is not None:
        ok &= asyncio.run(_wait(to_start, wait, say))
    return ok


def logs(
    inst: Instance,
    docker: Docker,
    say: Say,
    tail: int | None = 100,
    follow: bool = False,
    from_file: bool = False,
) -> int:
    """``docker logs`` of the instance's container, or ``tail`` of its log file inside it."""
    if from_file:
        if not inst.log:
            raise DockerError(f"topology has no log file for {inst.label}")
        cmd = ["tail", "-n", str(tail if tail is not None else 100)] + (["-F"] if follow else [])
        argv = docker.exec_argv(inst.container, *cmd, inst.log)
    else:
        argv = docker.logs_argv(inst.container, tail, follow)
        if inst.log:
            say(
                f"# the service also logs to {inst.log} inside {inst.container} "
                f"(fleetctl logs {inst.kind} {inst.port} --file)"
            )
    return docker.stream(argv, inst.docker_host)


NPU_TOOLS = {"ascend": ["npu-smi", "info"], "nvidia": ["nvidia-smi"]}


def npu(
    fleet: Fleet,
    insts: list[Instance],
    docker: Docker,
    say: Say,
    run: Callable[[list[str], str | None], tuple[int, str]] | None = None,
) -> bool:
    """Run ``npu-smi info`` (Ascend) or ``nvidia-smi`` (NVIDIA) for each selected host.

    On a host without its own ``docker_host`` the tool runs here when it is on ``PATH``;
    otherwise inside one of that host's vLLM containers (the Ascend ones mount ``npu-smi``).
    """
    import shutil
    import subprocess

    def default_run(argv: list[str], docker_host: str | None) -> tuple[int, str]:
        p = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            check=False,
            timeout=60,
            env=docker.env(docker_host),
        )
        return p.returncode, (p.stdout + p.stderr)

    run = run or default_run
    ok = True
    seen: dict[str, list[Instance]] = defaultdict(list)
    for i in insts:
        seen[i.host].append(i)
    for host, members in seen.items():
        acc = members[0].accelerator
        tool = NPU_TOOLS.get(acc)
        say(f"== host {host} ({acc}) ==")
        if tool is None:
            say(f"no accelerator tool for `{acc}` hosts (sim fleets have no cards to show)")
            continue
        if members[0].docker_host is None and shutil.which(tool[0]):
            code, out = run(tool, None)
        else:
            vllm = next((m for m in members if m.kind == "vllm"), None)
            if vllm is None:
                say(f"{tool[0]} is not on PATH here and no vLLM container of {host} is selected")
                ok = False
                continue
            say(f"({tool[0]} via docker exec {vllm.container})")
            try:
                code, out = run(docker.exec_argv(vllm.container, *tool), vllm.docker_host)
            except OSError as e:
                code, out = 127, str(e)
        say(out.rstrip())
        if code != 0:
            say(f"{tool[0]} is not available on {host} (exit {code})")
            ok = False
    return ok
