"""Subprocesses of the benchmark (the fleet, the gateway, the slice keeper) and their CPU
accounting."""

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
from dataclasses import dataclass, field
from pathlib import Path

from bench.minihttp import MiniClient
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
    client: MiniClient = field(init=False)

    def __post_init__(self) -> None:
        self.client = MiniClient("127.0.0.1", self.info["admin"])

    @property
    def ports(self) -> list[int]:
        return self.info["ports"]

    @property
    def urls(self) -> list[str]:
        return [f"http://127.0.0.1:{p}" for p in self.ports]

    async def admin(self, path: str, body: dict | None = None) -> dict:
        status, _, data = await self.client.request("POST", path, json.dumps(body or {}).encode())
        if status != 200:
            raise RuntimeError(f"fleet admin {path}: {status} {data[:200]!r}")
        return json.loads(data)

    async def reset(self) -> None:
        await self.admin("/_admin/reset")

    async def kill(self, ids: list[int], mode: str) -> None:
        await self.admin("/_admin/kill", {"ids": ids, "mode": mode})

    async def stats(self) -> list[dict]:
        return (await self.admin("/_admin/stats"))["instances"]

    def stop(self) -> None:
        stop_process(self.proc)


def stop_process(proc: subprocess.Popen, grace_s: float = 5.0) -> None:
    """SIGTERM, and SIGKILL if ``proc`` is still there after ``grace_s``."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(grace_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def start_fleet(spec: FleetSpec) -> FleetProc:
    proc = subprocess.Popen(
        [sys.executable, "-m", "bench.fleet", "--spec", json.dumps(spec.to_dict())],
        cwd=REPO,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        text=True,
    )
    line = proc.stdout.readline()
    if not line:
        proc.wait(5)
        raise RuntimeError(f"fleet did not start (exit {proc.returncode})")
    return FleetProc(proc, json.loads(line))


def gateway_config(
    urls: list[str], mode: str, extra: dict | None = None, means: list[float] | None = None
) -> dict:
    """The gateway config for ``mode``, in the format of docs/architecture.md.

    Upstreams carry their topology (host/card/vllm), 3 PaddleX per vLLM and 2 vLLM per card as in
    the seed's matrix, so topology-aware policies have something to read.
    """
    ups = []
    for i, u in enumerate(urls):
        card = i // 6
        vllm = 9025 + card + ((i % 6) // 3) * 10
        ups.append(
            {
                "url": u,
                "host": "local",
                "card": card,
                "vllm": f"http://127.0.0.1:{vllm}",
                "container": f"paddle-bench-{i}",
            }
        )
    cfg = {
        "upstreams": ups,
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
    for k, v in (extra or {}).items():
        if isinstance(v, dict) and isinstance(cfg.get(k), dict):
            cfg[k] = {**cfg[k], **v}
        else:
            cfg[k] = v
    return cfg


@dataclass
class GatewayProc:
    proc: subprocess.Popen
    port: int
    log_path: Path
    config_path: Path

    def stop(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:  # no need for a graceful drain: the run is over and measured
                self.proc.wait(0.3)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()

    def log_tail(self, n: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""


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


async def start_gateway(
    cfg: dict, workdir: Path, name: str, timeout_s: float = 30.0, src: Path | None = None
) -> GatewayProc:
    workdir.mkdir(parents=True, exist_ok=True)
    cfg_path = workdir / f"gateway-{name}.json"
    cfg_path.write_text(json.dumps(cfg, indent=1))
    log_path = workdir / f"gateway-{name}.log"
    port = free_port()
    env = gateway_env(src)
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "gateway",
                "--config",
                str(cfg_path),
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
            ],
            cwd=src or REPO,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
    gw = GatewayProc(proc, port, log_path, cfg_path)
    client = MiniClient("127.0.0.1", port)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"gateway exited {proc.returncode}:\n{gw.log_tail()}")
        try:
            status, _, _ = await client.request("GET", "/health")
            if status == 200:
                await client.close()
                return gw
        except OSError:
            pass
        except Exception:
            pass
        await asyncio.sleep(0.1)
    gw.stop()
    raise RuntimeError(f"gateway not healthy after {timeout_s}s:\n{gw.log_tail()}")


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
        client = MiniClient("127.0.0.1", self.port)
        try:
            status, _, data = await client.request("GET", "/health")
        finally:
            await client.close()
        if status != 200:
            raise RuntimeError(f"keeper /health: {status} {data[:200]!r}")
        return json.loads(data)

    def stop(self) -> None:
        stop_process(self.proc)


async def start_keeper(
    urls: list[str], workdir: Path, src: Path | None = None, timeout_s: float = 30.0
) -> KeeperProc:
    """A slice keeper for ``urls`` on a free loopback port, healthy when this returns."""
    port = free_port()
    env = gateway_env(src)
    log_path = workdir / "keeper.log"
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "gateway.keeper", "--upstreams", ",".join(urls),
             "--host", "127.0.0.1", "--port", str(port)],
            cwd=src or REPO, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            env=env, start_new_session=True,
        )  # fmt: skip
    keeper = KeeperProc(proc, port, log_path)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"keeper exited {proc.returncode}:\n{log_path.read_text()[-2000:]}")
        with contextlib.suppress(OSError, RuntimeError):
            await keeper.stats()
            return keeper
        await asyncio.sleep(0.1)
    keeper.stop()
    raise RuntimeError(f"keeper not healthy after {timeout_s}s")


def tmpdir() -> Path:
    return Path(tempfile.mkdtemp(prefix="bench-balancing-"))
