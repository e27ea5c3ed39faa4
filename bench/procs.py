"""Subprocesses of the benchmark (the fleet, the gateway, the slice keeper) and how they are
started, asked and stopped (control calls over httpx; the load itself goes through
:mod:`bench.minihttp`, see there why)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import httpx

from bench.workload import FleetSpec

REPO = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class FleetProc:
    proc: subprocess.Popen
    info: dict

    @property
    def ports(self) -> list[int]:
        return self.info["ports"]

    @property
    def urls(self) -> list[str]:
        return [f"http://127.0.0.1:{p}" for p in self.ports]

    async def admin(self, path: str, body: dict | None = None) -> dict:
        url = f"http://127.0.0.1:{self.info['admin']}{path}"
        async with httpx.AsyncClient(trust_env=False, timeout=60) as client:
            answer = await client.post(url, json=body or {})
        if answer.status_code != 200:
            raise RuntimeError(f"fleet admin {path}: {answer.status_code} {answer.text[:200]!r}")
        return answer.json()

    async def reset(self) -> None:
        await self.admin("/_admin/reset")

    async def kill(self, ids: list[int], mode: str) -> None:
        await self.admin("/_admin/kill", {"ids": ids, "mode": mode})

    async def stats(self) -> list[dict]:
        return (await self.admin("/_admin/stats"))["instances"]

    async def log(self, clear: bool = True) -> list[dict]:
        """Every instance's parse log (``bench/fleet.py``), emptied when ``clear``."""
        return (await self.admin("/_admin/log", {"clear": clear}))["log"]

    async def pages(self) -> int:
        """The pages every instance has parsed so far."""
        return sum(s["pages"] for s in await self.stats())

    def stop(self) -> None:
        stop_group(self.proc, 5.0)


def stop_group(proc: subprocess.Popen, grace_s: float) -> None:
    """SIGTERM to the process group ``proc`` leads (its session, see :func:`spawn`), SIGKILL if
    it is still there after ``grace_s``."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(grace_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def spawn(cmd: list[str], log_path: Path, **popen: Any) -> subprocess.Popen:
    """``cmd`` in a session of its own (a group :func:`stop_group` stops whole), stdin closed,
    stdout and stderr in ``log_path``."""
    with open(log_path, "w") as log:
        return subprocess.Popen(
            cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True, **popen,
        )  # fmt: skip


def log_tail(path: Path, n: int = 30) -> str:
    """The last ``n`` lines of a process's log ("" if there is none)."""
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return ""


async def until_healthy(
    url: str, proc: subprocess.Popen, timeout_s: float, name: str, log_path: Path
) -> None:
    """Poll ``GET url`` until it answers 200; a RuntimeError with the end of the log if ``proc``
    exits or does not answer in ``timeout_s`` (then it is stopped)."""
    deadline = time.monotonic() + timeout_s
    async with httpx.AsyncClient(trust_env=False, timeout=5) as client:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"{name} exited {proc.returncode}:\n{log_tail(log_path)}")
            with contextlib.suppress(httpx.HTTPError):
                if (await client.get(url)).status_code == 200:
                    return
            await asyncio.sleep(0.1)
    stop_group(proc, 5.0)
    raise RuntimeError(f"{name} not healthy after {timeout_s}s:\n{log_tail(log_path)}")


def start_fleet(spec: FleetSpec) -> FleetProc:
    proc = subprocess.Popen(
        [sys.executable, "-m", "bench.fleet", "--spec", json.dumps(asdict(spec))],
        cwd=REPO,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,  # a group of its own, as every process here: stop_group stops it
    )
    line = proc.stdout.readline()
    if not line:
        proc.wait(5)
        raise RuntimeError(f"fleet did not start (exit {proc.returncode})")
    return FleetProc(proc, json.loads(line))


QUIET = {"health": {"enabled": False}, "reload": {"enabled": False}}
"""Config sections that turn off health probes and reload polling: no traffic but the measured
one reaches the gateway."""


def gateway_config(urls: list[str], mode: str, *extras: dict) -> dict:
    """The gateway config for ``mode``, in the format of docs/architecture.md, each of
    ``extras`` merged into it in turn (a section's keys into the section).

    Upstreams carry their topology (host/card/vllm), 3 PaddleX per vLLM and 2 vLLM per card as in
    the seed's matrix, so topology-aware policies have something to read.
    """
    cfg = {
        "upstreams": [
            {
                "url": u,
                "host": "local",
                "card": i // 6,
                "vllm": f"http://127.0.0.1:{9025 + i // 6 + (i % 6) // 3 * 10}",
                "container": f"paddle-bench-{i}",
            }
            for i, u in enumerate(urls)
        ],
        "load_balance": {"mode": mode, "max_attempts": 12},
        "http": {
            "timeout_s": 300,
            "pool_max_connections": 1000,
            "pool_max_keepalive_connections": 500,
        },
        "postprocess": {
            "strip_images": True,
            "remove_repeated_hui": {"enabled": True, "min_repeats": 2},
        },
    }
    for k, v in (pair for extra in extras for pair in extra.items()):
        if isinstance(v, dict):  # a new dict: the config shares nothing with QUIET or the caller
            v = {**(cfg[k] if isinstance(cfg.get(k), dict) else {}), **v}
        cfg[k] = v
    return cfg


@dataclass
class GatewayProc:
    proc: subprocess.Popen
    port: int
    log_path: Path

    def stop(self) -> None:
        stop_group(self.proc, 0.3)  # no need for a graceful drain: the run is over and measured

    def log_tail(self, n: int = 30) -> str:
        return log_tail(self.log_path, n)


def snapshot_gateway(workdir: Path) -> Path:
    """Copy ``gateway/`` into ``workdir/src`` and return that folder.

    Every gateway of one run starts from this copy, so a run measures one version of the gateway
    even while someone edits the tree.
    """
    src = workdir / "src"
    if src.exists():
        shutil.rmtree(src)
    shutil.copytree(
        REPO / "gateway", src / "gateway", ignore=shutil.ignore_patterns("__pycache__", "*.pyc")
    )
    return src


def gateway_env(src: Path | None) -> dict[str, str]:
    """The environment of a process of the gateway's package: unbuffered, importing ``src``'s
    copy of ``gateway/`` when given."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    if src is not None:
        env["PYTHONPATH"] = str(src)
    return env


def gateway_import_error(src: Path) -> str | None:
    """None if ``python -m gateway`` can import from ``src``; else the error's last lines."""
    r = subprocess.run(
        [sys.executable, "-c", "import gateway.__main__"],
        cwd=src,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(src)},
        timeout=60,
    )
    if r.returncode == 0:
        return None
    return "\n".join((r.stderr or r.stdout).strip().splitlines()[-3:])


def launch_gateway(
    cfg: dict, workdir: Path, name: str, src: Path | None = None, extra_args: tuple[str, ...] = ()
) -> tuple[subprocess.Popen, int, Path]:
    """``python -m gateway`` with ``cfg`` on a free loopback port, in its own session, its
    config and output in ``workdir``: (process, port, log path). Not waited for."""
    workdir.mkdir(parents=True, exist_ok=True)
    cfg_path = workdir / f"gateway-{name}.json" if name else workdir / "gateway.json"
    cfg_path.write_text(json.dumps(cfg, indent=1))
    log_path = cfg_path.with_suffix(".log")
    port = free_port()
    cmd = [sys.executable, "-m", "gateway", "--config", str(cfg_path)]
    cmd += ["--host", "127.0.0.1", "--port", str(port), *extra_args]
    proc = spawn(cmd, log_path, cwd=src or REPO, env=gateway_env(src))
    return proc, port, log_path


async def start_gateway(
    cfg: dict, workdir: Path, name: str, timeout_s: float = 30.0, src: Path | None = None
) -> GatewayProc:
    """:func:`launch_gateway`, healthy when this returns."""
    proc, port, log_path = launch_gateway(cfg, workdir, name, src)
    await until_healthy(f"http://127.0.0.1:{port}/health", proc, timeout_s, "gateway", log_path)
    return GatewayProc(proc, port, log_path)


@dataclass
class KeeperProc:
    """``python -m gateway.keeper`` in front of the fleet; it outlives gateway restarts."""

    proc: subprocess.Popen
    port: int
    log_path: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def stats(self) -> dict:
        async with httpx.AsyncClient(trust_env=False, timeout=60) as client:
            answer = await client.get(self.url + "/health")
        if answer.status_code != 200:
            raise RuntimeError(f"keeper /health: {answer.status_code} {answer.text[:200]!r}")
        return answer.json()

    def stop(self) -> None:
        stop_group(self.proc, 5.0)


async def start_keeper(
    urls: list[str], workdir: Path, src: Path | None = None, timeout_s: float = 30.0
) -> KeeperProc:
    """A slice keeper for ``urls`` on a free loopback port, healthy when this returns."""
    port = free_port()
    log_path = workdir / "keeper.log"
    cmd = [sys.executable, "-m", "gateway.keeper", "--upstreams", ",".join(urls)]
    cmd += ["--host", "127.0.0.1", "--port", str(port)]
    proc = spawn(cmd, log_path, cwd=src or REPO, env=gateway_env(src))
    keeper = KeeperProc(proc, port, log_path)
    await until_healthy(keeper.url + "/health", proc, timeout_s, "keeper", log_path)
    return keeper


def tmpdir() -> Path:
    return Path(tempfile.mkdtemp(prefix="bench-balancing-"))
