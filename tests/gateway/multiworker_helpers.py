"""``python -m gateway --workers N`` in a child process on a loopback port, for the tests.

Usage::

    with GatewayProcess(config_path, tmp_path / "gw.log", workers=2) as gw:
        gw.client.get("/upstreams")
        gw.answers_from_every_worker()      # {worker index: its /upstreams document}
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[2]
_RUNNING = re.compile(r"Uvicorn running on http://127\.0\.0\.1:(\d+)")


class GatewayProcess:
    """The gateway as ``python -m gateway`` runs it; port 0, read back from its log."""

    def __init__(
        self,
        config_path: Path,
        log_path: Path,
        workers: int | None = 2,
        port: int = 0,
        handover: Path | None = None,
        serving_file: Path | None = None,
    ) -> None:
        """``workers`` None: the gateway's own default (one per core); ``handover``: the unix
        socket path of the listening sockets' handover (``--handover``); ``serving_file``:
        ``--serving-file``."""
        self.log_path = log_path
        self._log = open(log_path, "ab")  # noqa: SIM115 - closed in stop()
        count = [] if workers is None else ["--workers", str(workers)]
        if handover is not None:
            count += ["--handover", str(handover)]
        if serving_file is not None:
            count += ["--serving-file", str(serving_file)]
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "gateway", "--config", str(config_path), "--host",
             "127.0.0.1", "--port", str(port), *count, "--log-level", "info"],
            cwd=ROOT, stdout=self._log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        self.port = self._wait_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.client = httpx.Client(base_url=self.url, timeout=30, trust_env=False)
        self.wait_healthy()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def _wait_port(self) -> int:
        deadline = time.monotonic() + 30
        while True:
            match = _RUNNING.search(self.log())
            if match:
                return int(match.group(1))
            assert self.proc.poll() is None, f"gateway exited: {self.log()[-3000:]}"
            assert time.monotonic() < deadline, f"gateway did not start: {self.log()[-3000:]}"
            time.sleep(0.02)

    def wait_healthy(self) -> None:
        deadline = time.monotonic() + 30
        while True:
            assert self.proc.poll() is None, f"gateway exited: {self.log()[-3000:]}"
            try:
                if self.client.get("/health").status_code == 200:
                    return
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "gateway did not answer /health"
            time.sleep(0.02)

    def fresh_get(self, path: str) -> httpx.Response:
        """GET on a new connection (the kernel spreads connections over the workers)."""
        with httpx.Client(base_url=self.url, timeout=30, trust_env=False) as client:
            return client.get(path)

    def answers_from_every_worker(
        self, count: int, limit_s: float = 30.0, path: str = "/upstreams"
    ) -> dict[int, dict[str, Any]]:
        """``path`` (a JSON route) as answered by each of ``count`` workers."""
        seen: dict[int, dict[str, Any]] = {}
        deadline = time.monotonic() + limit_s
        while len(seen) < count:
            assert time.monotonic() < deadline, f"only workers {sorted(seen)} answered"
            try:
                doc = self.fresh_get(path).json()
            except httpx.TransportError:
                time.sleep(0.02)
                continue
            seen[doc["workers"]["this"]] = doc
        return seen

    def children(self) -> list[int]:
        """The pids of the gateway process's children (its workers)."""
        out: list[int] = []
        for task in os.listdir(f"/proc/{self.proc.pid}/task"):
            with open(f"/proc/{self.proc.pid}/task/{task}/children") as handle:
                out.extend(int(pid) for pid in handle.read().split())
        return out

    def kill(self) -> None:
        """SIGKILL, as a crash would."""
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)

    def terminate(self, timeout: float = 30.0) -> int:
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout)

    def stop(self) -> None:
        self.client.close()
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self._log.close()

    def __enter__(self) -> GatewayProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def pid_alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False
